"""The chat consumer end to end in-process (WebsocketCommunicator) against a scripted vLLM.

Retrieval is replaced by fixed chunks here; the real engine, Chroma and Daphne
are in test_chat_integration.py and the browser test.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from labapp.asgi import application
from labapp.ops import scripted
from rag import chat, conversations, prompting, retrieval, views
from rag.access import CollectionRef
from rag.models import Answer, Conversation
from rag.vectorstore import RetrievalUnavailable
from rag.vllm import client as vllm_client
from tests import aio

pytestmark = pytest.mark.django_db(transaction=True)

CHUNKS = [
    retrieval.RetrievedChunk(
        id=f"chapter/ko/s:500:{n}",
        text=f"자료 {n}: 프리필은 입력 토큰을 한꺼번에 처리합니다. " * 3,
        metadata={"title": f"절 {n}", "source": "chapter/ko/s", "chunk_index": n},
        rank=n + 1,
        fused_score=0.03 - n * 0.001,
        dense_score=0.5,
        dense_rank=n + 1,
        lexical_score=4.0 - n,
        lexical_rank=n + 1,
        relevance=0.8,
    )
    for n in range(4)
]


@pytest.fixture
def engine_script() -> scripted.Script:
    return scripted.Script()


@pytest.fixture
def fake(
    settings: Any, monkeypatch: pytest.MonkeyPatch, scripted_engine: tuple[scripted.Script, str]
) -> Iterator[scripted.Script]:
    script, url = scripted_engine
    settings.VLLM_BASE_URL = url
    settings.VLLM_MODEL = ""
    settings.CHAT_TIMEOUT_S = 5
    chat.engine_cache_clear()
    vllm_client._chat_template.clear()

    def retrieve(question: str, *, top_k: int, **kwargs: Any) -> retrieval.RetrievalResult:
        return retrieval.RetrievalResult(chunks=CHUNKS[:top_k], embed_ms=3.0, search_ms=2.0)

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    yield script
    chat.engine_cache_clear()


def _chapter_run() -> chat.AnswerRun:
    """An answer run on the chapter for the question "q", in Korean, as the socket makes one."""
    return chat.AnswerRun(
        question="q",
        settings=prompting.ChatSettings(),
        collection=CollectionRef("chapter", "chapter", "챕터", by_language=True),
        language="ko",
        stall_timeout_s=5,
    )


def _cookie(username: str = "learner1") -> bytes:
    user = User.objects.get_or_create(username=username)[0]
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def _socket(cookie: bytes | None, origin: bytes = b"http://localhost") -> WebsocketCommunicator:
    headers = [(b"origin", origin), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, "/ws/chat/", headers=headers)


async def _until_done(socket: WebsocketCommunicator, timeout: float = 10) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await socket.receive_json_from(timeout=timeout)
        frames.append(frame)
        if frame["type"] in ("done", "error"):
            return frames


def _ask(question: str = "프리필이란?", **settings: Any) -> dict[str, Any]:
    return {"type": "ask", "id": "q1", "question": question, "settings": settings}


def test_an_answer_streams_token_by_token_and_is_saved_with_every_panel_number(fake: scripted.Script) -> None:
    cookie = _cookie()

    async def go() -> list[dict[str, Any]]:
        socket = _socket(cookie)
        assert (await socket.connect())[0]
        await socket.send_json_to(_ask(top_k=3, max_tokens=32))
        frames = await _until_done(socket)
        await socket.disconnect()
        return frames

    frames = aio.run(go())
    kinds = [f["type"] for f in frames]
    assert kinds[:3] == ["started", "retrieval", "prompt"] and kinds[-1] == "done"
    assert [f["text"] for f in frames if f["type"] == "token"] == fake.pieces
    assert all(f["id"] == "q1" for f in frames)
    answer = frames[-1]["answer"]
    t = answer["timings"]
    assert answer["status"] == "done" and answer["text"] == "".join(fake.pieces)
    assert t["retrieval_ms"] == 5.0 and t["api"] == "completions"
    assert 0 < t["client"]["ttft_ms"] < t["client"]["e2el_ms"]
    assert t["client"]["tpot_ms"] > 0 and t["decode_speed"] > 0
    assert t["server"] == {"queue_ms": 1.5, "prefill_ms": 20.0, "decode_ms": 30.0}
    assert t["prefill_source"] == "server"
    tokens = t["tokens"]
    assert tokens["cached"] == 16 and tokens["output"] == len(fake.pieces)
    assert tokens["instructions"] > 0 and tokens["context"] > 0 and tokens["question"] > 0
    assert t["server_first_token_ms"] <= t["server_done_ms"]
    assert [s["rank"] for s in answer["sources"]] == [1, 2, 3] and all(s["tokens"] for s in answer["sources"])
    # The prompt sent is the one saved: instructions, the chunks in source order, the question last.
    sent = fake.requests[-1]
    assert sent["prompt"] == answer["prompt"] and sent["prompt"].endswith("질문: 프리필이란?\n답변:")
    assert sent["stop"] and sent["stream_options"]["include_usage"]
    saved = Answer.objects.get()
    assert saved.settings["top_k"] == 3 and saved.settings["max_tokens"] == 32
    assert saved.timings["client"]["ttft_ms"] == t["client"]["ttft_ms"]


def test_the_answers_row_is_written_only_after_the_search_and_each_step_before_vllm_is_timed(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question is searched on a thread of its own, and the answer's row is written only after
    the search is in (and vLLM asked): a write beside the search held the GIL when the search ended and
    delayed the request. The panel keeps the time of each step."""
    searched = threading.Event()
    write_began_after_search: list[bool] = []

    def retrieve(question: str, *, top_k: int, **kwargs: Any) -> retrieval.RetrievalResult:
        time.sleep(0.05)  # long enough for a write begun beside it to be seen
        searched.set()
        return retrieval.RetrievalResult(chunks=CHUNKS[:top_k], embed_ms=3.0, search_ms=2.0)

    answer_start = conversations.answer_start

    def saved_once_searching(**kwargs: Any) -> Answer:
        write_began_after_search.append(searched.is_set())
        return answer_start(**kwargs)

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    monkeypatch.setattr(conversations, "answer_start", saved_once_searching)
    cookie = _cookie()

    async def go() -> list[dict[str, Any]]:
        socket = _socket(cookie)
        assert (await socket.connect())[0]
        await socket.send_json_to(_ask(top_k=2))
        frames = await _until_done(socket)
        await socket.disconnect()
        return frames

    answer = aio.run(go())[-1]["answer"]
    assert answer["status"] == "done"
    steps = answer["timings"]["steps"]
    assert set(steps) == {"checked", "admitted", "saved", "searched", "retrieved", "prompt", "sent"}
    assert write_began_after_search == [True], "the answer's row was written while its question was searched"
    assert steps["checked"] <= steps["searched"] <= steps["retrieved"] <= steps["prompt"] <= steps["sent"]
    assert steps["checked"] <= steps["admitted"] <= steps["sent"] <= steps["saved"]  # a free slot: no wait
    assert answer["timings"]["queue_wait_ms"] is None
    assert steps["sent"] == pytest.approx(answer["timings"]["prep_ms"], abs=0.2)


