"""The simulated class: learners who sign up with the join code, chat, run Labs 1 and 5 with a
prediction and hand each in; an instructor who reads the gradebook. Everything a learner does goes
over HTTP and the chat's websocket through nginx, as a browser's would; what happened to each run and
hand-in is then read from the shared database (``report``).

The chat reuses the load test's tab (``labapp.ops.loadtest.traffic``): every frame checked as its own,
the client's timings sent back as the page does. A socket that closes (its web process died) is
opened again after 2 s, as chat.js does, and the question asked again: the page offers that.
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

from labapp.ops.loadtest.cast import FINISHED, _session_cookie
from labapp.ops.loadtest.plan import AskResult, LoadPlan, RoundResult
from labapp.ops.loadtest.traffic import RECONNECT_S, _open, _Tab, site_origin, socket_url

LABS = (1, 5)
PREDICTIONS = {1: 6.0, 5: 3.0}  # a learner's guess of each lab's key number (seconds; times faster)
QUESTIONS_FILE = Path(__file__).resolve().parents[3] / "rag" / "eval" / "chapter_qa_ko.jsonl"
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
POLL_S = 10.0  # a waiting learner's page is refreshed this often (the page's own socket aside)
GRADEBOOK_EVERY_S = 20.0
ASK_TRIES = 3  # a question cut off by a closed socket is asked again, at most this often
CHAT = LoadPlan(max_tokens=32, top_k=2)  # what each chat question asks for


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
    """One learner's browser: a cookie jar, every request timed and its status kept."""

    def __init__(self, web: str, klass: Class, learner: Learner) -> None:
        self.klass, self.learner = klass, learner
        self.http = httpx.AsyncClient(base_url=web, timeout=120, follow_redirects=False)
        self.socket: ClientConnection | None = None  # the chat page's socket, while open
        self.tab: _Tab | None = None  # what was asked on it
        self.opened = False  # a socket was opened before (the next one is a reconnect)

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

    async def form(self, page: str, action: str, data: dict[str, str]) -> httpx.Response | None:
        """GET the page, POST its form with the page's CSRF token (what a browser submits)."""
        shown = await self.request("GET", page)
        if shown is None or shown.status_code != 200:
            return None
        return await self.request("POST", action, data={"csrfmiddlewaretoken": _token(shown.text), **data})

    @property
    def cookie(self) -> str:
        from django.conf import settings

        return f"{settings.SESSION_COOKIE_NAME}={self.http.cookies.get(settings.SESSION_COOKIE_NAME, '')}"


async def _ask(web: str, browser: Browser, question: str, n: int) -> None:
    """One question on the learner's chat socket (kept open, as the chat page keeps it). A socket found
    closed is opened again after 2 s, as chat.js does, and the question asked again; one closed
    mid-answer is recorded as cut, then asked again too (the page offers that)."""
    learner, klass = browser.learner, browser.klass
    ask = AskResult(learner.number, "", "")
    for attempt in range(ASK_TRIES):
        client_id = f"l{learner.number}q{n}t{attempt}"
        ask = AskResult(learner.number, client_id, f"CR{klass.run}-{client_id}")
        try:
            if browser.socket is None:
                url, origin = socket_url(web, "/ws/chat/"), site_origin(web)
                browser.socket = await _open(url, origin, browser.cookie, learner.number, klass.chat)
                browser.tab = _Tab(learner.number, learner.username, klass.chat)
                klass.reopened += browser.opened
                browser.opened = True
            assert browser.tab is not None
            await browser.tab.ask(browser.socket, ask, f"{question} ({ask.marker})", CHAT)
            learner.asks.append(ask)
            klass.chat.asks.append(ask)
            return
        except (OSError, WebSocketException, ValueError) as exc:
            browser.socket = None
            ask.error = f"{type(exc).__name__}: {exc}"
            if ask.answer_id is not None:  # it had started: an answer cut off mid-stream
                ask.status = "closed"
                learner.cut_asks += 1
                learner.asks.append(ask)
                klass.chat.asks.append(ask)
                klass.chat.socket_errors.append(f"learner {learner.number}: {ask.error}")
            await asyncio.sleep(RECONNECT_S)
    if ask.status != "closed":  # never answered in every try: lost
        learner.asks.append(ask)
        klass.chat.asks.append(ask)


def _job_of(user_id: int, lab: int) -> tuple[int, str] | None:
    from bench.models import BenchJob

    job = BenchJob.objects.filter(owner_id=user_id, lab=lab).order_by("-pk").values_list("pk", "status").first()
    return (int(job[0]), str(job[1])) if job else None


def _user_id(username: str) -> int | None:
    from django.contrib.auth.models import User

    return User.objects.filter(username=username).values_list("pk", flat=True).first()


async def learner_run(
    web: str, klass: Class, learner: Learner, questions: list[str], arrive_s: float, limit_s: float
) -> None:
    """Sign up, then each lab: run it with a prediction, chat while it waits and runs, hand it in once it ended."""
    await asyncio.sleep(arrive_s)
    browser = Browser(web, klass, learner)
    try:
        form = {"join_code": klass.join_code, "username": learner.username, "email": ""}
        form |= {"password1": learner.password, "password2": learner.password}
        signed = await browser.form("/accounts/signup/", "/accounts/signup/", form)
        learner.signed_up = signed is not None and signed.status_code == 302
        if not learner.signed_up:
            learner.errors.append(f"sign-up: {signed.status_code if signed is not None else 'no answer'}")
            return
        learner.user_id = await asyncio.to_thread(_user_id, learner.username)
        await browser.request("GET", "/labs/")
        for k, lab in enumerate(LABS):
            await _lab(web, browser, lab, questions[(learner.number * 2 + k) % len(questions)], limit_s)
    finally:
        await browser.http.aclose()
        if browser.socket is not None:
            with contextlib.suppress(Exception):
                await browser.socket.close()


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
    assert learner.user_id is not None
    ran = await browser.form(f"/labs/{lab}/", f"/labs/{lab}/run/", {"prediction": f"{PREDICTIONS[lab]:g}"})
    if ran is None or ran.status_code != 302:
        learner.errors.append(f"lab {lab} run: {ran.status_code if ran is not None else 'no answer'}")
        return None
    learner.runs_posted[lab] = time.time()
    found = await asyncio.to_thread(_job_of, learner.user_id, lab)
    if found is None:
        learner.errors.append(f"lab {lab}: the run was accepted but made no job")
        return None
    learner.jobs[lab] = found[0]
    asked = asyncio.create_task(_ask(web, browser, question, lab))  # a question while the run waits
    status = found[1]
    while status not in FINISHED and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        await browser.request("GET", f"/labs/{lab}/")
        status = (await asyncio.to_thread(_job_of, learner.user_id, lab) or (0, "lost"))[1]
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
