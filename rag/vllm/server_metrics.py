"""vLLM's Prometheus ``/metrics``: snapshots, deltas over a job cell, peaks while it runs.

Parsed by hand (the text format is simple); series of one name are summed over
their labels (model, engine index). Histograms give ``_sum``/``_count``, counters
``_total`` (METRICS.md, "Server-side counters").
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)
COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)$")


def parse(text: str) -> dict[str, float]:
    """Every sample summed by metric name (labels dropped)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            name, value = match.group(1), float(match.group(3))
            values[name] = values.get(name, 0.0) + value
    return values


async def snapshot(client: httpx.AsyncClient) -> dict[str, float]:
    response = await client.get("/metrics")
    response.raise_for_status()
    return parse(response.text)


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """What happened between two snapshots: mean times per histogram, cache hit rate."""
    out: dict[str, Any] = {}
    for name in HISTOGRAMS:
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        short = name.removeprefix("vllm:").removesuffix("_seconds")
        out[f"{short}_count"] = count
        out[f"{short}_mean_ms"] = 1000 * total / count if count else None
    queries, hits = (after.get(f"{name}_total", 0.0) - before.get(f"{name}_total", 0.0) for name in COUNTERS)
    out["prefix_cache_queries"] = queries
    out["prefix_cache_hits"] = hits
    out["prefix_cache_hit_rate"] = hits / queries if queries else None
    return out


@dataclass
class Peaks:
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    busy: float = 0.0  # running + waiting in one sample: every request the engine held at that moment
    samples: int = 0
    errors: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def watched(client: httpx.AsyncClient, every_s: float = 0.25) -> AsyncIterator[dict[str, Any]]:
    """Around a block: the /metrics delta and the peaks of running/waiting requests.

    ``peak_busy`` is the most requests (running + waiting) the engine held in any one
    sample: above what the block itself had in flight, other traffic shared the engine.

    Yields a dict that is filled in when the block ends; a server without
    /metrics gives ``{"error": ...}`` instead and the block runs anyway.
    """
    report: dict[str, Any] = {}
    peaks = Peaks()

    def note(values: dict[str, float]) -> dict[str, float]:
        peaks.running = max(peaks.running, values.get("vllm:num_requests_running", 0.0))
        peaks.waiting = max(peaks.waiting, values.get("vllm:num_requests_waiting", 0.0))
        peaks.kv_cache_usage = max(peaks.kv_cache_usage, values.get("vllm:kv_cache_usage_perc", 0.0))
        busy = values.get("vllm:num_requests_running", 0.0) + values.get("vllm:num_requests_waiting", 0.0)
        peaks.busy = max(peaks.busy, busy)
        peaks.samples += 1
        return values

    async def sample() -> None:
        while True:
            try:
                note(await snapshot(client))
            except (httpx.HTTPError, ValueError) as exc:
                peaks.errors.append(str(exc))
            await asyncio.sleep(every_s)

    try:
        before = note(await snapshot(client))
    except (httpx.HTTPError, ValueError) as exc:
        report["error"] = f"/metrics unavailable: {exc}"
        yield report
        return
    sampler = asyncio.create_task(sample())
    try:
        yield report
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        try:
            report |= delta(before, note(await snapshot(client)))
        except (httpx.HTTPError, ValueError) as exc:
            report["error"] = f"/metrics unavailable: {exc}"
        report |= {
            "peak_running": peaks.running,
            "peak_waiting": peaks.waiting,
            "peak_kv_cache_usage": peaks.kv_cache_usage,
            "peak_busy": peaks.busy,
            "samples": peaks.samples,
            "sample_errors": len(peaks.errors),
        }


def merged(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several ``watched`` reports as one: counts and cache counters summed, peaks the highest."""
    out: dict[str, Any] = {}
    for key in ("prefix_cache_queries", "prefix_cache_hits", "samples", "sample_errors"):
        values = [r[key] for r in reports if r.get(key) is not None]
        out[key] = sum(values) if values else None
    for key in ("peak_running", "peak_waiting", "peak_kv_cache_usage", "peak_busy"):
        values = [r[key] for r in reports if r.get(key) is not None]
        out[key] = max(values) if values else None
    queries, hits = out["prefix_cache_queries"], out["prefix_cache_hits"]
    out["prefix_cache_hit_rate"] = hits / queries if queries else None
    errors = sorted({r["error"] for r in reports if r.get("error")})
    if errors:
        out["error"] = "; ".join(errors)
    return out


def extra_requests(report: dict[str, Any] | None, own: float) -> float | None:
    """The most requests the engine held beyond ``own`` (the block's own in flight) while a
    ``watched`` block ran; None when /metrics could not be sampled (no ``peak_busy``)."""
    found = report or {}
    if found.get("peak_busy") is None or not found.get("samples"):
        return None
    return max(0.0, float(found["peak_busy"]) - own)
