"""The chat over the real parts: Daphne, the real vLLM engine, Chroma with the chapter, Redis."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from tests import aio

pytestmark = pytest.mark.integration
QUESTION = "프리필과 디코드는 어떻게 다른가요?"


@pytest.fixture(scope="module")
def chat(full_stack: str, chapter_indexed: None) -> dict[str, str]:
    """The web server's address and a signed-in session (local mode signs the visitor in)."""
    response = httpx.get(f"{full_stack}/chat/", timeout=30)
    assert response.status_code == 200
    return {"web": full_stack, "cookie": f"sessionid={response.cookies['sessionid']}"}


async def _ask(
    socket: Any, ask_id: str, question: str, stop_after: int | None = None, **settings: Any
) -> tuple[list[dict[str, Any]], list[float]]:
    """Send one question; return its frames and the arrival time of every frame."""
    await socket.send(json.dumps({"type": "ask", "id": ask_id, "question": question, "settings": settings}))
    frames: list[dict[str, Any]] = []
    arrivals: list[float] = []
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), 180))
        frames.append(frame)
        arrivals.append(time.perf_counter())
        streamed = sum(f["type"] == "token" for f in frames)
        if frame["type"] == "token" and stop_after is not None and streamed == stop_after:
            await socket.send(json.dumps({"type": "stop", "id": ask_id}))
        if frame["type"] in ("done", "error") and frame.get("id") == ask_id:
            return frames, arrivals


def _session(chat: dict[str, str], body: Any) -> Any:
    url = chat["web"].replace("http://", "ws://") + "/ws/chat/"

    async def go() -> Any:
        async with websockets.connect(
            url, origin=Origin(chat["web"]), additional_headers={"Cookie": chat["cookie"]}, open_timeout=10
        ) as socket:
            return await body(socket)

    return aio.run(go())


def _running_requests(engine: str) -> float:
    text = httpx.get(f"{engine}/metrics", timeout=10).text
    values = re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
    assert values, "vllm:num_requests_running is missing from /metrics"
    return sum(float(v) for v in values)


def test_a_real_answer_streams_token_by_token_with_a_consistent_timing_panel(chat: dict[str, str]) -> None:
    frames, arrivals = _session(chat, lambda s: _ask(s, "a1", QUESTION, top_k=3, max_tokens=32))
    answer = frames[-1]["answer"]
    assert answer["status"] == "done", answer["error"]
    tokens = [i for i, f in enumerate(frames) if f["type"] == "token"]
    assert len(tokens) >= 2, "tokens must arrive one by one"
    assert arrivals[tokens[-1]] - arrivals[tokens[0]] > 0.01, "tokens arrived in one burst"
    t = answer["timings"]
    c, s, tok = t["client"], t["server"], t["tokens"]
    streamed = "".join(frames[i]["text"] for i in tokens)
    assert t["finish_reason"] in ("length", "stop", "repeat")
    if t["finish_reason"] == "repeat":
        # The base model looped: the guard closed the stream (vLLM aborted the request, so it
        # reports no per-request times) and the saved answer is the streamed text without the repeat.
        assert streamed.startswith(answer["text"]) and len(streamed) > len(answer["text"])
    else:
        assert streamed == answer["text"]
        assert s["queue_ms"] is not None and s["prefill_ms"] > 0 and s["decode_ms"] is not None
        assert s["prefill_ms"] <= c["ttft_ms"] + 1  # the server's prefill ends before our client sees the token
    assert t["retrieval_ms"] > 0 and t["api"] == "completions"
    assert 0 < c["ttft_ms"] < c["e2el_ms"] and c["decode_ms"] == pytest.approx(c["e2el_ms"] - c["ttft_ms"], abs=0.2)
    assert c["first_chunk_ms"] <= c["ttft_ms"]
    assert tok["prompt"] > 0 and tok["output"] >= len(tokens)  # a token may end mid-character: no text yet
    assert tok["instructions"] + tok["context"] + tok["question"] == tok["prompt"]
    # Cached tokens come with vLLM's final usage chunk, which an answer the guard closed never gets.
    assert tok["context"] > 0 and (tok["cached"] is not None or t["finish_reason"] == "repeat")
    assert answer["sources"] and all(src["tokens"] > 0 for src in answer["sources"])
    assert "질문: " + QUESTION in answer["prompt"]
    # Saved and reopened: the conversation page carries the same numbers.
    page = httpx.get(f"{chat['web']}/chat/{answer['conversation']}/", headers={"Cookie": chat["cookie"]}).text
    assert str(c["ttft_ms"]) in page


