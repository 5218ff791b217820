"""The status page on a class server: names and states for everyone, details for admins only,
no credentials in any URL, and probes run once per STATUS_CACHE_S however often it is asked."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.utils import translation

from labapp import access
from labapp.status import probes as status

pytestmark = pytest.mark.django_db

SECRETS = ("s3cret", "hunter2", "lab.sqlite3", "worker-7", "cache.internal", "gpu.internal", "ConnectError")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Probes that name a database path, URLs with credentials, a worker host and a raw error."""
    made: list[str] = []

    def database() -> dict[str, str]:
        made.append("database")
        return {"engine": "sqlite", "name": "/srv/lab/data/lab.sqlite3"}

    def redis() -> dict[str, str]:
        return {"url": "redis://:s3cret@cache.internal:6379/0", "version": "7.2"}

    def celery() -> dict[str, str]:
        return {"workers": "celery@worker-7", "queues": "default, bench"}

    def vllm() -> dict[str, str]:
        raise RuntimeError("vLLM at http://lab:hunter2@gpu.internal:8000: ConnectError: [Errno 111] refused")

    monkeypatch.setattr(
        status,
        "PROBES",
        [
            status.ComponentProbe("database", "DB", database, 5.0),
            status.ComponentProbe("redis", "Redis", redis, 5.0),
            status.ComponentProbe("celery", "Celery", celery, 5.0),
            status.ComponentProbe("vllm", "vLLM", vllm, 5.0, where=lambda: "http://lab:hunter2@gpu.internal:8000"),
        ],
    )
    cache.clear()
    yield made
    cache.clear()


def _as(username: str | None, **fields: Any) -> Client:
    client = Client()
    if username is not None:
        client.force_login(User.objects.create(username=username, **fields))
    return client


def _pages(client: Client) -> tuple[str, dict[str, Any], str]:
    cache.delete(status.DOWN_KEY)  # the banner asks the components itself (from the cache, here)
    page = client.get("/status/").content.decode()
    return page, client.get("/status.json").json(), client.get("/status/banner/").content.decode()


@pytest.mark.parametrize("who", ["anonymous", "learner", "instructor"])
def test_on_a_class_server_only_admins_see_more_than_each_components_name_and_state(
    calls: list[str], settings: Any, who: str
) -> None:
    settings.LAB_MODE = "class"
    client = _as(None if who == "anonymous" else who)
    if who == "instructor":
        from labapp.classes import services as class_services

        class_services.classroom_create(name="A", instructor=User.objects.get(username=who))
    page, data, banner = _pages(client)
    assert 'id="component-redis" class="ok"' in page and 'id="component-vllm" class="down"' in page
    components = page.split('id="status-table"')[1].split("</table>")[0]  # (the websocket row is the browser's)
    assert 'class="rtt"' not in components and 'class="detail"' not in components
    assert data["ok"] is False
    assert data["components"] == [
        {"key": "database", "label": "DB", "ok": True, "state": "ok"},
        {"key": "redis", "label": "Redis", "ok": True, "state": "ok"},
        {"key": "celery", "label": "Celery", "ok": True, "state": "ok"},
        {"key": "vllm", "label": "vLLM", "ok": False, "state": "down"},
    ]
    assert "vLLM" in banner
    for text in (page, str(data), banner):
        assert not [secret for secret in SECRETS if secret in text], who


def test_an_admin_sees_the_details_but_no_credentials_in_any_url(calls: list[str], settings: Any) -> None:
    settings.LAB_MODE = "class"
    page, data, _ = _pages(_as("root", is_staff=True))
    assert "redis://cache.internal:6379/0" in page and "lab.sqlite3" in page and "worker-7" in page
    assert "ConnectError" not in page and "RuntimeError" not in page and " ms" in page  # words, not the exception
    assert "http://gpu.internal:8000" in page  # with the address it was asked at
    by_key = {c["key"]: c for c in data["components"]}
    assert by_key["redis"]["details"]["url"] == "redis://cache.internal:6379/0"
    assert by_key["vllm"]["error"].startswith("RuntimeError: vLLM at http://gpu.internal:8000:")
    assert by_key["database"]["round_trip_ms"] is not None
    assert "s3cret" not in page + str(data) and "hunter2" not in page + str(data)


