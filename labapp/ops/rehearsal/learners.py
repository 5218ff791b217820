"""The simulated class: learners who sign up with the join code, chat, run Labs 1 and 5 with a
prediction and hand each in; an instructor who reads the gradebook. Everything a learner does goes
over HTTP and the chat's websocket through nginx, as a browser's would; what happened to each run and
hand-in is then read from the shared database (``report``).

The chat reuses the load test's tab (``labapp.ops.loadtest.traffic``): every frame checked as its own,
the client's timings sent back as the page does. The chat socket lives as chat.js keeps it: opened
with the chat page (here: at the learner's first question) and, 2 s after it closes, opened again,
through nginx, to whichever web process answers. chat.js leaves an answer cut off by a closed socket
as it was (its partial text, its status "디코드 중" with the clock still running, its stop button; no
"다른 설정으로 다시 묻기" on it) and keeps the question in the form; the learner sends the form again once
the page says it is connected ("연결됨"): so does this one.

A form whose POST got no answer or a 5xx (nginx's 502 when the web process died with the request in
it) is loaded again and sent again, at most twice more, as a person reloads; a sign-up sent again
after the first one made the account says the name is taken, and the learner signs in instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import WebSocketException
from websockets.protocol import State

from labapp.ops.loadtest.cast import FINISHED, _session_cookie
from labapp.ops.loadtest.plan import AskResult, LoadPlan, RoundResult
from labapp.ops.loadtest.traffic import RECONNECT_S, _open, _Tab, site_origin, socket_url

LABS = (1, 5)
PREDICTIONS = {1: 6.0, 5: 3.0}  # a learner's guess of each lab's key number (seconds; times faster)
QUESTIONS_FILE = Path(__file__).resolve().parents[3] / "rag" / "eval" / "chapter_qa_ko.jsonl"
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
Shown = Callable[[], Coroutine[Any, Any, bool]]  # does the page loaded again show the form's effect?
FORM_TRIES = 3  # a form sent again after no answer or a 5xx, as a person reloads: at most this often in all
SOCKET_WAIT_S = 120.0  # a question waits this long for the page's socket to be open again
POLL_S = 10.0  # a waiting learner's page is refreshed this often (the page's own socket aside)
GRADEBOOK_EVERY_S = 20.0
ASK_TRIES = 3  # a question cut off by a closed socket is asked again, at most this often
# What each chat question asks for (the page's default is 128 tokens): 64 tokens stream for about
# 0.3 s on the scripted chat engine (different words: cluster.SCRIPTED_CHAT_WORDS), long enough for
# the web fault to land mid-answer.
CHAT = LoadPlan(max_tokens=64, top_k=2)


@dataclass
class Learner:
    number: int
    username: str
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    user_id: int | None = None
    signed_up: bool = False
    runs_posted: dict[int, float] = field(default_factory=dict)  # lab → when its run was accepted (time.time())
    jobs: dict[int, int] = field(default_factory=dict)  # lab → the job the run made
    handed: dict[int, bool] = field(default_factory=dict)  # lab → the hand-in was accepted
    asks: list[AskResult] = field(default_factory=list)
    cut_asks: int = 0  # questions cut off by a closed socket (asked again)
    retried: list[str] = field(default_factory=list)  # forms sent again: "POST <path>: <status> → <status>"
    errors: list[str] = field(default_factory=list)


@dataclass
class Class:
    """The class the instructor made: its id, join code and the instructor's session cookie."""

    run: str
    classroom_id: int
    join_code: str
    instructor_cookie: str
    learners: list[Learner]
    chat: RoundResult = field(default_factory=RoundResult)  # every ask's frames, misdelivered ones, socket errors
    pages: list[tuple[str, int, float]] = field(default_factory=list)  # path, status (0: no answer), ms
    gradebook: dict[str, Any] = field(default_factory=dict)
    reopened: int = 0  # chat sockets opened again after one closed
    browsers: dict[int, Browser] = field(default_factory=dict)  # learner number → their browser, once arrived


