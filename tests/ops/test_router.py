"""vllm-router in front of the chat's engines (LAB_ROUTER): the real router, as `make run` starts it,
before two scripted engines that answer their own names (``router_pool`` in tests/conftest.py).

A stream through it keeps the engine's usage, per-request metrics and cached tokens; consistent_hash
keeps each X-Session-ID on one engine; a killed engine's sessions go to the other without an error;
the chat itself answers through it; the status page names it, and names it down when it is killed.
The real engine behind it is the last test (marked ``engine`` by its fixture).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from labapp.ops import scripted
from labapp.status import probes as status
from rag import chat, retrieval
from rag.vllm import client as vllm_client
from rag.vllm import router
from rag.vllm.records import RequestRecord
from tests import aio, harness
from tests.conftest import RouterPool
from tests.rag.test_chat import CHUNKS, _ask, _cookie, _socket, _until_done

SPEC = vllm_client.RequestSpec(prompt="프리필과 디코드는 어떻게 다른가요?", max_tokens=8, ignore_eos=False)


def ask(url: str, session: str = "") -> tuple[RequestRecord, list[int | None]]:
    """One streamed request to ``url``: its record, and the output-token count known at each text chunk."""
    counts: list[int | None] = []

    async def on_text(text: str, record: RequestRecord) -> None:
        counts.append(record.output_tokens)

    async def go() -> RequestRecord:
        async with vllm_client.connect(url, timeout=10.0) as http:
            return await vllm_client.stream_request(
                SPEC, model="fake-model", on_text=on_text, client=http, timeout=10.0, session=session
            )

    record = asyncio.run(go())
    assert record.success, record.error
    return record, counts


def sessions_on_each_engine(pool: RouterPool) -> dict[str, str]:
    """Two sessions that the router's hash ring puts on different engines (the ring depends on the
    engines' ports, which change every run): engine URL -> a session it serves."""
    found: dict[str, str] = {}
    for n in range(1, 40):
        record, _ = ask(pool.url, session=f"learner-{n}")
        found.setdefault(pool.answered_by(record.generated_text), f"learner-{n}")
        if len(found) == 2:
            return found
    raise AssertionError(f"39 sessions all went to one engine: {found}")


def test_a_stream_through_the_router_keeps_the_engines_usage_metrics_and_cached_tokens(
    router_pool: RouterPool,
) -> None:
    routed, routed_counts = ask(router_pool.url, session="learner-1")
    direct, direct_counts = ask(router_pool.answered_by(routed.generated_text))
    from_the_engine = RequestRecord.FROM_THE_ENGINE
    assert {k: getattr(routed, k) for k in from_the_engine} == {k: getattr(direct, k) for k in from_the_engine}
    assert (
        routed.cached_tokens == 16
        and routed.prefill_time_server == scripted.REQUEST_METRICS["time_to_first_token_ms"] / 1000
    )
    # The one difference, documented in docs/operations.md: vllm-router 0.1.17 sends the request on with its
    # own stream_options, which has include_usage only, so continuous_usage_stats is dropped and the token
    # counts come with the final usage chunk instead of with each text chunk.
    assert direct_counts == [1] and routed_counts == [None]


def test_consistent_hash_keeps_each_session_on_its_engine_and_a_killed_engines_sessions_go_to_the_other(
    router_pool: RouterPool,
) -> None:
    sessions = sessions_on_each_engine(router_pool)
    for engine, session in sessions.items():
        for _ in range(5):  # in a row: round robin would alternate
            record, _ = ask(router_pool.url, session=session)
            assert router_pool.answered_by(record.generated_text) == engine, session
    for engine, server in router_pool.engines.items():
        assert set(server.server.script.sessions) >= {sessions[engine]}
        assert sessions[next(e for e in sessions if e != engine)] not in server.server.script.sessions

    killed, survivor = list(sessions)
    router_pool.kill(killed)
    # Every request after the kill is answered: the one that finds the engine gone is retried on the
    # other (the router's circuit breaker takes the engine out after two failures), and its session stays there.
    for session in sessions.values():
        for _ in range(5):
            record, _ = ask(router_pool.url, session=session)
            assert router_pool.answered_by(record.generated_text) == survivor, session
    assert verdict_once_one_is_down() == {killed: False, survivor: True}


def verdict_once_one_is_down(timeout_s: float = 30.0) -> dict[str, bool]:
    """Engine URL -> healthy, as the router's /workers says once it has found one down (its health
    checks run every 5 s, two failures in a row make an engine unhealthy)."""
    deadline = time.monotonic() + timeout_s
    while True:
        verdict = {w.url: w.healthy for w in router.workers()}
        if not all(verdict.values()) or time.monotonic() > deadline:
            return verdict
        time.sleep(0.5)


