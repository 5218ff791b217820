"""Engines: registered by admins and instructors (removed by who added one, or an admin), probed within
one deadline and all at once, shown red with a short reason, picked by learners, carried by runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import engines, services
from bench.models import BenchJob, Engine
from labapp.models import Classroom, Membership
from labapp.ops import scripted
from tests import aio


@pytest.fixture
def engine_script() -> scripted.Script:
    return scripted.Script()


@pytest.fixture
def fake(scripted_engine: tuple[scripted.Script, str]) -> str:
    return scripted_engine[1]


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_admins_and_instructors_add_engines_and_remove_only_their_own_or_as_admin(fake: str) -> None:
    learner = User.objects.create(username="learner-e")
    assert _client(learner).post("/engines/add/", {"name": "x", "base_url": fake}).status_code == 404
    assert 'id="engine-add"' not in _client(learner).get("/engines/").content.decode()
    teacher = User.objects.create(username="teacher-e")
    Membership.objects.create(
        classroom=Classroom.objects.create(name="C", join_code="JC"), user=teacher, role="instructor"
    )
    client = _client(teacher)
    page = client.post("/engines/add/", {"name": "gpu", "base_url": "gpu-box:8000"}, follow=True).content.decode()
    assert "http://" in page and Engine.objects.count() == 0 and 'value="gpu-box:8000"' in page  # kept
    client.post("/engines/add/", {"name": "scripted", "base_url": fake + "/", "hardware": "test"})
    assert Engine.objects.get().base_url == fake  # trailing slash dropped
    again = client.post("/engines/add/", {"name": "scripted", "base_url": "http://other:1"}, follow=True)
    assert "같은 이름" in again.content.decode() and Engine.objects.count() == 1
    bad = client.post("/engines/add/", {"name": "typo", "base_url": "http://[gpu-box:8000"}, follow=True)
    assert bad.status_code == 200 and not Engine.objects.filter(name="typo").exists()  # not a 500
    admin = User.objects.create(username="admin-e", is_staff=True)
    _client(admin).post("/engines/add/", {"name": "dead", "base_url": "http://127.0.0.1:9"})
    listing = _client(learner).get("/engines/").content.decode()
    assert f'data-url="{fake}" data-ok="true"' in listing and "fake-model" in listing
    assert 'data-url="http://127.0.0.1:9" data-ok="false"' in listing and "연결할 수 없습니다" in listing
    assert "ConnectError" not in listing and "Errno" not in listing and 'id="engine-remove"' not in listing
    assert "(ConnectError)" in client.get("/engines/").content.decode()  # the short detail, for an instructor
    dead = Engine.objects.get(name="dead")
    assert _client(learner).post(f"/engines/{dead.pk}/delete/").status_code == 404
    assert client.post(f"/engines/{dead.pk}/delete/").status_code == 404  # the admin's, not this instructor's
    assert f"/engines/{dead.pk}/delete/" not in client.get("/engines/").content.decode()
    client.post(f"/engines/{Engine.objects.get(name='scripted').pk}/delete/")  # their own
    assert not Engine.objects.filter(name="scripted").exists()
    assert _client(admin).post(f"/engines/{dead.pk}/delete/").status_code == 302  # an admin removes any
    assert not Engine.objects.filter(name="dead").exists()


@pytest.mark.django_db
def test_a_learners_pick_goes_with_their_jobs_and_lab_runs(fake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine.objects.create(name="scripted", base_url=fake, hardware="test")
    learner = User.objects.create(username="picker")
    client = _client(learner)
    assert client.post("/engines/pick/", {"engine": str(engine.pk + 1)}, follow=True).status_code == 200
    assert client.post("/engines/pick/", {"url": fake}, follow=True).status_code == 200  # an address is no key
    assert client.session.get("engine_url") is None
    client.post("/engines/pick/", {"engine": str(engine.pk)})
    assert "scripted" in client.get("/bench/").content.decode()
    made: list[dict[str, Any]] = []

    def job_create(**kw: Any) -> BenchJob:
        made.append(kw)  # measured at once (a learner has one waiting run at most)
        return BenchJob.objects.create(owner=learner, kind=kw["kind"], engine_url=kw["engine_url"], status="done")

    monkeypatch.setattr(services, "job_create", job_create)
    client.post("/bench/", {"kind": "speed", "repeats": "1", "pinned": "on"})
    client.post("/labs/4/run/")
    assert [m["engine_url"] for m in made] == [fake, fake]
    assert [m["pinned"] for m in made] == [True, False]  # a lab run goes to the pick's pool, not the pick alone
    job = BenchJob.objects.first()
    assert job is not None and "scripted" in client.get(f"/bench/{job.pk}/").content.decode()
    Engine.objects.all().delete()  # a removed engine falls back to the configured one
    assert "기본 엔진" in client.get("/bench/").content.decode()


def test_another_engines_model_is_asked_even_when_vllm_model_is_set(fake: str, settings: Any) -> None:
    from rag.vllm import client as vllm_client

    settings.VLLM_MODEL = "configured-model"
    assert aio.run(vllm_client.engine_model(fake)) == "fake-model"
    assert aio.run(vllm_client.engine_model(vllm_client.base_url())) == "configured-model"


# --- probes: one deadline, at once, and a red row for anything that is not an OpenAI answer ---

Answer = tuple[int, str, bytes]  # status, content type, body

MODELS = (200, "application/json", b'{"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}')


class _Odd(ThreadingHTTPServer):
    """An HTTP server answering each path as told, ``delay_s`` late; counts requests in flight and keeps
    every path asked (``seen``)."""

    daemon_threads = True

    def __init__(self, answers: dict[str, Answer], delay_s: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _OddHandler)
        self.answers, self.delay_s = answers, delay_s
        self.in_flight = self.most_in_flight = 0
        self.seen: list[str] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _OddHandler(BaseHTTPRequestHandler):
    server: _Odd

    def do_GET(self) -> None:
        odd = self.server
        with odd.lock:
            odd.in_flight += 1
            odd.seen.append(self.path)
            odd.most_in_flight = max(odd.most_in_flight, odd.in_flight)
        time.sleep(odd.delay_s)
        status, kind, body = odd.answers.get(self.path, (404, "text/plain", b"no"))
        with odd.lock:
            odd.in_flight -= 1
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _odd(answers: dict[str, Answer], delay_s: float = 0.0) -> Iterator[_Odd]:
    server = _Odd(answers, delay_s)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _engine(answers: dict[str, Answer]) -> dict[str, Answer]:
    return {"/health": (200, "application/json", b"{}"), "/v1/models": MODELS, "/version": MODELS} | answers


ODD_ANSWERS = [
    ("html page", {"/v1/models": (200, "text/html", b"<html>login</html>")}, "응답 형식이 OpenAI 호환이 아닙니다"),
    ("broken json", {"/v1/models": (200, "application/json", b'{"data": [')}, "응답 형식이 OpenAI 호환이 아닙니다"),
    ("not a list", {"/v1/models": (200, "application/json", b'{"data": "m"}')}, "응답 형식이 OpenAI 호환이 아닙니다"),
    ("a json array", {"/v1/models": (200, "application/json", b"[1, 2]")}, "응답 형식이 OpenAI 호환이 아닙니다"),
    ("cards without ids", {"/v1/models": (200, "application/json", b'{"data": [{}]}')}, "OpenAI 호환이 아닙니다"),
    ("no models", {"/v1/models": (200, "application/json", b'{"data": []}')}, "제공하는 모델이 없습니다"),
    ("an error status", {"/health": (502, "text/html", b"<h1>Bad gateway</h1>")}, "오류로 응답했습니다"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("what", "answers", "reason"), ODD_ANSWERS, ids=[row[0] for row in ODD_ANSWERS])
def test_an_engine_that_is_not_openai_compatible_is_a_red_row_with_a_short_reason(
    what: str, answers: dict[str, Answer], reason: str
) -> None:
    with _odd(_engine(answers)) as odd:
        Engine.objects.create(name="odd", base_url=odd.url)
        page = _client(User.objects.create(username="learner-odd")).get("/engines/")
    body = page.content.decode()
    assert page.status_code == 200, what
    assert f'data-url="{odd.url}" data-ok="false"' in body and reason in body
    assert "<html>login" not in body and "Bad gateway" not in body and "Error" not in body


def test_a_server_without_a_version_answer_is_still_an_engine() -> None:
    with _odd(_engine({"/version": (200, "text/html", b"<html></html>")})) as odd:
        found = aio.run(engines.probe(engines.Choice(odd.url, "odd")))
    assert found.ok and (found.model, found.max_model_len, found.version) == ("m", 4096, "?")


def test_one_probe_has_its_timeout_in_all_not_for_each_of_its_requests() -> None:
    # Each answer alone is within the timeout; the three together (health, models, version) are not.
    with _odd(_engine({}), delay_s=0.6) as odd:
        found = aio.run(engines.probe(engines.Choice(odd.url, "slow"), timeout=1.0))
    assert not found.ok and found.reason == "시간 초과" and found.detail == "TimeoutError"


def test_every_engine_is_probed_at_once() -> None:
    with _odd(_engine({}), delay_s=0.3) as odd:
        port = odd.server_address[1]
        choices = [engines.Choice(f"http://{host}:{port}", host) for host in ("127.0.0.1", "localhost")]
        found = aio.run(engines.probe_all(choices))
    assert [probe.ok for _, probe in found] == [True, True]
    assert odd.most_in_flight == 2  # both engines' first request was waiting at the same time


@pytest.mark.django_db
def test_reloading_the_engines_page_sends_at_most_one_probe_per_engine_per_cache_time(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten reloads by a learner, in two languages: each engine's server sees one probe (/health first)
    until ENGINE_PROBE_CACHE_S has passed, then one more. The server counts what reaches it."""
    from django.core.cache import cache

    cache.clear()
    settings.ENGINE_PROBE_CACHE_S = 10
    now = [1000.0]
    scripted_time = SimpleNamespace(time=lambda: now[0])  # the cache's clock only: its expiry is what is tested
    monkeypatch.setattr("django.core.cache.backends.locmem.time", scripted_time)
    monkeypatch.setattr("django.core.cache.backends.base.time", scripted_time)
    with _odd(_engine({})) as up, _odd(_engine({"/health": (502, "text/html", b"down")})) as down:
        Engine.objects.create(name="up", base_url=up.url)
        Engine.objects.create(name="down", base_url=down.url)
        learner = _client(User.objects.create(username="reloader"))
        for n in range(10):
            learner.cookies["django_language"] = "en" if n % 2 else "ko"
            page = learner.get("/engines/").content.decode()
            assert f'data-url="{up.url}" data-ok="true"' in page and f'data-url="{down.url}" data-ok="false"' in page
        assert "Answered with an error" in page  # a kept reason reads in the reader's language
        probes = (up.seen.count("/health"), down.seen.count("/health"))
        assert probes == (1, 1), (up.seen, down.seen)
        now[0] += settings.ENGINE_PROBE_CACHE_S
        learner.get("/engines/")
        assert (up.seen.count("/health"), down.seen.count("/health")) == (2, 2)
    cache.clear()
