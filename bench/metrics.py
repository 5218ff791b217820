"""The measurement contract (shared/METRICS.md), per request, as pure code.

Every number the lab shows is derived here from timestamps and the server's
``usage``; nothing in this module does I/O or reads a clock, so the timing math
is tested with scripted streams.  Times are seconds from ``time.perf_counter()``.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestRecord:
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

    # --- derived, per METRICS.md -------------------------------------------------
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


# --- per run (aggregates), METRICS.md "Per run" ----------------------------------------

DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True)
class SLO:
    """Service-level objectives in milliseconds; None = not part of goodput."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def met_by(self, record: RequestRecord) -> bool:
        checks = (
            (self.ttft_ms, record.ttft),
            # A single-token answer has no TPOT; it counts as 0 for goodput, as in vllm bench serve.
            (self.tpot_ms, record.tpot if record.tpot is not None else 0.0),
            (self.e2el_ms, record.e2el),
        )
        return all(limit is None or (value is not None and value * 1000 <= limit) for limit, value in checks)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _stats_ms(name: str, seconds: list[float], percentiles: tuple[float, ...]) -> dict[str, float]:
    """mean, median, std (population, as numpy) and percentiles in ms; zeros when empty."""
    values = [v * 1000 for v in seconds]
    mean = sum(values) / len(values) if values else 0.0
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 if values else 0.0
    stats = {f"mean_{name}_ms": mean, f"median_{name}_ms": percentile(values, 50), f"std_{name}_ms": std}
    for q in percentiles:
        stats[f"p{q:g}_{name}_ms"] = percentile(values, q)
    return stats


def summarize(
    records: list[RequestRecord],
    *,
    duration: float,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    slo: SLO | None = None,
    max_concurrent_requests: int | None = None,
) -> dict[str, Any]:
    """The run's aggregates over its successful requests (METRICS.md), keyed like vllm bench serve."""
    ok = [r for r in records if r.success]
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    output = sum(r.output_tokens or 0 for r in ok)
    per_second = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    good = sum(1 for r in ok if (slo or SLO()).met_by(r))
    summary: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": prompt,
        "total_output_tokens": output,
        "request_throughput": per_second(len(ok)),
        "request_goodput": per_second(good) if slo is not None else None,
        "output_throughput": per_second(output),
        "total_token_throughput": per_second(prompt + output),
        "max_concurrent_requests": max_concurrent_requests,
    }
    summary |= _stats_ms("ttft", [r.ttft for r in ok if r.ttft is not None], percentiles)
    summary |= _stats_ms("tpot", [r.tpot for r in ok if r.tpot is not None], percentiles)
    summary |= _stats_ms("itl", [gap for r in ok for gap in r.itl], percentiles)
    summary |= _stats_ms("e2el", [r.e2el for r in ok if r.e2el is not None], percentiles)
    queue = [q for r in records if (q := r.client_queue_time) is not None]
    summary |= _stats_ms("client_queue", queue, percentiles)
    return summary
