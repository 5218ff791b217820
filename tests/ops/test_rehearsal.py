"""The class rehearsal at CI's size (`make class` reduced): four learners on the scripted engines,
with the web fault: one Daphne killed while a learner's answer streams on a socket it serves.

The whole class server runs as `make class` starts it (PostgreSQL, Redis, Chroma, two engines,
vllm-router, two Daphne processes behind nginx, two Celery workers) in a process of its own, with
its own ports and database, once for the module; the tests assert only what was lost or broken and
what became of the killed process's sockets. Its speed (makespan against the ideal, waits, Jain's
index, TTFT) is printed, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from labapp import said
from labapp.ops.loadtest.plan import AskResult
from labapp.ops.rehearsal.report import _losses, _runs, failures, jain
from tests import aio, harness

ROOT = Path(__file__).resolve().parents[2]


def test_jain_index() -> None:
    assert jain([]) is None
    assert jain([0.0, 0.0]) == 1.0
    assert jain([5.0, 5.0, 5.0]) == 1.0
    assert jain([10.0, 0.0]) == 0.5  # one of two learners waited everything


@dataclass(frozen=True)
class Rehearsed:
    stdout: str
    stderr: str
    returncode: int
    report: dict[str, Any]

    @property
    def problems(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("[class] LOST OR BROKEN")]


@pytest.fixture(scope="module")
def rehearsed() -> Rehearsed:
    """The reduced class, once, with one Daphne killed while a learner's answer streams on it."""
    harness.refuse_in_check_tier("the class rehearsal")
    folder = Path(os.environ["LAB_TEST_DATA_DIR"]) / "rehearsal"
    saved = folder / "report.json"
    command = [
        sys.executable, "-m", "labapp.ops.rehearsal", "--scripted", "--learners", "4", "--base-port", "0",
        "--arrive-over-s", "4", "--limit-s", "300", "--fault", "web", "--data-dir", str(folder),
        "--json", str(saved),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(done.stdout[-5000:])  # the report, in pytest's output of the first test
    assert saved.exists(), f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return Rehearsed(done.stdout, done.stderr, done.returncode, json.loads(saved.read_text()))


WEB_FAULT_GAP = "web fault: answers in flight not saved stopped with their partial text"


@pytest.mark.integration
def test_reduced_class_with_a_web_process_killed_loses_nothing_else(rehearsed: Rehearsed) -> None:
    """Sign-ups, runs, hand-ins, frames, 5xx (the answer cut in flight: the next test)."""
    other = [p for p in rehearsed.problems if WEB_FAULT_GAP not in p]
    assert not other, f"{rehearsed.stdout[-3000:]}\n{rehearsed.stderr[-3000:]}"
    assert rehearsed.returncode == (1 if rehearsed.problems else 0), rehearsed.stderr[-3000:]
    report = rehearsed.report
    assert "Jain's fairness index" in rehearsed.stdout
    assert report["learners"] == {"asked": 4, "signed_up": 4}
    assert report["runs"]["status"] == {"done": 8}, report["runs"]
    assert report["handed_in"] == {"accepted": 8, "saved": 8}
    assert report["lost"]["frames"] == report["lost"]["runs"] == report["lost"]["hand_ins"] == 0, report["lost"]
    web = report["faults"]["web"]
    assert report["http_5xx"] == web["5xx_meanwhile"], report["http_5xx_lines"]  # only while it was down
    chat = report["chat"]
    assert chat["done"] == chat["asked"] - chat["cut_by_closed_socket"] >= 8  # each cut one asked again
    assert report["jain"] is not None
    assert report["gradebook"]["learners_listed"] == 4
    # Read from the workers' logs: every run's own task at least (the pattern still matches Celery's line).
    assert report["job_tasks_delivered"] >= report["runs"]["jobs"] == 8
    assert "job_run tasks delivered" in rehearsed.stdout


@pytest.mark.integration
def test_the_chat_sockets_on_a_killed_web_process_reconnect_through_nginx_to_the_other(
    rehearsed: Rehearsed,
) -> None:
    web = rehearsed.report["faults"]["web"]
    killed = web["killed"].split()[0]
    other = {"web-a": "web-b", "web-b": "web-a"}[killed]
    assert web["why_then"] == "a learner's answer was streaming on it", web
    assert web["sockets_on_it"] >= 1
    for socket in web["sockets"]:  # chat.js's 2 s, then nginx passes the handshake to the live process
        assert socket["reopened"] and socket["to"] == other and socket["after_s"] < 10, web["sockets"]
    cut = [a for a in web["answers_in_flight"] if a["cut"]]
    assert cut, web  # the kill landed while its answer streamed
    for answer in cut:
        assert answer["page_showed_chars"] > 0 and answer["asked_again"].startswith("done"), answer
    assert web["misdelivered_meanwhile"] == 0


@pytest.mark.integration
def test_an_answer_in_flight_on_a_killed_web_process_is_saved_stopped_with_its_partial_text(
    rehearsed: Rehearsed,
) -> None:
    cut = [a for a in rehearsed.report["faults"]["web"]["answers_in_flight"] if a["cut"]]
    assert cut and all(a["saved_status"] == "stopped" and a["partial_text_kept"] for a in cut), json.dumps(cut)
    assert not [p for p in rehearsed.problems if WEB_FAULT_GAP in p]


# --- the simulated learner, against the real site in-process ---------------------------------


class _LosesTheFirstSignUpAnswer(httpx.AsyncBaseTransport):
    """The site itself (Django's ASGI handler), but the first sign-up's answer never comes back: the
    account is made, then nginx answers 502 (its web process died before the answer left)."""

    def __init__(self) -> None:
        from labapp.asgi import django_asgi_app

        app: Any = django_asgi_app  # Django's handler types its scope a dict, httpx a mapping
        self.site = httpx.ASGITransport(app=app)
        self.lost: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.site.handle_async_request(request)
        if request.method == "POST" and request.url.path == "/accounts/signup/" and not self.lost:
            self.lost.append(response.status_code)
            await response.aclose()
            return httpx.Response(502, text="502 Bad Gateway")
        return response


@pytest.mark.django_db(transaction=True)
def test_a_learner_whose_sign_up_answer_was_lost_sends_it_again_then_signs_in(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.models import User
    from django.core.cache import cache

    from labapp.classes import services
    from labapp.models import Membership
    from labapp.ops.rehearsal import learners

    settings.LAB_MODE = "class"
    cache.clear()  # the sign-up limits' counts
    monkeypatch.setattr(learners, "RECONNECT_S", 0.0)
    room = services.classroom_create(name="A반", instructor=User.objects.create_user(username="teacher"))
    person = learners.Learner(0, "cut-off")
    klass = learners.Class("r", room.pk, room.join_code, "", [person])
    transport = _LosesTheFirstSignUpAnswer()

    async def sign_up() -> bool:
        browser = learners.Browser("http://testserver", klass, person)
        await browser.http.aclose()
        browser.http = httpx.AsyncClient(base_url="http://testserver", transport=transport)
        try:
            return await learners._signup(browser)
        finally:
            await browser.close()

    assert aio.run(sign_up())
    assert transport.lost == [302]  # the first try made the account
    assert person.retried == [
        "POST /accounts/signup/: 502 → 200",  # sent again: the form says the name is taken
        "sign-up: the name was taken (made by the try cut off); signed in: 302",
    ]
    assert person.errors == []
    assert User.objects.filter(username="cut-off").count() == 1
    assert Membership.objects.filter(user__username="cut-off", classroom=room, role="learner").count() == 1


# --- what the report calls lost or broken under the web fault -------------------------------


def _report(web: dict[str, Any]) -> dict[str, Any]:
    kinds = ("frames", "runs", "hand_ins")
    return {
        "lost": {k: 0 for k in kinds} | {f"{k}_detail": [] for k in kinds},
        "http_5xx": 1,
        "http_5xx_lines": ['502 0.004 127.0.0.1:1 "POST /accounts/signup/ HTTP/1.1"'],
        "learners": {"asked": 1, "signed_up": 1},
        "runs": {"status": {"done": 2}, "jobs": 2, "last_not_done": [], "failed_unnamed": []},
        "handed_in": {"accepted": 2, "saved": 2},
        "jain": 1.0,
        "learner_errors": [],
        "faults": {"web": web},
    }


def _web(saved_status: str, saved_chars: int, *, reopened: bool = True) -> dict[str, Any]:
    return {
        "killed": "web-a (Daphne)",
        "5xx_meanwhile": 1,
        "sockets": [{"learner": "l0", "reopened": reopened, "to": "web-b", "after_s": 2.1}],
        "answers_in_flight": [
            {
                "learner": "l0",
                "answer": 7,
                "cut": True,
                "page_showed_chars": 4,
                "saved_status": saved_status,
                "saved_chars": saved_chars,
                "partial_text_kept": 0 < saved_chars <= 4,
            }
        ],
    }


def test_the_web_fault_counts_a_cut_answer_without_its_partial_text_as_lost() -> None:
    assert failures(_report(_web("stopped", 4))) == []  # the 502 while it was down is the fault's
    assert failures(_report(_web("streaming", 0))) == [
        "web fault: answers in flight not saved stopped with their partial text: "
        "['answer 7 (l0): saved streaming with 0 of the 4 characters its page showed']"
    ]
    stuck = failures(_report(_web("stopped", 4, reopened=False)))
    assert stuck == ["web fault: chat sockets on web-a (Daphne) never opened again: ['l0']"]
    outside = _report(_web("stopped", 4)) | {"http_5xx": 2}
    assert failures(outside)[0].startswith("1 responses 5xx outside a fault")


@pytest.mark.django_db
def test_a_chat_answer_that_failed_naming_why_is_not_a_lost_frame_and_one_without_its_answer_frame_is() -> None:
    """The router fault: an answer that ended "failed" with the router named reached its asker; an ask
    that never had its answer frame (still waiting, or timed out) is lost."""
    asks = [AskResult(0, f"a{n}", f"m{n}") for n in range(4)]
    asks[0].status, asks[1].status, asks[1].error = "done", "failed", "vLLM 라우터에 연결할 수 없습니다"
    asks[2].status = "timeout"  # asks[3] never heard back: "unanswered"
    chat = type("Chat", (), {"asks": asks, "misdelivered": []})()
    lost = _losses(type("Class", (), {"chat": chat})(), [], {}, [])["lost"]
    assert lost["frames"] == 2 and [d.split(":")[0] for d in lost["frames_detail"]] == ["a2", "a3"]


class _DiesMidAnswerOnce:
    """A chat socket's far end: the first connection dies after an answer's first token (its web process
    killed; nginx drops the socket without a close frame), the next ones answer in full. Each
    handshake names its "web process", as the rehearsal's nginx does (``X-Lab-Upstream``)."""

    def __init__(self) -> None:
        self.connections = 0

    def name(self, connection: Any, request: Any, response: Any) -> None:
        self.connections += 1
        response.headers["X-Lab-Upstream"] = f"127.0.0.1:{self.connections}"

    async def serve(self, socket: Any) -> None:
        dies = self.connections == 1
        async for text in socket:
            frame = json.loads(text)
            if frame["type"] == "client_timing":
                await socket.send(json.dumps({"type": "overhead", "answer_id": frame["answer_id"]}))
                continue
            ask, answer_id = frame["id"], 10 + self.connections
            await socket.send(
                json.dumps({"type": "started", "id": ask, "answer_id": answer_id, "question": frame["question"]})
            )
            await socket.send(json.dumps({"type": "token", "id": ask, "text": "프리필"}))
            if dies:
                socket.transport.abort()
                return
            answer = {"answer_id": answer_id, "question": frame["question"], "status": "done", "timings": {}}
            await socket.send(json.dumps({"type": "done", "id": ask, "answer": answer}))


def test_a_chat_socket_closed_mid_answer_opens_again_as_the_page_does_and_the_learner_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """chat.js opens its socket again 2 s after it closes; the cut answer stays as the page showed it,
    and the learner sends the question again on the new socket (here 0.2 s instead of 2 s)."""
    from websockets.asyncio.server import serve

    from labapp.ops.rehearsal import learners

    monkeypatch.setattr(learners, "RECONNECT_S", 0.2)
    person = learners.Learner(0, "asker")
    klass = learners.Class("r", 1, "CODE", "", [person])
    far_end = _DiesMidAnswerOnce()

    async def ask() -> learners.Browser:
        async with serve(far_end.serve, "127.0.0.1", 0, process_response=far_end.name) as server:
            port = server.sockets[0].getsockname()[1]
            browser = learners.Browser(f"http://127.0.0.1:{port}", klass, person)
            try:
                await learners._ask(browser.web, browser, "프리필이란?", 1)
            finally:
                await browser.close()
        return browser

    browser = aio.run(ask())
    cut, again = person.asks
    assert (cut.status, cut.answer_id, cut.received) == ("closed", 11, "프리필")
    assert (again.status, again.answer_id, again.client_id) == ("done", 12, "l0q1t1")
    assert person.cut_asks == 1 and klass.reopened == 1
    assert [upstream for _at, upstream in browser.sockets] == ["127.0.0.1:1", "127.0.0.1:2"]
    assert browser.sockets[1][0] - browser.sockets[0][0] >= 0.2  # opened again only after the page's pause


@pytest.mark.django_db
def test_the_reports_lab_runs_name_engines_and_errors_in_english_as_the_rest_of_the_report() -> None:
    """The engine's name and a run's error are kept as keys; the report (English) says them in English,
    not in the site's Korean ("기본 엔진")."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone, translation

    from bench import engines
    from bench.models import BenchJob

    owner, now, url = get_user_model().objects.create(username="op"), timezone.now(), engines.configured()[0].url
    BenchJob.objects.create(
        owner=owner, kind="speed", config={}, engine_url=url, status="done", started_at=now, finished_at=now
    )
    with translation.override("ko"):
        error = BenchJob.error_fields(
            said.gettext(
                "측정 엔진(%(engines)s)이 %(seconds)d초 동안 응답하지 않아 실행하지 못했습니다. "
                "상태 페이지에서 엔진을 확인하고, 엔진이 돌아오면 다시 실행하세요."
            )
            % {"engines": url, "seconds": 90}
        )
    BenchJob.objects.create(owner=owner, kind="speed", config={}, engine_url=url, status="failed", **error)
    with translation.override("ko"):
        runs = _runs([], {j.pk: j for j in BenchJob.objects.all()})
    assert runs["by_engine"] == {"Default engine": 1}
    assert len(runs["failed"]) == 1 and "did not answer for 90" in runs["failed"][0]


@pytest.mark.django_db
def test_the_report_names_each_run_not_passed_with_the_checks_it_failed() -> None:
    """ "56 / 0 of 60" alone leaves the operator guessing: which learner's run, which check, what it saw."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from bench import engines
    from bench.models import BenchJob
    from labapp.ops.rehearsal.learners import Learner

    user, now = get_user_model().objects.create(username="learner-07"), timezone.now()
    job = BenchJob.objects.create(
        owner=user,
        kind="speed",
        lab=1,
        config={},
        results={"cells": []},
        engine_url=engines.configured()[0].url,
        status="done",
        started_at=now,
        finished_at=now,
    )
    runs = _runs([Learner(7, "learner-07", user_id=user.pk)], {job.pk: job})
    assert runs["passed"] == 0 and len(runs["not_passed"]) == 1
    line = runs["not_passed"][0]
    assert line.startswith(f"learner-07 lab 1 #{job.pk}: ") and len(line) > len(f"learner-07 lab 1 #{job.pk}: ")