def class_create(learners: int, chat_url: str) -> Class:
    """The instructor (signed in), the class with Labs 1 and 5 assigned, and the chat engine registered:
    vllm-router in front of the chat pool, as an engine with the chat role (the configured engine measures)."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from bench import engines
    from bench.models import Engine
    from labapp.classes import services as class_services
    from labapp.models import Assignment

    run = f"{time.strftime('%H%M%S')}{secrets.token_hex(2)}"
    teacher = User.objects.create_user(username=f"class-{run}-teacher", is_staff=True)
    classroom = class_services.classroom_create(name=f"rehearsal {run}", instructor=teacher)
    now = timezone.now()
    for lab in LABS:
        class_services.assignment_create(
            classroom=classroom,
            lab=lab,
            opens_at=now - timedelta(hours=1),
            due_at=now + timedelta(days=1),
            late_rule=Assignment.LateRule.ACCEPT,
        )
    if not Engine.objects.filter(base_url=chat_url).exists():
        engines.engine_add(user=teacher, name="chat (vllm-router)", base_url=chat_url, role=Engine.Role.CHAT)
    people = [Learner(n, f"c{run}-{n:03d}") for n in range(learners)]
    return Class(run, classroom.pk, classroom.join_code, _session_cookie(teacher), people)


def _token(page: str) -> str:
    found = CSRF.search(page)
    return found.group(1) if found else ""


class Browser:
    """One learner's browser: a cookie jar, every request timed and its status kept, and the chat page's socket."""

    def __init__(self, web: str, klass: Class, learner: Learner) -> None:
        self.web, self.klass, self.learner = web, klass, learner
        self.http = httpx.AsyncClient(base_url=web, timeout=120, follow_redirects=False)
        self.socket: ClientConnection | None = None  # the chat page's socket, while open
        self.tab: _Tab | None = None  # what was asked on it
        self.upstream = ""  # the web process behind the open socket (nginx's X-Lab-Upstream: host:port)
        self.sockets: list[tuple[float, str]] = []  # each socket opened: when (monotonic) and its web process
        self.asking: AskResult | None = None  # the question on the socket now
        self.keeper: asyncio.Task[None] | None = None
        self.leaving = False

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        began = time.perf_counter()
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.klass.pages.append((path, 0, round((time.perf_counter() - began) * 1000, 1)))
            self.learner.errors.append(f"{method} {path}: {type(exc).__name__}: {exc}")
            return None
        self.klass.pages.append((path, response.status_code, round((time.perf_counter() - began) * 1000, 1)))
        return response

    async def form(
        self, page: str, action: str, data: dict[str, str], *, shows_done: Shown | None = None
    ) -> httpx.Response | None:
        """GET the page, POST its form with the page's CSRF token (what a browser submits). No answer or
        a 5xx (the web process died with the request in it): load the page again and send it again, as a
        person reloads, ``FORM_TRIES`` times in all, unless the page loaded again shows what the form
        did already (``shows_done``: then that page is the answer). The errors of a try that was
        followed by another are kept in ``retried``, not ``errors``."""
        seen: list[str] = []
        answer: httpx.Response | None = None
        for attempt in range(FORM_TRIES):
            if attempt:
                await asyncio.sleep(RECONNECT_S)  # nginx's error page read, the page reloaded
            errors = len(self.learner.errors)
            shown = await self.request("GET", page)
            if attempt and shown is not None and shown.status_code == 200 and shows_done and await shows_done():
                seen.append("the page shows it done")
                answer = shown
                break
            if shown is not None and shown.status_code == 200:
                answer = await self.request("POST", action, data={"csrfmiddlewaretoken": _token(shown.text), **data})
            else:
                answer = None
            status = answer.status_code if answer is not None else 0
            seen.append(str(status or (shown.status_code if shown is not None else "no answer")))
            if 0 < status < 500 or attempt == FORM_TRIES - 1:
                break
            del self.learner.errors[errors:]  # tried again: the try's failure is in ``retried``
        if len(seen) > 1:
            self.learner.retried.append(f"POST {action}: {' → '.join(seen)}")
        return answer

    @property
    def cookie(self) -> str:
        from django.conf import settings

        return f"{settings.SESSION_COOKIE_NAME}={self.http.cookies.get(settings.SESSION_COOKIE_NAME, '')}"

    async def chat_socket(self) -> ClientConnection:
        """The chat page's socket, open: the first call opens the page (its socket kept as chat.js keeps
        it, ``_keep``); later ones wait while it is closed, as a learner waits for "연결됨"."""
        if self.keeper is None:
            self.keeper = asyncio.create_task(self._keep())
        deadline = time.monotonic() + SOCKET_WAIT_S
        while self.socket is None or self.socket.state is not State.OPEN:
            if time.monotonic() > deadline:
                raise OSError(f"the chat page stayed disconnected for {SOCKET_WAIT_S:.0f} s")
            await asyncio.sleep(0.05)
        return self.socket

    async def _keep(self) -> None:
        """chat.js's ``connect``: open the socket; 2 s after it closes (or fails to open), open it again."""
        learner, klass = self.learner, self.klass
        url, origin = socket_url(self.web, "/ws/chat/"), site_origin(self.web)
        while not self.leaving:
            try:
                socket = await _open(url, origin, self.cookie, learner.number, klass.chat)
            except (OSError, WebSocketException) as exc:
                klass.chat.socket_errors.append(f"learner {learner.number} opening: {type(exc).__name__}: {exc}")
                await asyncio.sleep(RECONNECT_S)
                continue
            self.tab = _Tab(learner.number, learner.username, klass.chat)
            tried = socket.response.headers.get("X-Lab-Upstream", "") if socket.response else ""
            # nginx lists every process it tried ("dead:port, live:port" after a kill): the last one answered.
            self.upstream = tried.split(",")[-1].strip()
            klass.reopened += bool(self.sockets)
            self.sockets.append((time.monotonic(), self.upstream))
            self.socket = socket
            await socket.wait_closed()
            self.socket = None
            if not self.leaving:
                await asyncio.sleep(RECONNECT_S)

    async def close(self) -> None:
        self.leaving = True
        await self.http.aclose()
        if self.socket is not None:
            with contextlib.suppress(Exception):
                await self.socket.close()
        if self.keeper is not None:
            self.keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.keeper