def test_vllm_is_asked_before_the_answers_row_is_written_and_its_frames_wait_for_started(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's write is off the path to the first token: it may finish after the request went out,
    and the answer's frames still come after "started" (which carries the row's id)."""
    answer_start = conversations.answer_start
    asked_first: list[bool] = []

    def saved_once_vllm_was_asked(**kwargs: Any) -> Answer:
        deadline = time.monotonic() + 5
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.005)
        asked_first.append(bool(fake.requests))
        return answer_start(**kwargs)

    monkeypatch.setattr(conversations, "answer_start", saved_once_vllm_was_asked)
    (frames,) = _answers(_cookie())
    assert asked_first == [True], "the answer's row was written before vLLM was asked"
    kinds = [frame["type"] for frame in frames]
    assert kinds[0] == "started" and kinds[-1] == "done" and "token" in kinds
    timings = frames[-1]["answer"]["timings"]
    steps = timings["steps"]
    assert steps["sent"] <= steps["saved"]
    # Tokens made while the row was written went out after "started": the panel says when they went out.
    assert timings["server_first_token_ms"] >= steps["saved"]
    assert frames[-1]["answer"]["status"] == "done"
    assert Answer.objects.get().text == "프리필은 입력을 한 번에 처리합니다."


def test_an_ask_whose_row_is_refused_stops_its_answer_and_saves_nothing(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is checked again under a lock when the row is written; losing that race (here: a
    refusal after vLLM was asked) stops the answer and its request, and reports why."""

    def refused_once_vllm_was_asked(**kwargs: Any) -> Answer:
        deadline = time.monotonic() + 5
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.005)
        raise conversations.TooMany("동시에 답변 2개까지")

    fake.delay_s = 0.2  # still streaming when the refusal comes
    monkeypatch.setattr(conversations, "answer_start", refused_once_vllm_was_asked)
    cookie = _cookie()

    async def go() -> list[dict[str, Any]]:
        socket = _socket(cookie)
        assert (await socket.connect())[0]
        await socket.send_json_to(_ask())
        frames = [await socket.receive_json_from(timeout=5)]
        await asyncio.sleep(0.5)  # nothing else comes for this ask
        assert await socket.receive_nothing(timeout=0.1)
        await socket.disconnect()
        return frames

    frames = aio.run(go())
    assert frames == [{"type": "error", "error": "동시에 답변 2개까지", "id": "q1"}]
    assert Answer.objects.count() == 0
    assert fake.disconnected.wait(5), "the request sent to vLLM was not stopped"