def test_prompt_tokens_grow_with_top_k_and_a_repeated_question_hits_the_prefix_cache(chat: dict[str, str]) -> None:
    async def body(socket: Any) -> list[dict[str, Any]]:
        answers = []
        for n, top_k in enumerate((1, 3, 6)):
            frames, _ = await _ask(socket, f"k{n}", QUESTION, top_k=top_k, max_tokens=4)
            answers.append(frames[-1]["answer"])
        frames, _ = await _ask(socket, "again", QUESTION, top_k=6, max_tokens=4)
        answers.append(frames[-1]["answer"])
        return answers

    answers = _session(chat, body)
    prompt = [a["timings"]["tokens"]["prompt"] for a in answers]
    assert prompt[0] < prompt[1] < prompt[2] == prompt[3], prompt
    context = [a["timings"]["tokens"]["context"] for a in answers]
    assert context[0] < context[1] < context[2]
    cached = answers[3]["timings"]["tokens"]["cached"]
    assert cached > 0 and cached >= prompt[3] - 128, (cached, prompt[3])  # all but the last (partial) KV block
    assert answers[3]["timings"]["client"]["ttft_ms"] < answers[2]["timings"]["client"]["ttft_ms"]


def test_stop_and_a_closed_tab_cancel_the_vllm_request(chat: dict[str, str], engine: str) -> None:
    baseline = _running_requests(engine)
    question = "KV 캐시가 무엇인지 아주 길고 자세하게 설명해 주세요."

    frames, _ = _session(chat, lambda s: _ask(s, "stop1", question, stop_after=3, max_tokens=600, temperature=1.0))
    answer = frames[-1]["answer"]
    assert answer["status"] == "stopped", answer
    assert 3 <= answer["timings"]["client"]["chunks"] < 600 and answer["text"]
    deadline = time.monotonic() + 10
    while _running_requests(engine) > baseline and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running_requests(engine) == baseline

    async def close_mid_stream(socket: Any) -> int:
        await socket.send(
            json.dumps(
                {"type": "ask", "id": "tab", "question": question, "settings": {"max_tokens": 600, "temperature": 1.0}}
            )
        )
        started: dict[str, Any] = {}
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 180))
            started = frame if frame["type"] == "started" else started
            if frame["type"] == "token":
                assert _running_requests(engine) > baseline  # it is running now …
                return int(started["conversation"])  # … and leaving the block closes the tab

    conversation = _session(chat, close_mid_stream)
    deadline = time.monotonic() + 10
    while _running_requests(engine) > baseline and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running_requests(engine) == baseline
    # The request to vLLM ends at the cancel; the row's final write (after the estimate and the keeper's
    # last write, rag.keeper) lands a moment later: one CI run read the page in between.
    deadline = time.monotonic() + 10
    while True:
        page = httpx.get(f"{chat['web']}/chat/{conversation}/", headers={"Cookie": chat["cookie"]}).text
        if '"status": "streaming"' not in page or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert '"status": "stopped"' in page


def test_a_chat_socket_without_a_session_is_refused(chat: dict[str, str]) -> None:
    url = chat["web"].replace("http://", "ws://") + "/ws/chat/"

    async def go() -> None:
        async with websockets.connect(url, origin=Origin(chat["web"]), open_timeout=10):
            pass

    # Closed before the handshake completes: Daphne answers the upgrade with 403.
    with pytest.raises(InvalidStatus, match="403"):
        aio.run(go())


def test_the_overhead_benchmark_compares_the_chat_with_direct_vllm(chat: dict[str, str]) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("chat_overhead", web=chat["web"], cookie=chat["cookie"], runs=2, json=True, stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["runs"] == 2 and len(summary["rows"]) == 2
    assert summary["direct_ttft_ms"] > 0 and summary["chat_ttft_ms"] > 0
    assert summary["chat_ttft_ms"] >= summary["chat_client_ttft_ms"]
    assert summary["ratio"] == pytest.approx(summary["chat_ttft_ms"] / summary["direct_ttft_ms"], rel=0.01)
    cold_out = StringIO()
    call_command("chat_overhead", web=chat["web"], cookie=chat["cookie"], runs=2, cold=True, json=True, stdout=cold_out)
    cold = json.loads(cold_out.getvalue())
    assert cold["cold"] and cold["runs"] == 2
    assert cold["direct_ttft_ms"] > summary["direct_ttft_ms"]  # the whole prompt prefilled, not only the question
