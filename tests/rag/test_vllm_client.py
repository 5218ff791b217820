"""The vLLM client against a scripted OpenAI-compatible stream (fast; the real engine is in test_integration)."""

from __future__ import annotations

import asyncio
import itertools
import json

import aiohttp
import httpx
import pytest

from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord
from tests import aio


def _sse(*chunks: dict[str, object]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url="http://engine.test", transport=handler)


def test_it_streams_with_usage_and_returns_a_measured_record() -> None:
    seen: dict[str, object] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        seen.update(json.loads(request.content))
        body = _sse(
            {"choices": [{"index": 0, "text": "안녕", "finish_reason": None}]},
            {"choices": [{"index": 0, "text": "하세요", "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    pieces: list[str] = []

    async def on_text(text: str, record: object) -> None:
        pieces.append(text)

    async def go() -> RequestRecord:
        async with _client(httpx.MockTransport(handle)) as http:
            return await vllm_client.stream_completion(
                "질문", max_tokens=2, model="m", ignore_eos=True, on_text=on_text, client=http
            )

    record = aio.run(go())
    assert seen["stream"] is True
    assert seen["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert seen["ignore_eos"] is True
    assert record.success and record.error is None
    assert pieces == ["안녕", "하세요"]
    assert record.output_tokens == 2 and record.ttft is not None and record.ttft >= 0


@pytest.mark.parametrize("status", [400, 500, 503])
def test_an_http_error_is_recorded_not_raised(status: int) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, text="model overloaded"))

    async def go() -> RequestRecord:
        async with _client(transport) as http:
            return await vllm_client.stream_completion("q", max_tokens=4, model="m", client=http)

    record = aio.run(go())
    assert not record.success
    assert record.error == f"HTTP {status}: model overloaded"


def test_a_dead_engine_is_recorded_with_its_address(settings: object) -> None:
    async def go() -> RequestRecord:
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as http:
            return await vllm_client.stream_completion("q", max_tokens=4, model="m", client=http)

    record = aio.run(go())
    assert not record.success
    assert "ConnectError" in (record.error or "")


def test_engine_info_names_the_unreachable_server(settings: object) -> None:
    settings.VLLM_BASE_URL = "http://127.0.0.1:9"  # type: ignore[attr-defined]
    with pytest.raises(vllm_client.EngineUnavailable, match=r"vLLM at http://127.0.0.1:9"):
        vllm_client.engine_info(timeout=1.0)


def test_a_connection_dropped_before_any_answer_is_sent_once_more() -> None:
    calls: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        body = _sse({"choices": [{"index": 0, "text": "네", "finish_reason": "stop"}]})
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    async def go() -> RequestRecord:
        async with _client(httpx.MockTransport(handle)) as http:
            return await vllm_client.stream_completion("질문", max_tokens=2, model="m", client=http)

    record = aio.run(go())
    assert len(calls) == 2 and record.success and record.generated_text == "네"


class _BreaksMidway(httpx.AsyncByteStream):
    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield b'data: {"choices": [{"index": 0, "text": "\\uc808\\ubc18", "finish_reason": null}]}\n\n'
        raise httpx.ReadError("connection reset")


def test_a_stream_broken_after_the_answer_began_is_not_sent_again() -> None:
    calls: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(200, stream=_BreaksMidway(), headers={"content-type": "text/event-stream"})

    async def go() -> RequestRecord:
        async with _client(httpx.MockTransport(handle)) as http:
            return await vllm_client.stream_completion("질문", max_tokens=8, model="m", client=http)

    record = aio.run(go())
    assert calls == [1] and not record.success
    assert record.error is not None and "ReadError" in record.error and record.generated_text == "절반"


def test_an_error_without_text_is_still_explained() -> None:
    # A connection the engine drops when it dies raises ReadError("") in httpx: the job's error
    # once read "vLLM at …: ReadError: " and said nothing of what happened.
    assert vllm_client.explain(httpx.ReadError("")) == (
        "ReadError: the connection closed while the answer was being read"
    )
    assert vllm_client.explain(httpx.ConnectError("[Errno 111] refused")) == "ConnectError: [Errno 111] refused"
    assert vllm_client.explain(KeyError()) == "KeyError: no further detail"


def test_aiohttp_errors_beneath_httpx_are_named_for_what_happened() -> None:
    # httpx-aiohttp re-raises every aiohttp connection error as ConnectTimeout; the cause says which.
    def raised(cause: Exception) -> httpx.ConnectTimeout:
        try:
            raise httpx.ConnectTimeout(str(cause)) from cause
        except httpx.ConnectTimeout as exc:
            return exc

    assert vllm_client.explain(raised(aiohttp.ServerDisconnectedError())) == (
        "RemoteProtocolError: Server disconnected"
    )
    cut = aiohttp.ClientPayloadError("Response payload is not completed: <TransferEncodingError: 400>")
    assert vllm_client.explain(raised(cut)) == "ReadError: the connection closed while the answer was being read"


def test_a_dead_engine_is_named_as_a_refused_connection_through_our_own_pool() -> None:
    async def go() -> RequestRecord:
        async with vllm_client.connect("http://127.0.0.1:9") as http:
            return await vllm_client.stream_completion("q", max_tokens=4, model="m", client=http)

    record = aio.run(go())
    assert not record.success and (record.error or "").startswith("ConnectError: Cannot connect"), record.error


def test_our_pool_sends_once_more_when_the_server_hangs_up_before_answering() -> None:
    # A raw server: it closes the first connection as soon as it has read the request, then answers.
    calls: list[int] = []
    body = _sse({"choices": [{"index": 0, "text": "네", "finish_reason": "stop"}]})

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        calls.append(1)
        if len(calls) > 1:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
            writer.write(b"content-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    async def go() -> RequestRecord:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, vllm_client.connect(f"http://127.0.0.1:{port}") as http:
            return await vllm_client.stream_completion("질문", max_tokens=2, model="m", client=http)

    record = aio.run(go())
    assert len(calls) == 2 and record.success and record.generated_text == "네", record.error


class _Pieces(httpx.AsyncByteStream):
    """An SSE body cut at awkward places: inside a JSON object, between \\r and \\n, before [DONE]."""

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        body = (
            b'data: {"choices": [{"index": 0, "text": "\\uc5f0", "finish_reason": null}]}\r\n\r\n'
            b": a comment line\n\n"
            b'data: {"choices": [{"index": 0, "text": "\\ucc28", "finish_reason": "stop"}]}\n\n'
            b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n'
            b"data: [DONE]\n\n"
        )
        cuts = [0, 20, 75, 78, 90, 150, 200, len(body) - 3, len(body)]  # 75: after the \r, before its \n
        for start, end in itertools.pairwise(cuts):
            yield body[start:end]


def test_lines_cut_across_reads_are_joined_before_they_are_parsed() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Pieces(), headers={"content-type": "text/event-stream"})

    async def go() -> RequestRecord:
        async with _client(httpx.MockTransport(handle)) as http:
            return await vllm_client.stream_completion("질문", max_tokens=2, model="m", client=http)

    record = aio.run(go())
    assert record.success and record.generated_text == "연차" and len(record.text_chunk_at) == 2
    assert record.output_tokens == 2 and record.prompt_tokens == 3 and record.finish_reason == "stop"


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("penalty", [0.8, 0.0])
def test_a_specs_frequency_penalty_is_sent_to_either_api_and_none_is_sent_for_zero(api: str, penalty: float) -> None:
    sent: list[tuple[str, dict[str, object]]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, json.loads(request.content)))
        delta = {"delta": {"content": "네"}} if api == "chat" else {"text": "네"}
        body = _sse({"choices": [{"index": 0, **delta, "finish_reason": "stop"}]})
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    spec = vllm_client.RequestSpec(prompt="질문", max_tokens=2, api=api, frequency_penalty=penalty)  # type: ignore[arg-type]

    async def go() -> RequestRecord:
        async with _client(httpx.MockTransport(handle)) as http:
            return await vllm_client.stream_request(spec, model="m", client=http)

    assert aio.run(go()).success
    ((path, payload),) = sent
    assert path == ("/v1/chat/completions" if api == "chat" else "/v1/completions")
    if penalty:
        assert payload["frequency_penalty"] == penalty
    else:
        assert "frequency_penalty" not in payload