def test_the_panel_says_when_the_question_was_not_embedded(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Korean question with the English-only bundled model: BM25 alone, and the saved timings say so."""

    def retrieve(question: str, *, top_k: int, **kwargs: Any) -> retrieval.RetrievalResult:
        return retrieval.RetrievalResult(chunks=CHUNKS[:top_k], search_ms=2.0, dense_skipped=True)

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    (frames,) = _answers(_cookie())
    timings = frames[-1]["answer"]["timings"]
    assert timings["dense_skipped"] is True and timings["embed_ms"] is None
    assert Answer.objects.get().timings["dense_skipped"] is True


def test_with_chroma_down_the_panel_shows_no_embedding_time_and_the_notice(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search that went on without Chroma embedded nothing: no embedding time is saved (the
    panel shows "—", not 0 ms), the search time is, and the notice names the cause."""

    def retrieve(question: str, *, top_k: int, **kwargs: Any) -> retrieval.RetrievalResult:
        return retrieval.RetrievalResult(
            chunks=CHUNKS[:top_k], search_ms=2.0, dense_unavailable="Chroma at http://c is unreachable"
        )

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    (frames,) = _answers(_cookie())
    timings = frames[-1]["answer"]["timings"]
    assert timings["embed_ms"] is None and timings["search_ms"] == 2.0
    assert [n["code"] for n in timings["notices"]] == ["dense_unavailable"]
    assert "Chroma at http://c is unreachable" in timings["notices"][0]["message"]


def _answers(cookie: bytes, n: int = 1) -> list[list[dict[str, Any]]]:
    """The frames of ``n`` questions asked one after the other on one socket."""

    async def go() -> list[list[dict[str, Any]]]:
        socket = _socket(cookie)
        assert (await socket.connect())[0]
        found = []
        for k in range(n):
            await socket.send_json_to(_ask() | {"id": f"q{k}"})
            found.append(await _until_done(socket))
        await socket.disconnect()
        return found

    return aio.run(go())


def test_the_estimate_takes_the_learners_lab_1_run_on_the_answering_engine_never_chat_answers(
    fake: scripted.Script, settings: Any
) -> None:
    from bench.models import BenchJob

    cookie = _cookie()
    learner = User.objects.get(username="learner1")
    speeds = {"prefill_speed": 600.0, "decode_speed": 25.0, "cells": [{}, {}]}
    # A /bench/ speed job (no lab) and a Lab 1 run on another engine do not count ...
    BenchJob.objects.create(
        owner=learner, kind="speed", status="done", engine_url=settings.VLLM_BASE_URL, results=speeds
    )
    BenchJob.objects.create(
        owner=learner, kind="speed", lab=1, status="done", engine_url="http://gpu:8000", results=speeds
    )
    first, second = _answers(cookie, 2)
    # ... and neither do the chat's own answers, however many there are.
    assert first[-1]["answer"]["timings"]["estimate"] is None
    assert second[-1]["answer"]["timings"]["estimate"] is None
    run = BenchJob.objects.create(
        owner=learner, kind="speed", lab=1, status="done", engine_url=settings.VLLM_BASE_URL + "/", results=speeds
    )
    (frames,) = _answers(cookie)
    estimate = frames[-1]["answer"]["timings"]["estimate"]
    assert (estimate["prefill_speed"], estimate["decode_speed"]) == (600.0, 25.0) and f"#{run.pk}" in estimate["basis"]
    assert estimate["total_s"] == pytest.approx(estimate["prefill_s"] + estimate["decode_s"])
    assert estimate["measured_s"] is not None


def test_the_chat_answers_on_the_engine_picked_on_the_engines_page_and_the_card_names_it(
    fake: scripted.Script, settings: Any
) -> None:
    from bench import engines
    from bench.models import BenchJob, Engine

    other = scripted.Script(pieces=["GPU", " 답변"])
    with scripted.serve(other) as other_url:
        secret_url = other_url.replace("http://", "http://tutor:s3cret@")  # an address with credentials
        learner = User.objects.get_or_create(username="picker")[0]
        engine = Engine.objects.create(name="GPU 상자", base_url=secret_url, added_by=learner)
        client = Client()
        client.force_login(learner)
        assert client.post("/engines/pick/", {"engine": str(engine.pk)}).status_code == 302
        assert client.session[engines.SESSION_KEY] == secret_url
        BenchJob.objects.create(
            owner=learner, kind="speed", lab=1, status="done", engine_url=secret_url,
            results={"prefill_speed": 9000.0, "decode_speed": 120.0},
        )  # fmt: skip
        (frames,) = _answers(f"sessionid={client.cookies['sessionid'].value}".encode())
    answer = frames[-1]["answer"]
    assert answer["status"] == "done" and answer["text"] == "GPU 답변"
    assert other.requests and not fake.requests  # the picked engine answered, the configured one was not asked
    shown = {"name": "GPU 상자", "url": other_url}
    assert frames[0]["type"] == "started" and frames[0]["engine"] == shown
    assert answer["timings"]["engine"] == shown
    assert answer["timings"]["estimate"]["prefill_speed"] == 9000.0  # the speeds of the engine that answered
    assert "s3cret" not in json.dumps(frames)


def test_without_a_pick_the_configured_engine_answers_and_is_named(fake: scripted.Script, settings: Any) -> None:
    (frames,) = _answers(_cookie())
    assert frames[-1]["answer"]["timings"]["engine"] == {"name": "기본 엔진", "url": settings.VLLM_BASE_URL}


def test_every_answer_carries_its_learners_session_for_a_router(
    fake: scripted.Script,
) -> None:
    (first,) = _answers(_cookie("session-learner"))
    (again,) = _answers(_cookie("session-learner"))
    (other,) = _answers(_cookie("session-other"))
    assert [f[-1]["answer"]["status"] for f in (first, again, other)] == ["done"] * 3
    ids = [User.objects.get(username=name).pk for name in ("session-learner", "session-other")]
    # X-Session-ID on each generation request (vllm-router's consistent_hash reads it; an engine ignores it).
    assert fake.sessions == [f"learner-{ids[0]}", f"learner-{ids[0]}", f"learner-{ids[1]}"]


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        ("{not json", "JSON"),
        ("[1, 2]", "JSON"),
        ('{"type": "dance"}', "dance"),
        ('{"type": "ask", "id": "q1", "question": ""}', "비어"),
        ('{"type": "ask", "id": "q1", "question": "   \\n "}', "비어"),
        ('{"type": "ask", "id": "q1", "question": "' + "가" * 2001 + '"}', "2001"),
        ('{"type": "ask", "id": "q1", "question": "q", "settings": {"top_k": 99}}', "top_k"),
        ('{"type": "ask", "id": "q1", "question": "q", "settings": {"speed": "fast"}}', "speed"),
        ('{"type": "ask", "id": "q1", "question": "q", "extra": 1}', "extra"),
        ('{"type": "ask", "id": "bad id!", "question": "q"}', "id"),
        ('{"type": "ask", "id": "q1", "question": "q", "conversation": 999}', "999"),
        ('{"type": "stop", "id": "nothing"}', ""),
    ],
)
def test_a_bad_frame_gets_a_clear_error_the_socket_stays_open_and_nothing_is_saved(
    fake: scripted.Script, frame: str, words: str
) -> None:
    cookie = _cookie()

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_to(text_data=frame)
        first = await socket.receive_json_from(timeout=5)
        await socket.send_to(text_data='{"type": "dance"}')  # still open and answering
        second = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return first, second

    first, second = aio.run(go())
    assert first["type"] == "error" and words in first["error"]
    assert second["type"] == "error"
    assert Answer.objects.count() == 0 and Conversation.objects.count() == 0
    assert fake.requests == []