async def _ask(web: str, browser: Browser, question: str, n: int) -> None:
    """One question on the learner's chat socket. One closed mid-answer (its web process died) is
    recorded as cut; the learner sends the form again once the page has its socket back (chat.js
    reconnects after 2 s and refuses to send meanwhile). A question never answered in every try is lost."""
    learner, klass = browser.learner, browser.klass
    ask = AskResult(learner.number, "", "")
    for attempt in range(ASK_TRIES):
        client_id = f"l{learner.number}q{n}t{attempt}"
        ask = AskResult(learner.number, client_id, f"CR{klass.run}-{client_id}")
        try:
            socket = await browser.chat_socket()
            assert browser.tab is not None
            browser.asking = ask
            await browser.tab.ask(socket, ask, f"{question} ({ask.marker})", CHAT)
        except (OSError, WebSocketException, ValueError) as exc:
            if ask.status == "done":  # closed after its done frame, before the timings' answer: answered
                break
            ask.error = f"{type(exc).__name__}: {exc}"
            if ask.answer_id is not None:  # it had started: an answer cut off mid-stream
                ask.status = "closed"
                learner.cut_asks += 1
                learner.asks.append(ask)
                klass.chat.asks.append(ask)
                klass.chat.socket_errors.append(f"learner {learner.number}: {ask.error}")
            await asyncio.sleep(0.1)  # the page notices the close before the learner sends again
            continue
        finally:
            browser.asking = None
        break
    if ask.status != "closed":  # answered, or never answered in every try: lost
        learner.asks.append(ask)
        klass.chat.asks.append(ask)


