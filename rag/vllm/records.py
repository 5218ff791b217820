"""One request as measured (docs/metrics.md, "Per request"), as pure code.

Every per-request number the lab shows is derived here from timestamps and the
server's ``usage``; nothing in this module does I/O or reads a clock, so the timing
math is tested with scripted streams.  Times are seconds from ``time.perf_counter()``.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass
class RequestRecord:
    # What the engine says of a request (its text, usage and per-request metrics), as opposed to the
    # client's clock: kept when a stored request is read back, compared when a proxy passes it through.
    FROM_THE_ENGINE: ClassVar[tuple[str, ...]] = (
        "generated_text",
        "prompt_tokens",
        "output_tokens",
        "cached_tokens",
        "queue_time_server",
        "prefill_time_server",
        "decode_time_server",
        "finish_reason",
    )

    t_send: float = 0.0
    first_chunk_at: float | None = None  # first chunk with non-empty choices (vllm bench serve's TTFT)
    text_chunk_at: list[float] = field(default_factory=list)  # every text-carrying chunk
    generated_text: str = ""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    queue_time_server: float | None = None
    prefill_time_server: float | None = None
    decode_time_server: float | None = None
    finish_reason: str | None = None
    success: bool = False
    error: str | None = None
    t_scheduled: float | None = None  # load generator: when the request was due to be sent
    t_end: float | None = None  # when the request finished, successfully or not

    # --- derived, per docs/metrics.md ("Per request") ------------------------------------
    @property
    def ttft(self) -> float | None:
        return self.text_chunk_at[0] - self.t_send if self.text_chunk_at else None

    @property
    def first_chunk(self) -> float | None:
        return self.first_chunk_at - self.t_send if self.first_chunk_at is not None else None

    @property
    def itl(self) -> list[float]:
        times = self.text_chunk_at
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    @property
    def e2el(self) -> float | None:
        return self.text_chunk_at[-1] - self.t_send if self.text_chunk_at else None

    @property
    def decode_time(self) -> float | None:
        if self.e2el is None or self.ttft is None:
            return None
        return self.e2el - self.ttft

    @property
    def tpot(self) -> float | None:
        if self.decode_time is None or not self.output_tokens or self.output_tokens <= 1:
            return None
        return self.decode_time / (self.output_tokens - 1)

    @property
    def client_queue_time(self) -> float | None:
        """Scheduled arrival → actual send: time the load generator itself kept it waiting."""
        return None if self.t_scheduled is None else max(0.0, self.t_send - self.t_scheduled)

    @property
    def prefill_time_source(self) -> str:
        return "server" if self.prefill_time_server is not None else "client_ttft"

    @property
    def prefill_time(self) -> float | None:
        return self.prefill_time_server if self.prefill_time_server is not None else self.ttft

    @property
    def prefill_speed(self) -> float | None:
        if not self.prompt_tokens or not self.prefill_time:
            return None
        return self.prompt_tokens / self.prefill_time

    @property
    def decode_speed(self) -> float | None:
        if not self.decode_time or not self.output_tokens or self.output_tokens <= 1:
            return None
        return (self.output_tokens - 1) / self.decode_time

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in (
            "ttft",
            "first_chunk",
            "itl",
            "e2el",
            "decode_time",
            "tpot",
            "prefill_time",
            "prefill_time_source",
            "prefill_speed",
            "decode_speed",
            "client_queue_time",
        ):
            data[name] = getattr(self, name)
        return data


def _choice_text(choice: dict[str, Any]) -> str:
    """Text of one streamed choice: completions' ``text`` or chat's delta content/reasoning."""
    if isinstance(choice.get("text"), str):
        return str(choice["text"])
    delta = choice.get("delta") or {}
    return "".join(str(delta.get(key) or "") for key in ("content", "reasoning_content", "reasoning"))


def apply_chunk(record: RequestRecord, chunk: dict[str, Any], now: float) -> str:
    """Fold one parsed SSE chunk, received at ``now``, into ``record``; return its text."""
    choices = chunk.get("choices") or []
    text = ""
    if choices:
        if record.first_chunk_at is None:
            record.first_chunk_at = now
        for choice in choices:
            text += _choice_text(choice)
            if choice.get("finish_reason"):
                record.finish_reason = str(choice["finish_reason"])
        if text:
            record.text_chunk_at.append(now)
            record.generated_text += text
    usage = chunk.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
        record.output_tokens = usage.get("completion_tokens", record.output_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            record.cached_tokens = int(details["cached_tokens"])
    server = chunk.get("metrics")
    if server:
        # vLLM's --enable-per-request-metrics: ms, on the final usage chunk.
        def seconds(key: str) -> float | None:
            value = server.get(key)
            return None if value is None else float(value) / 1000.0

        record.queue_time_server = seconds("queue_time_ms")
        record.prefill_time_server = seconds("time_to_first_token_ms")
        record.decode_time_server = seconds("generation_time_ms")
    return text