def test_a_local_learner_sees_every_detail_as_before(calls: list[str], settings: Any) -> None:
    settings.LAB_MODE = "local"
    page, data, _ = _pages(Client())  # signed in as the local learner
    assert "lab.sqlite3" in page and "worker-7" in page and "hunter2" not in page
    assert {"round_trip_ms", "details", "error"} <= data["components"][0].keys()


def test_two_requests_within_the_cache_window_probe_once(calls: list[str], settings: Any) -> None:
    settings.STATUS_CACHE_S = 5
    client = _as("learner")
    client.get("/status/")
    client.get("/status.json")
    client.get("/status/", headers={"HX-Request": "true"})
    assert calls == ["database"]
    cache.delete(status.CACHE_KEY)  # the window over
    client.get("/status.json")
    assert calls == ["database", "database"]


def test_with_no_cache_window_every_request_probes(calls: list[str], settings: Any) -> None:
    settings.STATUS_CACHE_S = 0
    client = _as("learner")
    client.get("/status.json")
    client.get("/status.json")
    assert calls == ["database", "database"]


def test_status_details_are_for_admins_on_a_class_server_and_for_everyone_locally(settings: Any) -> None:
    learner, admin = User.objects.create(username="l"), User.objects.create(username="a", is_superuser=True)
    settings.LAB_MODE = "class"
    assert access.may_see_status_details(admin) and not access.may_see_status_details(learner)
    settings.LAB_MODE = "local"
    assert access.may_see_status_details(learner)


# --- states in words: every way each component fails reads as words, and a start as "starting" ---------


def _failures() -> list[tuple[str, BaseException, str]]:
    """(component, what its probe ends with, the reason's code) for every failure mode of every component."""
    import httpx
    import redis
    from django.db import OperationalError

    from labapp.status import failures
    from rag.vectorstore import RetrievalUnavailable
    from rag.vllm.client import EngineUnavailable
    from rag.vllm.router import NoHealthyEngine

    raw = "RAWTEXT http://gpu.internal:8000"

    def engine(reason: Any) -> EngineUnavailable:
        return EngineUnavailable(f"vLLM at {raw}: ConnectError: refused", reason=reason, detail="ConnectError")

    return [
        ("database", OperationalError(f"unable to open database file {raw}"), "database"),
        ("database", TimeoutError(f"no answer within 5 s {raw}"), "timeout"),
        ("redis", redis.ConnectionError(f"Error 111 connecting {raw}"), "not_running"),
        ("redis", redis.TimeoutError(f"Timeout reading {raw}"), "timeout"),
        ("redis", redis.AuthenticationError(f"invalid password {raw}"), "refused_password"),
        ("chroma", RetrievalUnavailable(f"Chroma at {raw} is unreachable: ConnectError"), "not_running"),
        ("chroma", httpx.ReadTimeout(f"ReadTimeout {raw}"), "timeout"),
        *[("vllm", engine(reason), code) for reason, code in failures.ENGINE_REASONS.items()],
        *[
            ("vllm", engine(reason), reason)
            for reason in ("timeout", "http_status", "not_openai", "no_model", "model_missing")
        ],
        ("vllm", httpx.ConnectError(f"ConnectError {raw}"), "not_running"),
        ("router", httpx.ConnectError(f"ConnectError {raw}"), "not_running"),
        ("router", NoHealthyEngine(f"vllm-router at {raw}: none of its 2 engines is healthy"), "no_engine"),
        ("celery", failures.BrokerUnreachable(f"the broker ({raw}) is unreachable: ConnectionError"), "no_broker"),
        ("celery", failures.NoWorker(f"no Celery worker answered {raw}"), "no_worker"),
        ("embeddings", FileNotFoundError(f"[Errno 2] No such file: {raw}/model.onnx"), "not_installed"),
        ("embeddings", ImportError(f"No module named onnxruntime {raw}"), "not_installed"),
        ("embeddings", ValueError(f"KeyError in tokenizer {raw}"), "unexpected"),
    ]


FAILURES = _failures()
EXCEPTION_NAME = re.compile(
    r"\b[A-Z][A-Za-z]*(?:Error|Exception|Unavailable|Timeout|Unreachable|NoWorker)\b|Traceback|Errno"
)