def test_an_unauthenticated_socket_or_a_foreign_origin_is_refused_before_any_work(fake: scripted.Script) -> None:
    cookie = _cookie()

    async def go() -> tuple[Any, Any]:
        anonymous = await _socket(None).connect()
        foreign = await _socket(cookie, origin=b"http://evil.example").connect()
        return anonymous, foreign

    anonymous, foreign = aio.run(go())
    assert anonymous == (False, 4401)
    assert foreign[0] is False
    assert fake.requests == []


def _stream_then(action: str, fake: scripted.Script) -> tuple[list[dict[str, Any]], Answer]:
    fake.pieces = scripted.plain_words(200)
    fake.delay_s = 0.05
    cookie = _cookie()

    async def go() -> list[dict[str, Any]]:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_json_to(_ask())
        frames: list[dict[str, Any]] = []
        while sum(f["type"] == "token" for f in frames) < 3:
            frames.append(await socket.receive_json_from(timeout=5))
        if action == "stop":
            await socket.send_json_to({"type": "stop", "id": "q1"})
            frames += await _until_done(socket)
            await socket.disconnect()
        else:
            await socket.disconnect()  # the tab was closed
        return frames

    frames = aio.run(go())
    deadline = time.monotonic() + 10
    while Answer.objects.get().status == Answer.Status.STREAMING and time.monotonic() < deadline:
        time.sleep(0.05)
    return frames, Answer.objects.get()


@pytest.mark.parametrize("action", ["stop", "close"])
def test_stop_or_a_closed_tab_cancels_the_upstream_request_and_keeps_the_partial_answer(
    fake: scripted.Script, action: str
) -> None:
    frames, answer = _stream_then(action, fake)
    assert answer.status == Answer.Status.STOPPED
    assert answer.text.startswith("".join(fake.pieces[:3])) and len(answer.text) < len("".join(fake.pieces))
    assert answer.timings["client"]["ttft_ms"] is not None
    assert fake.disconnected.wait(5), "the HTTP stream to vLLM was not closed"
    if action == "stop":
        assert frames[-1]["type"] == "done" and frames[-1]["answer"]["status"] == "stopped"


