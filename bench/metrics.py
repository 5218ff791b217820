"""Run aggregates of the measurement contract (docs/metrics.md, "Per run (aggregates)"), as pure code.

Per-request records and chunk folding are ``rag.vllm.records`` (the vLLM boundary);
this module summarises a list of them: throughput, goodput, percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rag.vllm.records import RequestRecord

# --- per run (aggregates), docs/metrics.md ---------------------------------------------

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


def per_second_peaks(records: list[RequestRecord]) -> tuple[float, int]:
    """vllm bench serve's ``max_output_tokens_per_s`` and ``max_concurrent_requests``.

    Computed from the successful records the way its ``calculate_metrics`` does: one-second
    buckets from the earliest send; every text chunk counts one token in the bucket it
    arrived in; a request counts once in every bucket from its send's to its end's. So the
    second figure is "requests active during the busiest second", not the most in flight at
    one instant (that is ``peak_in_flight``, which the runner observes).
    """
    ok = [r for r in records if r.success and r.text_chunk_at]
    if not ok:
        return 0.0, 0
    first = min(r.t_send for r in ok)

    def end(record: RequestRecord) -> float:
        return record.t_end if record.t_end is not None else record.text_chunk_at[-1]

    buckets = math.ceil(max(end(r) for r in ok) - first) + 1
    tokens = [0] * buckets
    active = [0] * buckets
    for record in ok:
        for at in record.text_chunk_at:
            second = int(at - first)
            if 0 <= second < buckets:
                tokens[second] += 1
        for second in range(int(record.t_send - first), min(int(end(record) - first), buckets - 1) + 1):
            active[second] += 1
    return float(max(tokens)), max(active)


def summarize(
    records: list[RequestRecord],
    *,
    duration: float,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    slo: SLO | None = None,
    peak_in_flight: int | None = None,
) -> dict[str, Any]:
    """The run's aggregates over its successful requests (docs/metrics.md), keyed like vllm bench serve.

    ``peak_in_flight`` is what the runner saw at once (None where nobody counted).
    """
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
        "peak_in_flight": peak_in_flight,
    }
    summary["max_output_tokens_per_s"], summary["max_concurrent_requests"] = per_second_peaks(records)
    summary |= _stats_ms("ttft", [r.ttft for r in ok if r.ttft is not None], percentiles)
    summary |= _stats_ms("tpot", [r.tpot for r in ok if r.tpot is not None], percentiles)
    summary |= _stats_ms("itl", [gap for r in ok for gap in r.itl], percentiles)
    summary |= _stats_ms("e2el", [r.e2el for r in ok if r.e2el is not None], percentiles)
    queue = [q for r in records if (q := r.client_queue_time) is not None]
    summary |= _stats_ms("client_queue", queue, percentiles)
    return summary