def _only_failing(monkeypatch: pytest.MonkeyPatch, key: str, exc: BaseException) -> None:
    def fails() -> dict[str, str]:
        raise exc

    kept = [p for p in status.PROBES if p.key == key]
    monkeypatch.setattr(status, "PROBES", [replace(kept[0], call=fails, warmup=None, configured=lambda: True)])
    cache.clear()


@pytest.mark.parametrize("language", ["ko", "en"])
@pytest.mark.parametrize(("key", "exc", "code"), FAILURES, ids=[f"{k}-{c}-{type(e).__name__}" for k, e, c in FAILURES])
def test_each_failure_of_each_component_reads_as_words_on_the_status_page_and_banner_never_an_exception(
    monkeypatch: pytest.MonkeyPatch, settings: Any, key: str, exc: BaseException, code: str, language: str
) -> None:
    from django.utils import translation

    from labapp.status import failures

    settings.LAB_MODE = "local"  # the most a page shows: every detail
    _only_failing(monkeypatch, key, exc)
    client = Client()
    client.cookies["django_language"] = language
    page, _data, banner = _pages(client)
    with translation.override(language):
        words = failures.words(code)
    assert failures.reason(exc) == code
    assert f'id="component-{key}" class="down"' in page and words in page.replace("&#x27;", "'")
    assert "banner down" in banner
    for text in (page, banner):
        assert "RAWTEXT" not in text and not EXCEPTION_NAME.findall(text), EXCEPTION_NAME.findall(text)


@pytest.mark.parametrize("recorded", [[], [100.0, 120.0, 400.0]])
def test_an_engine_the_supervisor_started_reads_starting_with_the_time_left_not_down(
    monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Any, recorded: list[float]
) -> None:
    import os
    import time

    from labapp import starts
    from rag.vllm.client import EngineUnavailable

    settings.LAB_MODE, settings.DATA_DIR = "local", tmp_path
    starts.begun("engine", os.getpid())  # a live process: this one
    record = starts.read("engine")
    assert record is not None
    starts._write(replace(record, started_at=time.time() - 30, durations=recorded))
    _only_failing(monkeypatch, "vllm", EngineUnavailable("vLLM at http://e: ConnectError: refused"))
    page, data, banner = _pages(Client())
    left = int(120 if recorded else starts.DEFAULT_START_S["engine"]) - 30  # the median of the starts, else the default
    assert 'id="component-vllm" class="starting"' in page and data["components"][0]["state"] == "starting"
    assert "banner starting" in banner and "banner down" not in banner
    assert any(f"엔진 시작 중 (약 {s}초 남음)" in banner for s in (left, left - 1))
    assert ("중앙값 120초" if recorded else "기본값 150초") in page
    assert not EXCEPTION_NAME.findall(page + banner)
    english = Client()
    english.cookies["django_language"] = "en"
    assert "Engine starting (about" in _pages(english)[2]
    stuck = starts.read("engine")
    assert stuck is not None and not replace(stuck, started_at=time.time() - 4 * stuck.expected_s).starting()
    starts.answered("engine")  # ready: the start's seconds are kept for the next one
    assert len(starts.read("engine").durations) == len(recorded) + 1  # type: ignore[union-attr]
    starts.begun("engine", os.getpid())
    starts.ended("engine")  # it died before answering: down, in words
    _only_failing(monkeypatch, "vllm", EngineUnavailable("vLLM at http://e: ConnectError: refused"))
    page, _data, banner = _pages(Client())
    assert 'id="component-vllm" class="down"' in page and "banner down" in banner and "시작 중" not in banner


def test_every_detail_a_probe_reports_has_a_name_in_the_readers_language() -> None:
    """/status/ shows each detail under DETAIL_LABELS' name ("주소", not "url"): walk every dict key
    the probe functions return (their source), so a new detail cannot arrive unnamed."""
    import ast
    import inspect

    from labapp.status import probes

    tree = ast.parse(inspect.getsource(probes))
    keys = {
        key.value
        for function in tree.body
        if isinstance(function, ast.FunctionDef) and function.name.startswith("probe_")
        for node in ast.walk(function)
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    }
    assert {"url", "version", "model", "engines", "workers"} <= keys  # the walk finds them
    assert keys <= set(probes.DETAIL_LABELS), f"unnamed details: {keys - set(probes.DETAIL_LABELS)}"
    with translation.override("en"):
        assert str(probes.DETAIL_LABELS["url"]) == "Address"
