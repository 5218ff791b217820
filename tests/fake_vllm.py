"""A scripted OpenAI-compatible server on a loopback port, for fast tests of the chat logic.

It speaks just enough of vLLM's API (health, models, version, tokenize, streamed
completions with usage and per-request metrics) and can be told to stall, to
answer 400, or to stream slowly so a test can stop an answer half-way. The real
engine is exercised by the integration tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    pieces: list[str] = field(default_factory=lambda: ["프리필은", " 입력을", " 한 번에", " 처리합니다."])
    delay_s: float = 0.01
    status: int = 200
    error_message: str = ""
    stall_s: float = 0.0  # sleep before answering the completion at all
    max_model_len: int = 8192
    chat_template: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)
    running: int = 0
    completed: int = 0
    metrics: bool = True


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {})
            elif self.path == "/v1/models":
                self._json(200, {"data": [{"id": "fake-model", "max_model_len": script.max_model_len}]})
            elif self.path == "/version":
                self._json(200, {"version": "fake"})
            elif self.path == "/metrics" and script.metrics:
                n, labels = script.completed, '{model_name="fake-model",engine="0"}'
                text = "".join(
                    f"{name}{labels} {value}\n"
                    for name, value in [
                        ("vllm:num_requests_running", script.running),
                        ("vllm:num_requests_waiting", 0),
                        ("vllm:time_to_first_token_seconds_sum", 0.02 * n),
                        ("vllm:time_to_first_token_seconds_count", n),
                        ("vllm:request_queue_time_seconds_sum", 0.0015 * n),
                        ("vllm:request_queue_time_seconds_count", n),
                        ("vllm:prefix_cache_queries_total", 100 * n),
                        ("vllm:prefix_cache_hits_total", 16 * n),
                    ]
                )
                data = ("# HELP vllm:num_requests_running running\n" + text).encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path not in ("/tokenize", "/v1/completions", "/v1/chat/completions"):
                self._json(404, {"detail": "Not Found"})  # e.g. /reset_prefix_cache outside vLLM's dev mode
                return
            body = json.loads(raw)
            if self.path == "/tokenize":
                if "messages" in body:
                    if script.chat_template:
                        self._json(200, {"count": 5, "tokens": []})
                    else:
                        self._json(400, {"error": {"message": "no chat template"}})
                    return
                count = len(body["prompt"].encode()) // 3 + 1  # roughly, for the fake
                self._json(200, {"count": count, "tokens": []})
                return
            script.requests.append(body)
            if script.stall_s:
                time.sleep(script.stall_s)
            if script.status != 200:
                self._json(script.status, {"error": {"message": script.error_message, "code": script.status}})
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            prompt = body.get("prompt") or json.dumps(body.get("messages"))
            prompt_tokens = len(prompt.encode()) // 3 + 1
            script.running += 1
            try:
                for n, piece in enumerate(script.pieces, start=1):
                    chunk = {
                        "choices": [{"index": 0, "text": piece, "finish_reason": None}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n},
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(script.delay_s)
                final = {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": len(script.pieces),
                        "prompt_tokens_details": {"cached_tokens": 16},
                    },
                    "metrics": {"queue_time_ms": 1.5, "time_to_first_token_ms": 20.0, "generation_time_ms": 30.0},
                }
                script.completed += 1  # counted before the last chunk, so a client never sees it late
                self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                script.disconnected.set()
            finally:
                script.running -= 1

    return Handler


@contextmanager
def serve(script: Script) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
