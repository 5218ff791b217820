"""The scripted OpenAI-compatible streaming server: the unit tests' engine and the yardstick
of the client's own overhead.

    python -m bench.scripted_server --port 8100 --ttft-ms 50 --itl-ms 10

Standard library only: raw HTTP/1.1 on asyncio, keep-alive, chunked streams, one
``asyncio.sleep`` per token, so one process holds 1000+ concurrent streams. Two ways
to run it:

* ``spawn()`` (and ``python -m``): its own process, so the measuring client does not
  share its event loop or CPU thread (``bench_client_overhead``);
* ``serve()`` / ``ThreadedServer``: a thread of this process, for tests, which change
  the ``Script`` while it runs (answer 500, stall, stream slowly) and read what it
  received (``Script.requests``, ``Script.disconnected``).

What it answers is a ``Script``. The default is a small engine answering the chat:
four Korean pieces 10 ms apart whatever ``max_tokens`` asks, a token per 3 bytes,
16 cached prompt tokens and vLLM's per-request metrics on the final chunk.
``Script.timed()`` is the overhead yardstick: ``max_tokens`` tokens of ``text``, the
first exactly ``ttft`` after the request was read and token ``k`` at ``ttft + k·itl``
(an absolute schedule: a late timer does not push the later tokens back), a token per
word. Streams are in vLLM's shape::

    data: {"id": ..., "choices": [{"index": 0, "text": "x", "finish_reason": null, ...}]}
    ...                   (the last text chunk has finish_reason "length", or "stop" if shorter)
    data: {"id": ..., "choices": [], "usage": {"prompt_tokens": P, "completion_tokens": N, ...}}
    data: [DONE]

(``/v1/chat/completions`` sends ``delta.content`` instead of ``text``.) Usage comes
as vLLM sends it: on a final chunk when ``stream_options.include_usage`` is set, and
on every chunk as well with ``continuous_usage_stats`` (our client asks for both).
Also ``GET /health``, ``/v1/models``, ``/version``, ``/metrics`` (Prometheus text:
running and waiting requests (``Script.max_streams`` caps the running ones), TTFT and
queue-time histograms, prefix-cache counters, KV-cache usage, generation tokens and
tokens per engine step (one per streamed token)) and ``POST /tokenize`` (400 for chat
messages unless ``chat_template``).

``GET /stats`` (``?reset=1`` also clears them) returns what the server saw, with
``time.perf_counter()`` timestamps: per stream the prompt's first word, when
the request had been read, when its first and last tokens were written; the
peak number of concurrent streams; connections accepted. On Linux
``perf_counter`` is CLOCK_MONOTONIC, one clock for every process, so a client
on the same machine can split its measured TTFT into send path, server
lateness and receive path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import select
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parent.parent
READY_LINE = "scripted server listening on "
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}
_MAX_BODY = 64 * 1024 * 1024
_GENERATE = ("/v1/completions", "/v1/chat/completions")
# vLLM's per-request metrics (--enable-per-request-metrics), ms, on the final chunk.
REQUEST_METRICS = {"queue_time_ms": 1.5, "time_to_first_token_ms": 20.0, "generation_time_ms": 30.0}


@dataclass
class Script:
    """What the server answers and how fast. Read at every request: a test may change it mid-run."""

    # The answer: these pieces, one token each, whatever max_tokens asks; empty: ``text``
    # repeated max_tokens times (``default_tokens`` when the request names none).
    pieces: list[str] = field(default_factory=lambda: ["프리필은", " 입력을", " 한 번에", " 처리합니다."])
    text: str = "x"
    default_tokens: int = 16
    # Timing, from when the request was read (plus ``stall_s``): token k at ttft_s + k·delay_s.
    ttft_s: float = 0.0
    delay_s: float = 0.01  # between tokens (the inter-token latency)
    pause_after_last: bool = True  # one more delay_s after the last token, before the usage chunk
    stall_s: float = 0.0  # wait before answering a generation request at all
    # Capacity: 0 = every request generates at once; n = at most n at a time, the rest wait their
    # turn (vllm:num_requests_waiting), and a request's schedule starts when it gets a slot.
    max_streams: int = 0
    # The engine.
    model: str = "fake-model"
    version: str = "fake"
    max_model_len: int = 8192
    tokenizer: Literal["bytes", "words"] = "bytes"  # a token per 3 bytes (+1), or per word
    chat_template: bool = False
    cached_tokens: int | None = 16  # prompt tokens reported as served from the prefix cache
    request_metrics: bool = True  # REQUEST_METRICS on the final chunk
    metrics: bool = True  # serve /metrics
    # Failures: a generation request is answered with this status and message.
    status: int = 200
    error_message: str = ""
    # What it received: every generation request's body; set when a client left mid-stream.
    requests: list[dict[str, Any]] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def timed(cls, *, ttft_s: float, itl_s: float, model: str = "scripted", text: str = "x") -> Script:
        """The client-overhead yardstick: exactly max_tokens tokens on an exact schedule, nothing else."""
        return cls(
            pieces=[],
            text=text,
            ttft_s=ttft_s,
            delay_s=itl_s,
            pause_after_last=False,
            model=model,
            version="scripted",
            max_model_len=131072,
            tokenizer="words",
            cached_tokens=None,
            request_metrics=False,
        )

    def count(self, text: str) -> int:
        return len(text.split()) if self.tokenizer == "words" else len(text.encode()) // 3 + 1


@dataclass
class Stats:
    connections: int = 0
    streams: int = 0
    peak_streams: int = 0
    completed: int = 0  # a Prometheus counter: never reset
    waiting: int = 0  # requests waiting for a slot (Script.max_streams)
    tokens: int = 0  # every token streamed (vllm:generation_tokens_total; one engine step each): never reset
    requests: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=200_000))

    def as_dict(self) -> dict[str, Any]:
        return {
            "clock": "time.perf_counter",
            "connections": self.connections,
            "streams": self.streams,
            "peak_streams": self.peak_streams,
            "completed": self.completed,
            "requests": list(self.requests),
        }

    def reset(self) -> None:
        self.connections = 0
        self.peak_streams = self.streams
        self.requests.clear()


def _chunk(data: bytes) -> bytes:
    """One piece of a ``transfer-encoding: chunked`` body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class _BadRequest(Exception):
    pass


