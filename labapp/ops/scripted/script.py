"""What the scripted server answers (``Script``), what it saw (``Stats``) and one generation request."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from labapp.ops.scripted.prefix_cache import PrefixCache

# vLLM's per-request metrics (--enable-per-request-metrics), ms, on the final chunk.
REQUEST_METRICS = {"queue_time_ms": 1.5, "time_to_first_token_ms": 20.0, "generation_time_ms": 30.0}


def plain_words(count: int) -> list[str]:
    """``count`` pieces, each a different two-syllable word with no digit: an answer that lasts
    ``count × delay_s``. A counted one (" 조각0 조각1 조각2 …") does not: the chat's repeat guard
    (``rag.answer_guard``, "pattern") cuts it as a base model's counted loop after six pieces."""
    return [f" {chr(0xAC00 + (n * 389 + 17) % 11172)}{chr(0xAC00 + (n * 613 + 1021) % 11172)}" for n in range(count)]


@dataclass
class Script:
    """What the server answers and how fast. Read at every request: a test may change it mid-run."""

    # The answer: these pieces, one token each, whatever max_tokens asks; empty: ``text``
    # repeated max_tokens times (``default_tokens`` when the request names none).
    pieces: list[str] = field(default_factory=lambda: ["프리필은", " 입력을", " 한 번에", " 처리합니다."])
    text: str = "x"
    default_tokens: int = 16
    cut_at_max_tokens: bool = False  # True: at most max_tokens of the pieces, as an engine stops (finish "length")
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
    # Its configuration, as vLLM reports it: /metrics' vllm:cache_config_info gauge, and with
    # ``dev_mode`` (VLLM_SERVER_DEV_MODE=1) /server_info (``bench.provenance`` reads both).
    dtype: str = "torch.float32"
    cache_dtype: str = "auto"
    block_size: int = 128
    prefix_caching: bool = True
    chunked_prefill: bool = True
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    cpu_name: str = "Scripted CPU @ 2.00GHz"
    dev_mode: bool = True
    tokenizer: Literal["bytes", "words"] = "bytes"  # a token per 3 bytes (+1), or per word
    chat_template: bool = False
    cached_tokens: int | None = 16  # prompt tokens reported as served from the prefix cache
    # A simulated prefix cache (None: ``cached_tokens`` every time): cached tokens are the prompt's longest
    # block-aligned prefix served before, the TTFT grows with the rest, POST /reset_prefix_cache empties it.
    prefix_cache: PrefixCache | None = None
    request_metrics: bool = True  # REQUEST_METRICS on the final chunk
    metrics: bool = True  # serve /metrics
    # Failures: a generation request is answered with this status and message.
    status: int = 200
    error_message: str = ""
    # What it received: every generation request's body, and its X-Session-ID ("" without one: a
    # router's consistent_hash reads it); set when a client left mid-stream.
    requests: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
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


def chunk(data: bytes) -> bytes:
    """One piece of a ``transfer-encoding: chunked`` body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class BadRequest(Exception):
    pass


@dataclass(frozen=True)
class Generation:
    """One generation request as the script answers it."""

    chat: bool
    prompt_tokens: int
    key: str  # the prompt's first word, to match the request in /stats
    pieces: list[str]
    finish: str  # "length": the answer used all of max_tokens; else "stop"
    ttft_s: float = 0.0  # request read (or slot taken) → first token
    cached: int | None = None  # prompt tokens served from the prefix cache, as the usage reports them

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


def json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise BadRequest("body is not a JSON object")
    return payload