@pytest.mark.django_db(transaction=True)
def test_the_chat_answers_through_the_router_and_a_learner_stays_on_one_engine(
    router_pool: RouterPool, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.VLLM_BASE_URL, settings.VLLM_MODEL, settings.CHAT_TIMEOUT_S = next(iter(router_pool.engines)), "", 5
    chat.engine_cache_clear()
    vllm_client._chat_template.clear()
    monkeypatch.setattr(
        retrieval, "retrieve", lambda question, *, top_k, **kw: retrieval.RetrievalResult(chunks=CHUNKS[:top_k])
    )
    cookie = _cookie("routed-learner")
    learner = User.objects.get(username="routed-learner")

    async def go() -> list[dict[str, Any]]:
        socket = _socket(cookie)
        assert (await socket.connect())[0]
        answers = []
        for n in range(3):
            await socket.send_json_to(_ask(f"질문 {n}", top_k=2, max_tokens=8) | {"id": f"q{n}"})
            answers.append((await _until_done(socket))[-1]["answer"])
        await socket.disconnect()
        return answers

    answers = aio.run(go())
    chat.engine_cache_clear()
    assert [a["status"] for a in answers] == ["done"] * 3
    assert {a["timings"]["engine"]["url"] for a in answers} == {router_pool.url}
    assert len({a["text"] for a in answers}) == 1  # the same engine's name each time
    engine = router_pool.engines[router_pool.answered_by(answers[0]["text"])]
    assert engine.server.script.sessions == [f"learner-{learner.pk}"] * 3  # passed on by the router


@pytest.mark.django_db
def test_the_status_page_names_the_router_with_its_engines_and_names_it_down_when_it_is_killed(
    router_pool: RouterPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = {"database", "router"}
    monkeypatch.setattr(status, "PROBES", [p for p in status.PROBES if p.key in kept])
    cache.clear()
    rows = {c["key"]: c for c in Client().get("/status.json").json()["components"]}
    assert rows["router"]["state"] == "ok"
    assert rows["router"]["details"]["policy"] == "consistent_hash"
    assert rows["router"]["details"]["engines"].startswith("2/2 ")

    os.killpg(router_pool.service.process.pid, signal.SIGKILL)
    router_pool.service.process.wait(timeout=10)
    cache.clear()
    page = Client().get("/status/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="component-router" class="down"' in html and 'id="component-database" class="ok"' in html
    assert "vLLM 라우터" in html
    rows = {c["key"]: c for c in Client().get("/status.json").json()["components"]}
    assert rows["router"]["reason"] == "not_running" and rows["database"]["ok"]


def test_the_router_has_a_status_row_only_when_one_is_configured(settings: Any) -> None:
    settings.LAB_ROUTER = False
    assert "router" not in [p.key for p in status.PROBES if p.configured()]
    settings.LAB_ROUTER = True
    assert "router" in [p.key for p in status.PROBES if p.configured()]


@pytest.fixture
def routed_engine(engine: str, settings: Any) -> Iterator[str]:
    """The real router in front of the real engine alone: its URL."""
    settings.LAB_ROUTER, settings.LAB_ROUTER_ENGINES = True, [engine]
    service = harness.start("router")
    try:
        service.wait_ready(timeout=60)
        yield str(settings.ROUTER_URL)
    finally:
        service.stop()


def test_the_real_engine_streams_through_the_router_with_its_metrics_and_cached_tokens(routed_engine: str) -> None:
    # Longer than a KV block (128 tokens on the CPU engine): only whole blocks are cached.
    spec = vllm_client.RequestSpec(prompt=SPEC.prompt * 30, max_tokens=8, ignore_eos=False)

    async def go() -> RequestRecord:
        model = await vllm_client.engine_model(routed_engine)
        async with vllm_client.connect(routed_engine, timeout=120.0) as http:
            return await vllm_client.stream_request(
                spec, model=model, client=http, timeout=120.0, session="learner-engine"
            )

    first, again = asyncio.run(go()), asyncio.run(go())
    assert first.success and again.success, (first.error, again.error)
    assert again.output_tokens and again.prompt_tokens == first.prompt_tokens
    assert again.prefill_time_server is not None and again.decode_time_server is not None
    assert again.cached_tokens is not None and again.cached_tokens > 0  # the same prompt again: a prefix hit