@dataclass(frozen=True)
class _Generation:
    """One generation request as the script answers it."""

    chat: bool
    prompt_tokens: int
    key: str  # the prompt's first word, to match the request in /stats
    pieces: list[str]
    finish: str  # "length": the answer used all of max_tokens; else "stop"

    def usage(self, completion: int, *, final: bool, cached: int | None) -> str:
        total = self.prompt_tokens + completion
        details = f',"prompt_tokens_details":{{"cached_tokens":{cached}}}' if final and cached is not None else ""
        return (
            f'"usage":{{"prompt_tokens":{self.prompt_tokens},"total_tokens":{total},'
            f'"completion_tokens":{completion}{details}}}'
        )

    def choice(self, k: int) -> str:
        text = json.dumps(self.pieces[k])
        finish = f'"{self.finish}"' if k == len(self.pieces) - 1 else "null"
        if self.chat:
            return f'{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":{finish}}}'
        return f'{{"index":0,"text":{text},"logprobs":null,"finish_reason":{finish},"stop_reason":null}}'


class ScriptedServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.stats = Stats()
        self._ids = itertools.count(1)
        self._connections: set[asyncio.Task[Any]] = set()
        self._slots: tuple[int, asyncio.Semaphore] | None = None

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """A generation slot when the script limits them (``max_streams``); waits counted meanwhile."""
        most = self.script.max_streams
        if most <= 0:
            yield
            return
        if self._slots is None or self._slots[0] != most:
            self._slots = (most, asyncio.Semaphore(most))
        slots = self._slots[1]
        self.stats.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.stats.waiting -= 1
        try:
            yield
        finally:
            slots.release()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests one after another while the client keeps it alive."""
        self.stats.connections += 1
        task = asyncio.current_task()
        assert task is not None  # asyncio runs every connection's handler as a task
        self._connections.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away
        finally:
            self._connections.discard(task)
            writer.close()

    async def close_connections(self) -> None:
        """Drop every open connection, streams included (as an engine that went away)."""
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise
            return False  # closed between requests
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = request_line.split(" ", 2)
        except ValueError:
            self._respond(writer, 400, {"error": {"message": "bad request line"}}, keep_alive=False)
            await writer.drain()
            return False
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        keep_alive = version.strip() == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        length = int(headers.get("content-length") or 0)
        if length > _MAX_BODY:
            self._respond(writer, 413, {"error": {"message": "body too large"}}, keep_alive=False)
            await writer.drain()
            return False
        body = await reader.readexactly(length) if length else b""
        arrival = time.perf_counter()
        path, _, query = target.partition("?")
        try:
            await self._route(writer, method, path, query, body, keep_alive=keep_alive, arrival=arrival)
        except _BadRequest as exc:
            self._respond(writer, 400, {"error": {"message": str(exc), "code": 400}}, keep_alive=keep_alive)
        await writer.drain()
        return keep_alive

    def _gets(self) -> dict[str, Callable[[], Any]]:
        """The GET routes and their bodies, made when asked (/stats copies every stream's entry)."""
        script = self.script
        card = {"id": script.model, "object": "model", "owned_by": "scripted", "max_model_len": script.max_model_len}
        gets: dict[str, Callable[[], Any]] = {
            "/health": dict,
            "/version": lambda: {"version": script.version},
            "/v1/models": lambda: {"object": "list", "data": [card]},
            "/stats": self.stats.as_dict,
        }
        if script.metrics:
            gets["/metrics"] = self._metrics_text
        return gets

    async def _route(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        query: str,
        body: bytes,
        *,
        keep_alive: bool,
        arrival: float,
    ) -> None:
        gets = self._gets()
        posts = ("/tokenize", *_GENERATE)
        wrong_method = (path in gets and method != "GET") or (path in posts and method != "POST")
        if wrong_method:
            self._respond(writer, 405, {"error": {"message": f"{method} {path}"}}, keep_alive=keep_alive)
        elif path in gets:
            self._respond(writer, 200, gets[path](), keep_alive=keep_alive)
            if path == "/stats" and parse_qs(query).get("reset", ["0"])[0] not in ("", "0"):
                self.stats.reset()
        elif path not in posts:  # e.g. /reset_prefix_cache outside vLLM's dev mode
            self._respond(writer, 404, {"error": {"message": f"no route {path}"}}, keep_alive=keep_alive)
        elif path == "/tokenize":
            self._tokenize(writer, _json_object(body), keep_alive=keep_alive)
        else:
            await self._generate(writer, path, _json_object(body), keep_alive=keep_alive, arrival=arrival)

    def _tokenize(self, writer: asyncio.StreamWriter, payload: dict[str, Any], *, keep_alive: bool) -> None:
        script = self.script
        if "messages" in payload and not script.chat_template:
            # As vLLM answers for a model without a chat template.
            raise _BadRequest("the scripted model has no chat template")
        text = json.dumps(payload["messages"]) if "messages" in payload else str(payload.get("prompt", ""))
        count = script.count(text)
        answer = {"count": count, "max_model_len": script.max_model_len, "tokens": list(range(count))}
        self._respond(writer, 200, answer, keep_alive=keep_alive)

    def _metrics_text(self) -> str:
        n, labels = self.stats.completed, f'{{model_name="{self.script.model}",engine="0"}}'
        samples = [
            ("vllm:num_requests_running", self.stats.streams),
            ("vllm:num_requests_waiting", self.stats.waiting),
            ("vllm:time_to_first_token_seconds_sum", 0.02 * n),
            ("vllm:time_to_first_token_seconds_count", n),
            ("vllm:request_queue_time_seconds_sum", 0.0015 * n),
            ("vllm:request_queue_time_seconds_count", n),
            ("vllm:prefix_cache_queries_total", 100 * n),
            ("vllm:prefix_cache_hits_total", 16 * n),
            ("vllm:kv_cache_usage_perc", min(1.0, 0.01 * self.stats.streams)),
            ("vllm:num_preemptions_total", 0),
            ("vllm:generation_tokens_total", self.stats.tokens),
            ("vllm:iteration_tokens_total_sum", self.stats.tokens),
            ("vllm:iteration_tokens_total_count", self.stats.tokens),
        ]
        return "# HELP vllm:num_requests_running running\n" + "".join(f"{k}{labels} {v}\n" for k, v in samples)

    def _respond(self, writer: asyncio.StreamWriter, status: int, body: Any, *, keep_alive: bool) -> None:
        """A whole response: a str body as Prometheus text, anything else as JSON."""
        text = isinstance(body, str)
        data = body.encode() if text else json.dumps(body).encode()
        kind = "text/plain; version=0.0.4" if text else "application/json"
        connection = "" if keep_alive else "connection: close\r\n"
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: {kind}\r\n"
            f"content-length: {len(data)}\r\n{connection}\r\n"
        )
        writer.write(head.encode() + data)

    def _generation(self, path: str, payload: dict[str, Any]) -> _Generation:
        script = self.script
        chat = path == "/v1/chat/completions"
        prompt = json.dumps(payload.get("messages")) if chat else payload.get("prompt", "")
        if not isinstance(prompt, str):
            raise _BadRequest("prompt must be a string")
        asked = payload.get("max_tokens")
        try:
            tokens = script.default_tokens if asked is None else int(asked)
        except (TypeError, ValueError) as exc:
            raise _BadRequest("max_tokens must be an integer") from exc
        if tokens < 1:
            raise _BadRequest("max_tokens must be at least 1")
        pieces = list(script.pieces) or [script.text] * tokens
        words = prompt.split()
        return _Generation(
            chat=chat,
            prompt_tokens=script.count(prompt),
            key=words[0] if words and not chat else "",
            pieces=pieces,
            finish="length" if len(pieces) >= tokens else "stop",
        )

    async def _generate(
        self, writer: asyncio.StreamWriter, path: str, payload: dict[str, Any], *, keep_alive: bool, arrival: float
    ) -> None:
        script = self.script
        script.requests.append(payload)
        if script.stall_s:
            await asyncio.sleep(script.stall_s)
        if script.status != 200:
            error = {"error": {"message": script.error_message, "code": script.status}}
            self._respond(writer, script.status, error, keep_alive=keep_alive)
            return
        generation = self._generation(path, payload)
        async with self._slot():
            start = arrival + script.stall_s
            if script.max_streams:  # a request that waited for its slot starts when it got it
                start = max(start, time.perf_counter())
            await self._answer(writer, path, payload, generation, keep_alive=keep_alive, start=start)

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        path: str,
        payload: dict[str, Any],
        generation: _Generation,
        *,
        keep_alive: bool,
        start: float,
    ) -> None:
        script = self.script
        created = int(time.time())
        model = json.dumps(str(payload.get("model") or script.model))
        kind = "chat.completion.chunk" if generation.chat else "text_completion"
        opening = f'{{"id":"cmpl-scripted-{next(self._ids)}","object":"{kind}","created":{created},"model":{model}'
        if payload.get("stream"):
            await self._stream(writer, generation, opening, payload, keep_alive=keep_alive, start=start)
            return
        n = len(generation.pieces)
        await asyncio.sleep(max(0.0, start + script.ttft_s + (n - 1) * script.delay_s - time.perf_counter()))
        self.stats.completed += 1
        choice = {"index": 0, "text": "".join(generation.pieces), "logprobs": None, "finish_reason": generation.finish}
        usage = generation.usage(n, final=True, cached=script.cached_tokens)
        self._respond(writer, 200, json.loads(f"{opening},{usage}}}") | {"choices": [choice]}, keep_alive=keep_alive)

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        generation: _Generation,
        opening: str,
        payload: dict[str, Any],
        *,
        keep_alive: bool,
        start: float,
    ) -> None:
        script, stats = self.script, self.stats
        options = payload.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        connection = "" if keep_alive else "connection: close\r\n"
        writer.write(
            (
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n"
                f"transfer-encoding: chunked\r\n{connection}\r\n"
            ).encode()
        )
        n = len(generation.pieces)
        seen: dict[str, Any] = {"key": generation.key, "arrival": start - script.stall_s, "tokens": n}
        stats.streams += 1
        stats.peak_streams = max(stats.peak_streams, stats.streams)
        try:
            for k in range(n):
                await _sleep_until(start + script.ttft_s + k * script.delay_s)
                usage = f",{generation.usage(k + 1, final=False, cached=None)}" if continuous else ""
                event = f'data: {opening},"choices":[{generation.choice(k)}]{usage}}}\n\n'
                now = time.perf_counter()
                seen.setdefault("first", now)
                seen["last"] = now
                writer.write(_chunk(event.encode()))
                stats.tokens += 1
                await writer.drain()
            if script.pause_after_last:
                await _sleep_until(start + script.ttft_s + n * script.delay_s)
            stats.completed += 1  # counted before the last chunk, so a client never sees it late
            writer.write(self._tail(generation, opening, include_usage))
            seen["done"] = True
        except ConnectionError:
            script.disconnected.set()
            raise
        finally:
            stats.streams -= 1
            stats.requests.append(seen)

    def _tail(self, generation: _Generation, opening: str, include_usage: bool) -> bytes:
        """The usage chunk (when asked for), [DONE] and the end of the chunked body."""
        tail = b""
        if include_usage:
            usage = generation.usage(len(generation.pieces), final=True, cached=self.script.cached_tokens)
            metrics = f',"metrics":{json.dumps(REQUEST_METRICS)}' if self.script.request_metrics else ""
            tail += _chunk(f'data: {opening},"choices":[],{usage}{metrics}}}\n\n'.encode())
        return tail + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