def _job_of(user_id: int, lab: int) -> tuple[int, str] | None:
    from bench.models import BenchJob

    job = BenchJob.objects.filter(owner_id=user_id, lab=lab).order_by("-pk").values_list("pk", "status").first()
    return (int(job[0]), str(job[1])) if job else None


def _user_id(username: str) -> int | None:
    from django.contrib.auth.models import User

    return User.objects.filter(username=username).values_list("pk", flat=True).first()


def _name_taken(page: str) -> bool:
    """The sign-up form says the name is taken (Django's own message, in the site's language)."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.utils import translation
    from django.utils.html import escape

    with translation.override(settings.LANGUAGE_CODE):
        taken = str(User._meta.get_field("username").error_messages["unique"])
    return escape(taken) in page


async def _signup(browser: Browser) -> bool:
    """Sign up with the join code. A sign-up sent again (``Browser.form``) after the first one made the
    account says the name is taken: the learner signs in with the password just chosen."""
    learner, klass = browser.learner, browser.klass
    form = {"join_code": klass.join_code, "username": learner.username, "email": ""}
    form |= {"password1": learner.password, "password2": learner.password}
    tried = len(learner.retried)
    signed = await browser.form("/accounts/signup/", "/accounts/signup/", form)
    if signed is not None and signed.status_code == 200 and len(learner.retried) > tried and _name_taken(signed.text):
        credentials = {"username": learner.username, "password": learner.password}
        signed = await browser.form("/accounts/login/", "/accounts/login/", credentials)
        learner.retried.append(f"sign-up: the name was taken (made by the try cut off); signed in: {_status(signed)}")
    if signed is not None and signed.status_code == 302:
        return True
    learner.errors.append(f"sign-up: {_status(signed)}")
    return False


def _status(response: httpx.Response | None) -> str:
    return str(response.status_code) if response is not None else "no answer"


async def learner_run(
    web: str, klass: Class, learner: Learner, questions: list[str], arrive_s: float, limit_s: float
) -> None:
    """Sign up, then each lab: run it with a prediction, chat while it waits and runs, hand it in once it ended."""
    await asyncio.sleep(arrive_s)
    browser = klass.browsers[learner.number] = Browser(web, klass, learner)
    try:
        learner.signed_up = await _signup(browser)
        if not learner.signed_up:
            return
        learner.user_id = await asyncio.to_thread(_user_id, learner.username)
        await browser.request("GET", "/labs/")
        for k, lab in enumerate(LABS):
            await _lab(web, browser, lab, questions[(learner.number * 2 + k) % len(questions)], limit_s)
    finally:
        await browser.close()


async def _lab(web: str, browser: Browser, lab: int, question: str, limit_s: float) -> None:
    learner = browser.learner
    assert learner.user_id is not None
    deadline = time.monotonic() + limit_s
    for _attempt in (1, 2):  # a run that failed (its engine killed, say) is run again, as a learner would
        status = await _lab_run(web, browser, lab, question, deadline)
        if status != "failed":
            break
    if status is None:
        return
    if status not in FINISHED:
        learner.errors.append(f"lab {lab}: run #{learner.jobs[lab]} still {status} at the class's time limit")
        return
    reflection = f"Lab {lab}: what I measured, and why it differs from my prediction ({learner.username})."
    handed = await browser.form(f"/labs/{lab}/", f"/labs/{lab}/submit/", {"reflection": reflection})
    learner.handed[lab] = handed is not None and handed.status_code == 302
    if not learner.handed[lab]:
        learner.errors.append(f"lab {lab} hand-in: {handed.status_code if handed is not None else 'no answer'}")


async def _lab_run(web: str, browser: Browser, lab: int, question: str, deadline: float) -> str | None:
    """Post one run, ask a question while it waits, poll until it ends: its last status (None: not made)."""
    learner = browser.learner
    user_id = learner.user_id
    assert user_id is not None
    before = (await asyncio.to_thread(_job_of, user_id, lab) or (0, ""))[0]

    async def run_shown() -> bool:
        """The lab page shows a run newer than the last one (the page reads it as this does): a run
        whose answer was lost was made; a person does not press the button again."""
        return (await asyncio.to_thread(_job_of, user_id, lab) or (0, ""))[0] != before

    prediction = {"prediction": f"{PREDICTIONS[lab]:g}"}
    ran = await browser.form(f"/labs/{lab}/", f"/labs/{lab}/run/", prediction, shows_done=run_shown)
    if ran is None or ran.status_code not in (200, 302) or (ran.status_code == 200 and not await run_shown()):
        learner.errors.append(f"lab {lab} run: {ran.status_code if ran is not None else 'no answer'}")
        return None
    learner.runs_posted[lab] = time.time()
    found = await asyncio.to_thread(_job_of, user_id, lab)
    if found is None:
        learner.errors.append(f"lab {lab}: the run was accepted but made no job")
        return None
    learner.jobs[lab] = found[0]
    asked = asyncio.create_task(_ask(web, browser, question, lab))  # a question while the run waits
    status = found[1]
    while status not in FINISHED and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        await browser.request("GET", f"/labs/{lab}/")
        status = (await asyncio.to_thread(_job_of, user_id, lab) or (0, "lost"))[1]
    await asked
    return status


async def instructor_run(web: str, klass: Class, stop: asyncio.Event) -> None:
    """The instructor keeps the gradebook open: read every 20 s while the class works, and once at the end."""
    path = f"/classes/{klass.classroom_id}/results/"
    reads: list[float] = []
    async with httpx.AsyncClient(base_url=web, timeout=120, headers={"Cookie": klass.instructor_cookie}) as http:

        async def read() -> httpx.Response | None:
            began = time.perf_counter()
            try:
                response = await http.get(path)
            except httpx.HTTPError:
                klass.pages.append((path, 0, round((time.perf_counter() - began) * 1000, 1)))
                return None
            reads.append(round((time.perf_counter() - began) * 1000, 1))
            klass.pages.append((path, response.status_code, reads[-1]))
            return response

        while not stop.is_set():
            await read()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), GRADEBOOK_EVERY_S)
        last = await read()
    shown = last.text if last is not None and last.status_code == 200 else ""
    klass.gradebook = {
        "reads": len(reads),
        "last_status": last.status_code if last is not None else 0,
        "learners_listed": sum(f">{p.username}<" in shown for p in klass.learners),
        "ms": reads,
    }


async def class_run(
    web: str,
    klass: Class,
    *,
    arrive_over_s: float,
    limit_s: float,
    beside: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> float:
    """Every learner (arriving over ``arrive_over_s``) and the instructor, and ``beside`` (the faults)
    meanwhile; the class's seconds."""
    questions = [json.loads(line)["question"] for line in QUESTIONS_FILE.read_text().splitlines() if line.strip()]
    began = time.monotonic()
    stop = asyncio.Event()
    teacher = asyncio.create_task(instructor_run(web, klass, stop))
    extra = asyncio.create_task(beside()) if beside is not None else None
    spacing = arrive_over_s / max(1, len(klass.learners))
    tasks = [
        asyncio.create_task(learner_run(web, klass, learner, questions, n * spacing, limit_s))
        for n, learner in enumerate(klass.learners)
    ]
    try:
        async with asyncio.timeout(limit_s + 300):
            ended = await asyncio.gather(*tasks, return_exceptions=True)
        for learner, outcome in zip(klass.learners, ended, strict=True):
            if isinstance(outcome, BaseException):
                learner.errors.append(f"stopped by {type(outcome).__name__}: {outcome}")
    except TimeoutError:
        for learner in klass.learners:
            learner.errors.append("the class's time limit passed")
    finally:
        for task in tasks:
            task.cancel()
        stop.set()
        await teacher
        if extra is not None:
            await extra  # a fault still following its run is waited for: its record is the report's
    return round(time.monotonic() - began, 1)