def test_a_tab_closed_while_its_question_is_searched_still_leaves_the_answers_row(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row waits for vLLM to be asked; a tab closed before that (during the search) loses nothing:
    the socket reads the close only once the row is written, the answer then stops, and its row keeps
    the question, the search's timings and "stopped"; the request sent to vLLM is closed."""
    fake.pieces = scripted.plain_words(200)
    fake.delay_s = 0.05
    searching, release = threading.Event(), threading.Event()
    rows_while_searched: list[int] = []

    def retrieve(question: str, *, top_k: int, **kwargs: Any) -> retrieval.RetrievalResult:
        rows_while_searched.append(Answer.objects.count())
        searching.set()
        assert release.wait(10)
        return retrieval.RetrievalResult(chunks=CHUNKS[:top_k], embed_ms=3.0, search_ms=2.0)

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    cookie = _cookie()

    async def go() -> None:
        socket = _socket(cookie)
        assert (await socket.connect())[0]
        await socket.send_json_to(_ask(top_k=2))
        while not searching.is_set():
            await asyncio.sleep(0.01)
        await socket.send_input({"type": "websocket.disconnect", "code": 1001})  # the tab is closed
        await asyncio.sleep(0.2)
        release.set()
        await socket.wait(timeout=10)

    aio.run(go())
    assert rows_while_searched == [0]  # no row while the question is searched
    answer = Answer.objects.get()
    assert answer.status == Answer.Status.STOPPED and answer.question == "프리필이란?"
    assert answer.timings["retrieval_ms"] == 5.0 and len(answer.text) < len("".join(fake.pieces))
    assert fake.disconnected.wait(5), "the request sent to vLLM was not closed"


def _failed_answer(fake: scripted.Script, **settings: Any) -> dict[str, Any]:
    cookie = _cookie()

    async def go() -> dict[str, Any]:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_json_to(_ask(**settings))
        frames = await _until_done(socket, timeout=15)
        await socket.disconnect()
        answer: dict[str, Any] = frames[-1]["answer"]
        return answer

    return aio.run(go())


def test_an_engine_400_says_why_and_is_not_retried(fake: scripted.Script) -> None:
    fake.status = 400
    fake.error_message = "This model's maximum context length is 8192 tokens."
    answer = _failed_answer(fake)
    assert answer["status"] == "failed"
    assert "maximum context length is 8192" in answer["error"] and "다시 시도하지 않음" in answer["error"]
    assert len(fake.requests) == 1


def test_a_stalled_engine_fails_within_the_chat_timeout(fake: scripted.Script, settings: Any) -> None:
    settings.CHAT_TIMEOUT_S = 1
    fake.stall_s = 4
    started = time.monotonic()
    answer = _failed_answer(fake)
    assert answer["status"] == "failed" and "1초 동안 응답하지 않았습니다" in answer["error"]
    assert time.monotonic() - started < 4


def test_a_dead_engine_is_named_in_the_error(fake: scripted.Script, settings: Any) -> None:
    from tests.settings import free_port

    settings.VLLM_BASE_URL = f"http://127.0.0.1:{free_port()}"
    answer = _failed_answer(fake)
    assert answer["status"] == "failed" and "vLLM에 연결할 수 없습니다" in answer["error"]


def test_an_engine_gone_after_its_info_was_cached_is_named_and_the_next_ask_checks_it_again(
    fake: scripted.Script, settings: Any
) -> None:
    from tests.settings import free_port

    assert _failed_answer(fake, max_tokens=4)["status"] == "done"  # the engine's info is cached now
    settings.VLLM_BASE_URL = f"http://127.0.0.1:{free_port()}"  # as if it died: nothing listens there
    vllm_client._chat_template[(settings.VLLM_BASE_URL, "fake-model")] = False  # remembered, like the info
    chat._engine_cache[settings.VLLM_BASE_URL] = next(iter(chat._engine_cache.values()))
    answer = _failed_answer(fake)
    assert answer["status"] == "failed" and answer["error"].startswith("vLLM에 연결할 수 없습니다: ConnectError")
    assert chat._engine_cache == {}  # the next ask fails before retrieval instead of after it


def test_chroma_down_answers_without_sources_and_says_retrieval_is_unavailable(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: Any, **kwargs: Any) -> retrieval.RetrievalResult:
        raise RetrievalUnavailable("Chroma at http://127.0.0.1:1 is unreachable")

    monkeypatch.setattr(retrieval, "retrieve", down)
    answer = _failed_answer(fake)
    assert answer["status"] == "done" and answer["sources"] == []
    notices = answer["timings"]["notices"]
    assert notices[0]["code"] == "retrieval_unavailable" and "검색 불가" in notices[0]["message"]
    assert "(자료 없음)" in answer["prompt"]


def test_an_empty_collection_answers_with_no_sources_and_says_so(
    fake: scripted.Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retrieval, "retrieve", lambda *a, **k: retrieval.RetrievalResult(chunks=[]))
    answer = _failed_answer(fake)
    assert answer["timings"]["notices"][0]["code"] == "no_sources"


def test_a_prompt_over_the_model_length_is_trimmed_beforehand_and_the_panel_says_so(
    fake: scripted.Script,
) -> None:
    fake.max_model_len = 400  # the fake counts a token per 3 bytes; 4 chunks do not fit
    answer = _failed_answer(fake, top_k=4, max_tokens=64)
    assert answer["status"] == "done"
    assert answer["timings"]["notices"][0]["code"] == "trimmed"
    kept = [s["in_prompt"] for s in answer["sources"]]
    assert kept[0] is True and kept[-1] is False  # the least relevant went first
    assert len(fake.requests[-1]["prompt"].encode()) // 3 + 64 <= 400


def test_a_model_with_a_chat_template_is_asked_through_chat_completions(fake: scripted.Script) -> None:
    fake.chat_template = True
    answer = _failed_answer(fake)
    assert answer["timings"]["api"] == "chat"
    assert fake.requests[-1]["messages"][0]["role"] == "system"


def test_ask_again_links_the_new_answer_to_the_first_and_browser_timing_gives_the_overhead(
    fake: scripted.Script,
) -> None:
    cookie = _cookie()

    async def go() -> dict[str, Any]:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_json_to(_ask())
        first = (await _until_done(socket))[-1]["answer"]
        conversation = first["conversation"]
        again = _ask(top_k=1) | {"id": "q2", "conversation": conversation, "parent": first["answer_id"]}
        await socket.send_json_to(again)
        second = (await _until_done(socket))[-1]["answer"]
        server_first = second["timings"]["server_first_token_ms"]
        await socket.send_json_to(
            {"type": "client_timing", "answer_id": second["answer_id"], "first_token_ms": server_first + 4.5}
        )
        overhead: dict[str, Any] = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return overhead

    overhead = aio.run(go())
    assert overhead["type"] == "overhead" and overhead["websocket_overhead_ms"] == 4.5
    first, second = Answer.objects.order_by("pk")
    assert second.parent_id == first.pk and second.conversation_id == first.conversation_id
    assert second.settings["top_k"] == 1 and len(second.sources) == 1
    assert second.timings["websocket_overhead_ms"] == 4.5


def test_another_users_conversation_cannot_be_continued(fake: scripted.Script) -> None:
    owner = User.objects.create(username="owner")
    theirs = Conversation.objects.create(owner=owner, title="theirs")
    cookie = _cookie("intruder")

    async def go() -> dict[str, Any]:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_json_to(_ask() | {"conversation": theirs.pk})
        frame: dict[str, Any] = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return frame

    assert aio.run(go())["type"] == "error"
    assert Answer.objects.count() == 0


def test_saved_answers_are_reopened_escaped_and_only_by_their_owner(fake: scripted.Script) -> None:
    owner = User.objects.create(username="owner")
    conversation = Conversation.objects.create(owner=owner, title="<b>제목</b>")
    Answer.objects.create(
        conversation=conversation,
        question="q",
        text='<script>alert(1)</script><img src="http://evil.example/x.png">',
        status=Answer.Status.DONE,
    )
    client = Client()
    client.force_login(owner)
    page = client.get(f"/chat/{conversation.pk}/").content.decode()
    assert "<script>alert(1)" not in page and "\\u003Cscript\\u003E" in page
    assert "<b>제목</b>" not in client.get("/chat/history/").content.decode()
    other = Client()
    other.force_login(User.objects.create(username="other"))
    assert other.get(f"/chat/{conversation.pk}/").status_code == 404


def test_asyncio_tasks_do_not_leak_after_the_socket_closes(fake: scripted.Script) -> None:
    cookie = _cookie()

    async def go() -> int:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_json_to(_ask())
        await _until_done(socket)
        await socket.disconnect()
        await asyncio.sleep(0.1)
        return len([t for t in asyncio.all_tasks() if "_answer" in repr(t.get_coro())])

    assert aio.run(go()) == 0


def test_a_class_collection_is_offered_to_its_members_only(fake: scripted.Script) -> None:
    from labapp.models import Classroom, Membership

    classroom = Classroom.objects.create(name="실습반", join_code="abc")
    member_cookie = _cookie("member")
    outsider_cookie = _cookie("outsider")
    Membership.objects.create(classroom=classroom, user=User.objects.get(username="member"))
    key = f"class-{classroom.pk}"

    async def go(cookie: bytes) -> dict[str, Any]:
        socket = _socket(cookie)
        await socket.connect()
        await socket.send_json_to(_ask(collection=key))
        frames = await _until_done(socket)
        await socket.disconnect()
        return frames[-1]

    assert aio.run(go(member_cookie))["answer"]["status"] == "done"
    refused = aio.run(go(outsider_cookie))
    assert refused["type"] == "error" and "collection" in refused["error"]
    member = Client()
    member.force_login(User.objects.get(username="member"))
    assert f'value="{key}"' not in member.get("/documents/").content.decode()  # a learner adds no class material
    assert f'value="{key}"' in member.get("/chat/").content.decode()


def test_the_chat_page_draws_compact_cards_with_the_question_box_in_reach(fake: scripted.Script) -> None:
    from rag.views import chat_labels

    client = Client()
    client.force_login(User.objects.get_or_create(username="reader")[0])
    page = client.get("/chat/").content.decode()
    stylesheet = (settings.BASE_DIR / "labapp/static/lab/lab.css").read_text()  # the site's one stylesheet
    assert 'class="card ask sticky-ask"' in page and ".sticky-ask" in stylesheet
    labels = chat_labels()
    assert labels["more"] == "자세히"  # the rest of the numbers sit behind one disclosure
    # Relevance says what it is and which way is good; cosine similarity is named as 1 − distance.
    assert "100%" in labels["relevance_help"] and "1 − 코사인 거리" in labels["relevance_help"]
    assert "실습 1" in labels["estimate_none"]  # no speeds yet points to Lab 1, not to more chat answers


def test_the_retrieval_and_prompt_frames_go_out_after_the_request_and_before_any_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM is asked first (those frames are sent while it reads the prompt), and the browser still
    sees retrieval, prompt, then tokens, even when the first token is back before the frames are out."""
    events: list[str] = []

    async def stream_request(spec: Any, *, on_text: Any, record: Any, **kwargs: Any) -> Any:
        events.append("request")
        await on_text("첫", record)  # before the frames' sender has run at all
        return record

    async def send(frame: dict[str, Any]) -> None:
        await asyncio.sleep(0.01)  # a slow socket
        events.append(frame["type"])

    monkeypatch.setattr(vllm_client, "stream_request", stream_request)
    run = _chapter_run()
    prompt = prompting.prompt_build("q", [], brief=False, language="ko")
    before = ({"type": "retrieval"}, {"type": "prompt"})
    aio.run(chat._stream(run, prompt, send, before=before))
    assert events == ["request", "retrieval", "prompt", "token"]


def test_an_answer_cut_before_any_text_says_why_and_still_lists_its_sources(fake: scripted.Script) -> None:
    fake.pieces = [" 프리필이란?", "\n", "답변: 프리필이란?", "\n"]  # the base model echoes the question
    (frames,) = _answers(_cookie())
    answer = frames[-1]["answer"]
    assert answer["status"] == "done" and answer["text"] == ""
    notices = {n["code"]: n["message"] for n in answer["timings"]["notices"]}
    assert "repeat" in notices and "되풀이부터" in notices["empty"] and "자료 4개" in notices["empty"]
    assert len(answer["sources"]) == 4


def test_an_answer_the_model_left_empty_says_so_in_words() -> None:
    run = _chapter_run()
    run.record.finish_reason = "stop"
    chat.explain_empty(run, stopped=False)
    assert "아무 글자도" in run.notices[-1]["message"] and "자료도 없었습니다" in run.notices[-1]["message"]
    run.notices.clear()
    run.record.generated_text = " 답입니다."
    chat.explain_empty(run, stopped=False)
    assert run.notices == []


def test_the_details_table_keeps_vllms_report_and_the_clients_measures_in_groups_apart() -> None:
    from rag.views import chat_labels

    groups = chat_labels()["details"]
    rows = {g: list(groups[g]["rows"]) for g in groups}
    # Only vLLM's per-request metrics sit under its heading; what only the client can measure never does.
    assert rows["server"] == ["queue_server", "prefill_server", "decode_server"]
    assert {"ttft", "first_chunk", "e2el", "tpot", "tokens_per_s"} <= set(rows["client"])
    assert "estimate" in rows["app"] and not {"first_chunk", "e2el", "tokens_per_s", "estimate"} & set(rows["server"])
    assert "vLLM" in groups["server"]["label"] and "클라이언트" in groups["client"]["label"]
    every = [key for keys in rows.values() for key in keys]
    assert len(every) == len(set(every))  # a row is never repeated
    script = (settings.BASE_DIR / "labapp/static/lab/chat.js").read_text()
    assert "L.details" in script and 'scope: "col" }, L.client' not in script  # drawn from the layout


def test_a_stopped_answer_keeps_its_estimate_and_says_why_its_cached_tokens_are_unknown(
    fake: scripted.Script, settings: Any
) -> None:
    from bench.models import BenchJob

    speeds = {"prefill_speed": 600.0, "decode_speed": 25.0, "cells": [{}, {}]}
    learner = User.objects.get_or_create(username="learner1")[0]
    BenchJob.objects.create(
        owner=learner, kind="speed", lab=1, status="done", engine_url=settings.VLLM_BASE_URL, results=speeds
    )
    frames, answer = _stream_then("stop", fake)
    assert answer.status == Answer.Status.STOPPED
    assert frames[-1]["answer"]["timings"]["estimate_state"] == "ok"  # the card gets it at once
    t = answer.timings
    # Lab 1's speeds exist: the stopped answer is estimated, never told they are missing.
    assert t["estimate_state"] == "ok" and t["estimate"]["decode_speed"] == 25.0
    assert t["estimate"]["cached_known"] is False  # vLLM had not sent its final usage yet
    assert t["cached_state"] == "cut" and t["tokens"]["prompt"] is not None


def test_the_estimate_state_and_cached_state_say_why_a_number_is_missing() -> None:
    from rag.vllm.records import RequestRecord

    run = _chapter_run()
    run.record = RequestRecord(prompt_tokens=40, output_tokens=0)
    assert not chat.needs_speeds(run) and run.estimate_state == "no_output"
    run.record = RequestRecord(prompt_tokens=40, output_tokens=5, cached_tokens=32, finish_reason=None)
    assert chat.needs_speeds(run)
    chat.estimate_set(run, chat.Speeds(prefill=100.0, decode=10.0, basis="lab 1", samples=2))
    assert run.estimate_state == "ok" and run.estimate is not None and run.estimate["uncached_prompt_tokens"] == 8
    assert run.timings()["tokens"]["cached"] == 32 and run.timings()["cached_state"] == "reported"
    chat.estimate_set(run, None)
    assert run.estimate_state == "no_speeds"
    assert chat.cached_state(RequestRecord(finish_reason="stop")) == "unreported"
    assert chat.cached_state(RequestRecord(finish_reason="repeat")) == "cut"


def test_an_estimate_far_off_says_which_half_missed_and_the_answers_own_speed_beside_lab_1s() -> None:
    """The chat's decode ran at half Lab 1's speed (another load, another length): the row says so
    instead of leaving a 2× miss unexplained; a close estimate says nothing more."""
    from rag.vllm.records import RequestRecord

    speeds = chat.Speeds(prefill=1000.0, decode=20.0, basis="lab 1", samples=3)

    def answered(prompt: int, output: int, first_token_s: float, last_token_s: float) -> RequestRecord:
        return RequestRecord(prompt_tokens=prompt, output_tokens=output, text_chunk_at=[first_token_s, last_token_s])

    # Estimated 0.5 s + 2.05 s; measured 0.5 s + 4 s (40 tokens after the first at 10 tok/s).
    off = chat.estimate(answered(500, 41, 0.5, 4.5), speeds)["off"]  # type: ignore[index]
    assert off == {"half": "decode", "ratio": 1.8, "answer_speed": 10.0, "lab_speed": 20.0}
    slow_prefill = chat.estimate(answered(2000, 21, 6.0, 7.0), speeds)["off"]  # type: ignore[index]
    assert slow_prefill["half"] == "prefill" and slow_prefill["answer_speed"] == pytest.approx(333.3)
    assert chat.estimate(answered(500, 41, 0.5, 2.6), speeds)["off"] is None  # type: ignore[index]
    labels = views.chat_labels()
    assert {"{ratio}", "{answer}", "{lab}"} <= set(re.findall(r"\{\w+\}", labels["estimate_off_decode"]))


@pytest.mark.parametrize("bad", [0, -1, 10**18, 2**63, 10**30, True, "7", 7.0, [7]])
def test_an_id_in_a_frame_is_a_json_whole_number_within_request_numbers_bounds(bad: Any) -> None:
    from rag import ask

    assert ask._optional_id(7, "conversation") == 7 and ask._optional_id(None, "parent") is None
    with pytest.raises(prompting.SettingsError, match="conversation"):
        ask._optional_id(bad, "conversation")


# --- the chat admission (rag/admission.py): a full engine queues or refuses, never goes silent ---------------


@pytest.fixture
def one_slot(settings: Any) -> Any:
    """One answer at a time on the engine, the line as configured per test; a fresh count per test."""
    from rag import admission

    settings.CHAT_SLOTS_PER_ENGINE = 1
    settings.CHAT_LINE_MAX = 5
    settings.CHAT_WAIT_MAX_S = 90
    admission.gate.local = admission.LocalStore()
    return settings


async def _frames_until(socket: WebsocketCommunicator, kinds: set[str], timeout: float = 10) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] not in kinds:
        frames.append(await socket.receive_json_from(timeout=timeout))
    return frames


def test_a_second_learners_ask_waits_in_line_with_its_position_then_runs_and_times_its_wait_apart(
    fake: scripted.Script, one_slot: Any
) -> None:
    fake.pieces = scripted.plain_words(12)  # twelve words, never cut as a loop
    fake.delay_s = 0.05  # the first answer holds the engine's one slot for ~0.6 s
    first, second = _cookie("learner1"), _cookie("learner2")

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        one, two = _socket(first), _socket(second)
        assert (await one.connect())[0] and (await two.connect())[0]
        await one.send_json_to(_ask() | {"id": "a1"})
        assert (await one.receive_json_from(timeout=5))["type"] == "started"
        await two.send_json_to(_ask("디코드란?") | {"id": "b1"})
        second_frames = await _until_done(two)
        first_frames = await _until_done(one)
        await one.disconnect()
        await two.disconnect()
        return first_frames, second_frames

    first_frames, second_frames = aio.run(go())
    kinds = [f["type"] for f in second_frames]
    assert kinds[0] == "queued" and kinds[-1] == "done", kinds
    assert second_frames[0] == {"type": "queued", "id": "b1", "position": 1, "wait_s": None, "slots": 1}
    assert kinds.index("admitted") < kinds.index("started") < kinds.index("token")
    assert first_frames[-1]["answer"]["status"] == "done" and second_frames[-1]["answer"]["status"] == "done"
    # The second answer started only once the first was done: one answer on the engine at a time.
    assert len(fake.requests) == 2
    waited = second_frames[-1]["answer"]["timings"]
    assert waited["queue"]["position"] == 1 and waited["queue_wait_ms"] >= 100
    assert waited["queue_wait_ms"] == next(f for f in second_frames if f["type"] == "admitted")["waited_ms"]
    # The wait is its own row: the chat's own steps and the client's TTFT leave it out.
    assert waited["steps"]["sent"] == pytest.approx(waited["prep_ms"] + waited["queue_wait_ms"], abs=1)
    assert waited["client"]["ttft_ms"] < waited["queue_wait_ms"]  # the scripted engine answers at once
    assert waited["steps"]["admitted"] >= waited["queue_wait_ms"]
    assert first_frames[-1]["answer"]["timings"]["queue_wait_ms"] is None


def test_an_ask_beyond_a_full_line_is_refused_at_once_with_a_retry_time_and_nothing_is_saved(
    fake: scripted.Script, one_slot: Any
) -> None:
    one_slot.CHAT_LINE_MAX = 0  # no line: the engine's one slot, then refusals
    fake.pieces = scripted.plain_words(12)  # twelve words, never cut as a loop
    fake.delay_s = 0.05
    first, second = _cookie("learner1"), _cookie("learner2")

    async def go() -> tuple[list[dict[str, Any]], float]:
        one, two = _socket(first), _socket(second)
        assert (await one.connect())[0] and (await two.connect())[0]
        await one.send_json_to(_ask() | {"id": "a1"})
        assert (await one.receive_json_from(timeout=5))["type"] == "started"
        sent = time.monotonic()
        await two.send_json_to(_ask("디코드란?") | {"id": "b1"})
        refused = [await two.receive_json_from(timeout=5)]
        took = time.monotonic() - sent
        await _until_done(one)
        assert await two.receive_nothing(timeout=0.2)
        await one.disconnect()
        await two.disconnect()
        return refused, took

    (refused,), took = aio.run(go())
    assert took < 2, "the refusal was not at once"
    assert refused["type"] == "refused" and refused["id"] == "b1" and refused["reason"] == "full"
    assert refused["retry_s"] >= 1
    assert refused["error"] == f"대기 줄이 꽉 찼습니다 (엔진마다 0명까지). {refused['retry_s']}초 후에 다시 물어보세요."
    assert Answer.objects.count() == 1 and len(fake.requests) == 1


@pytest.mark.parametrize("action", ["stop", "close"])
def test_an_ask_cancelled_or_closed_while_waiting_gives_its_place_back_and_never_reaches_vllm(
    fake: scripted.Script, one_slot: Any, action: str
) -> None:
    from rag import admission

    fake.pieces = scripted.plain_words(12)  # twelve words, never cut as a loop
    fake.delay_s = 0.05
    first, second = _cookie("learner1"), _cookie("learner2")

    async def go() -> list[dict[str, Any]]:
        one, two = _socket(first), _socket(second)
        assert (await one.connect())[0] and (await two.connect())[0]
        await one.send_json_to(_ask() | {"id": "a1"})
        assert (await one.receive_json_from(timeout=5))["type"] == "started"
        await two.send_json_to(_ask("디코드란?") | {"id": "b1"})
        assert (await two.receive_json_from(timeout=5))["type"] == "queued"
        frames: list[dict[str, Any]] = []
        if action == "stop":
            await two.send_json_to({"type": "stop", "id": "b1"})
            frames = await _until_done(two)
        await two.disconnect()
        await _until_done(one)
        await one.disconnect()
        return frames

    frames = aio.run(go())
    deadline = time.monotonic() + 5
    while Answer.objects.filter(status=Answer.Status.STREAMING).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake.requests) == 1, "the cancelled ask reached vLLM"
    cancelled = Answer.objects.get(question="디코드란?")
    assert cancelled.status == Answer.Status.STOPPED and cancelled.text == ""
    assert "queue_cancelled" in [n["code"] for n in cancelled.timings["notices"]]
    if action == "stop":
        assert frames[-1]["type"] == "done" and frames[-1]["answer"]["status"] == "stopped"
    engine = admission.gate.local.engines[settings.VLLM_BASE_URL.rstrip("/")]
    assert not engine.held and not engine.line, "a place was not given back"


def test_a_chat_through_a_router_that_is_down_names_the_router_not_vllm(settings: Any) -> None:
    """The rehearsal's router fault: a question asked while vllm-router was down said "vLLM에 연결할 수 없습니다"
    with the router's address, blaming the engines behind it, which were up."""
    from django.utils import translation

    from tests.settings import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    settings.LAB_ROUTER, settings.ROUTER_URL = True, dead
    with pytest.raises(vllm_client.EngineUnavailable) as raised:
        vllm_client.engine_info(url=dead, timeout=2)
    assert raised.value.routed and str(raised.value).startswith(f"vllm-router at {dead}")
    assert chat._unreachable(raised.value).startswith("vLLM 라우터에 연결할 수 없습니다: vllm-router at")
    streamed = f"ConnectError: [Errno 111] Connection refused (vllm-router at {dead})"
    assert chat._engine_error(streamed, 60, vllm_client.server_name(dead)).startswith(
        "vLLM 라우터에 연결할 수 없습니다"
    )
    with translation.override("en"):
        assert chat._unreachable(raised.value).startswith("Cannot reach the vLLM router")
    settings.LAB_ROUTER = False  # the same address as an engine: vLLM's
    assert vllm_client.server_name(dead) == "vLLM"
    streamed = streamed.replace("vllm-router", "vLLM")
    assert chat._engine_error(streamed, 60, vllm_client.server_name(dead)).startswith("vLLM에 연결할 수 없습니다")