async def _sleep_until(moment: float) -> None:
    delay = moment - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise _BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise _BadRequest("body is not a JSON object")
    return payload


async def run_server(script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until cancelled; prints ``READY_LINE`` + the base URL once listening."""
    server = ScriptedServer(script)
    listener = await asyncio.start_server(server.handle, host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    print(f"{READY_LINE}http://{host}:{bound}", flush=True)
    async with listener:
        await listener.serve_forever()


class ThreadedServer:
    """The server on its own event loop in a daemon thread of this process (for tests)."""

    def __init__(self, script: Script, host: str = "127.0.0.1") -> None:
        self.server = ScriptedServer(script)
        self.host = host
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-server", daemon=True)
        self._listener: asyncio.Server | None = None

    def start(self) -> str:
        """Listen on a free port; the base URL."""
        self._thread.start()
        start = asyncio.start_server(self.server.handle, self.host, 0, backlog=4096)
        self._listener = asyncio.run_coroutine_threadsafe(start, self._loop).result(timeout=10)
        self.url = f"http://{self.host}:{self._listener.sockets[0].getsockname()[1]}"
        return self.url

    def stop(self) -> None:
        """Stop listening and drop every connection (a request after this cannot connect).

        Callable from any thread but the server's, an event loop's included.
        """
        if self._listener is None:
            return
        listener, self._listener = self._listener, None

        async def close() -> None:
            listener.close()
            await self.server.close_connections()
            await listener.wait_closed()
            await self._loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@contextlib.contextmanager
def serve(script: Script) -> Iterator[str]:
    """Run the server in a thread of this process while the block runs; yields its base URL."""
    server = ThreadedServer(script)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


def raise_open_file_limit() -> None:
    """Every stream is a socket: lift the soft open-file limit to the hard one (Unix)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        infinite = resource.RLIM_INFINITY
        if soft != infinite and (hard == infinite or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != infinite else max(soft, 65536), hard))
    except (ImportError, ValueError, OSError):
        pass


