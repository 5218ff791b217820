"""A fast scripted OpenAI-compatible streaming server, to measure the client's own overhead.

    python -m bench.scripted_server --port 8100 --ttft-ms 50 --itl-ms 10

Standard library only: raw HTTP/1.1 on asyncio, keep-alive, chunked streams, one
``asyncio.sleep`` per token, so one process holds 1000+ concurrent streams. It runs
as its own process so the measuring client does not share its event loop or CPU
thread. Each ``/v1/completions`` stream sends its first token exactly ``ttft``
after the request arrived and token ``k`` at ``ttft + k * itl`` (an absolute
schedule: a late timer does not push the later tokens back), ``max_tokens``
tokens in all, in vLLM's shape::

    data: {"id": ..., "choices": [{"index": 0, "text": "x", "finish_reason": null, ...}]}
    ...                                   (the last text chunk has finish_reason "length")
    data: {"id": ..., "choices": [], "usage": {"prompt_tokens": P, "completion_tokens": N, ...}}
    data: [DONE]

Usage comes as vLLM sends it: on a final chunk when ``stream_options.include_usage``
is set, and on every chunk as well with ``continuous_usage_stats`` (our client
asks for both). Also ``GET /health``, ``/v1/models``, ``/version`` and
``POST /tokenize`` (count = whitespace-separated words).

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
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parent.parent
READY_LINE = "scripted server listening on "
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
_MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True)
class Script:
    ttft_s: float = 0.05
    itl_s: float = 0.01
    model: str = "scripted"
    default_tokens: int = 16  # when a request has no max_tokens
    text: str = "x"  # every token's text
    max_model_len: int = 131072


@dataclass
class Stats:
    connections: int = 0
    streams: int = 0
    peak_streams: int = 0
    requests: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=200_000))

    def as_dict(self) -> dict[str, Any]:
        return {
            "clock": "time.perf_counter",
            "connections": self.connections,
            "streams": self.streams,
            "peak_streams": self.peak_streams,
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


class ScriptedServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.stats = Stats()
        self._ids = itertools.count(1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests one after another while the client keeps it alive."""
        self.stats.connections += 1
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away
        finally:
            writer.close()

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
        script = self.script
        gets: dict[str, Any] = {
            "/health": {},
            "/version": {"version": "scripted"},
            "/v1/models": {
                "object": "list",
                "data": [
                    {
                        "id": script.model,
                        "object": "model",
                        "owned_by": "scripted",
                        "max_model_len": script.max_model_len,
                    }
                ],
            },
        }
        if path in gets or path == "/stats":
            if method != "GET":
                self._respond(writer, 405, {"error": {"message": f"{method} {path}"}}, keep_alive=keep_alive)
            elif path == "/stats":
                self._respond(writer, 200, self.stats.as_dict(), keep_alive=keep_alive)
                if parse_qs(query).get("reset", ["0"])[0] not in ("", "0"):
                    self.stats.reset()
            else:
                self._respond(writer, 200, gets[path], keep_alive=keep_alive)
            return
        if path not in ("/tokenize", "/v1/completions"):
            self._respond(writer, 404, {"error": {"message": f"no route {path}"}}, keep_alive=keep_alive)
            return
        if method != "POST":
            self._respond(writer, 405, {"error": {"message": f"{method} {path}"}}, keep_alive=keep_alive)
            return
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise _BadRequest(f"body is not JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise _BadRequest("body is not a JSON object")
        if path == "/tokenize":
            if "messages" in payload:
                # As vLLM answers for a model without a chat template.
                raise _BadRequest("the scripted model has no chat template")
            count = len(str(payload.get("prompt", "")).split())
            self._respond(
                writer,
                200,
                {"count": count, "max_model_len": script.max_model_len, "tokens": list(range(count))},
                keep_alive=keep_alive,
            )
            return
        await self._complete(writer, payload, keep_alive=keep_alive, arrival=arrival)

    def _respond(self, writer: asyncio.StreamWriter, status: int, body: Any, *, keep_alive: bool) -> None:
        data = json.dumps(body).encode()
        connection = "" if keep_alive else "connection: close\r\n"
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n{connection}\r\n"
        )
        writer.write(head.encode() + data)

    async def _complete(
        self, writer: asyncio.StreamWriter, payload: dict[str, Any], *, keep_alive: bool, arrival: float
    ) -> None:
        script = self.script
        prompt = payload.get("prompt", "")
        if not isinstance(prompt, str):
            raise _BadRequest("prompt must be a string")
        asked = payload.get("max_tokens")
        try:
            tokens = script.default_tokens if asked is None else int(asked)
        except (TypeError, ValueError) as exc:
            raise _BadRequest("max_tokens must be an integer") from exc
        if tokens < 1:
            raise _BadRequest("max_tokens must be at least 1")
        words = prompt.split()
        prompt_tokens = len(words)
        ident = f"cmpl-scripted-{next(self._ids)}"
        created = int(time.time())
        model = json.dumps(str(payload.get("model") or script.model))
        text = json.dumps(script.text)
        opening = f'{{"id":"{ident}","object":"text_completion","created":{created},"model":{model}'

        def usage(completion: int) -> str:
            total = prompt_tokens + completion
            return (
                f'"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{total},"completion_tokens":{completion}}}'
            )

        if not payload.get("stream"):
            await asyncio.sleep(max(0.0, arrival + script.ttft_s + (tokens - 1) * script.itl_s - time.perf_counter()))
            choice = {"index": 0, "text": script.text * tokens, "logprobs": None, "finish_reason": "length"}
            whole = json.loads(f"{opening},{usage(tokens)}}}") | {"choices": [choice]}
            self._respond(writer, 200, whole, keep_alive=keep_alive)
            return
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
        seen: dict[str, Any] = {"key": words[0] if words else "", "arrival": arrival, "tokens": tokens}
        stats = self.stats
        stats.streams += 1
        stats.peak_streams = max(stats.peak_streams, stats.streams)
        try:
            for k in range(tokens):
                delay = arrival + script.ttft_s + k * script.itl_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                finish = '"length"' if k == tokens - 1 else "null"
                extra = f",{usage(k + 1)}" if continuous else ""
                event = (
                    f'data: {opening},"choices":[{{"index":0,"text":{text},"logprobs":null,'
                    f'"finish_reason":{finish},"stop_reason":null}}]{extra}}}\n\n'
                )
                now = time.perf_counter()
                if k == 0:
                    seen["first"] = now
                seen["last"] = now
                writer.write(_chunk(event.encode()))
                await writer.drain()
            tail = b""
            if include_usage:
                tail += _chunk(f'data: {opening},"choices":[],{usage(tokens)}}}\n\n'.encode())
            writer.write(tail + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            seen["done"] = True
        finally:
            stats.streams -= 1
            stats.requests.append(seen)


async def serve(script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until cancelled; prints ``READY_LINE`` + the base URL once listening."""
    server = ScriptedServer(script)
    listener = await asyncio.start_server(server.handle, host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    print(f"{READY_LINE}http://{host}:{bound}", flush=True)
    async with listener:
        await listener.serve_forever()


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
def spawn(*, ttft_ms: float, itl_ms: float, host: str = "127.0.0.1", timeout: float = 15.0) -> Iterator[str]:
    """Run the server in a child process on a free port; yields its base URL once /health answers."""
    command = [
        sys.executable, "-m", "bench.scripted_server",
        "--host", host, "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
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
    args = parser.parse_args(argv)
    if args.ttft_ms < 0 or args.itl_ms < 0:
        parser.error("--ttft-ms and --itl-ms must not be negative")
    raise_open_file_limit()
    script = Script(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000, model=args.model, text=args.text)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(script, args.host, args.port))


if __name__ == "__main__":
    main()