@contextlib.contextmanager
def spawn(
    *, ttft_ms: float, itl_ms: float, host: str = "127.0.0.1", timeout: float = 15.0, max_streams: int = 0
) -> Iterator[str]:
    """Run ``Script.timed`` in a child process on a free port; yields its base URL once /health answers."""
    command = [
        sys.executable, "-m", "bench.scripted_server",
        "--host", host, "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
        "--max-streams", str(max_streams),
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + timeout
        readable, _, _ = select.select([process.stdout], [], [], timeout)
        line = process.stdout.readline() if readable else ""
        if not line.startswith(READY_LINE):
            raise RuntimeError(f"the scripted server did not start (exit status {process.poll()}): {line!r}")
        url = line[len(READY_LINE) :].strip()
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310 (our own URL)
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the scripted server at {url} did not answer /health") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0: any free port (printed on stdout)")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="request read → first token written")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="gap between tokens")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--text", default="x", help="every token's text")
    parser.add_argument("--max-streams", type=int, default=0, help="at most this many generate at once (0: no cap)")
    args = parser.parse_args(argv)
    if args.ttft_ms < 0 or args.itl_ms < 0:
        parser.error("--ttft-ms and --itl-ms must not be negative")
    raise_open_file_limit()
    script = Script.timed(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000, model=args.model, text=args.text)
    script.max_streams = max(0, args.max_streams)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_server(script, args.host, args.port))


if __name__ == "__main__":
    main()
