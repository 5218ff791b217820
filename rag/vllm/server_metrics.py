"""vLLM's Prometheus ``/metrics``: snapshots, deltas over a job cell, peaks and a timeline while it runs.

Parsed with ``prometheus_client``'s text parser (the format's own project); series of
one name are summed over their labels (model, engine index). Histograms give
``_sum``/``_count``, counters ``_total`` (docs/metrics.md, "The engine's own counters").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

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

# The engine timeline: one column per series, one row per sample (docs/metrics.md, "Engine timeline").
# Gauges are as sampled; counters are cumulative since the engine started (the chart takes differences).
TIMELINE_SERIES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "iteration_tokens_sum": "vllm:iteration_tokens_total_sum",
    "iteration_tokens_count": "vllm:iteration_tokens_total_count",
}
SAMPLE_EVERY_S = 0.2  # AIPerf scrapes every 100 ms; 200 ms keeps the scrape off two busy cores


WANTED = frozenset(
    {f"{name}_{part}" for name in HISTOGRAMS for part in ("sum", "count")}
    | {f"{name}_total" for name in COUNTERS}
    | set(GAUGES)
    | set(TIMELINE_SERIES.values())
)


def _sample_name(line: str) -> str:
    return line.split("{", 1)[0].split(" ", 1)[0]


def parse(text: str, names: frozenset[str] = WANTED) -> dict[str, float]:
    """The samples of ``names`` summed by name (labels dropped).

    Only those lines go to the parser: vLLM's page is ~650 lines, most of them histogram
    buckets, and ``prometheus_client``'s parser took ~80 ms over all of them on two busy cores
    (a regex ~3 ms), inside the event loop that is timing the streams. Filtered first, it
    parses the two dozen lines the lab reads in about a millisecond.
    """
    kept = "\n".join(line for line in text.splitlines() if line[:1] != "#" and _sample_name(line) in names)
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(kept + "\n" if kept else ""):
        for sample in family.samples:
            if sample.name in names:
                values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
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
    timeline: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in ("t", *TIMELINE_SERIES)})

    def note(self, values: dict[str, float], at: float) -> dict[str, float]:
        """One sample taken at ``at`` (``time.perf_counter()``, the clock of the request records)."""
        self.running = max(self.running, values.get("vllm:num_requests_running", 0.0))
        self.waiting = max(self.waiting, values.get("vllm:num_requests_waiting", 0.0))
        self.kv_cache_usage = max(self.kv_cache_usage, values.get("vllm:kv_cache_usage_perc", 0.0))
        busy = values.get("vllm:num_requests_running", 0.0) + values.get("vllm:num_requests_waiting", 0.0)
        self.busy = max(self.busy, busy)
        self.samples += 1
        self.timeline["t"].append(round(at, 4))
        for key, name in TIMELINE_SERIES.items():
            self.timeline[key].append(round(values.get(name, 0.0), 4))
        return values


async def _sample(client: httpx.AsyncClient, peaks: Peaks) -> dict[str, float]:
    values = await snapshot(client)
    return peaks.note(values, time.perf_counter())


@contextlib.asynccontextmanager
async def watched(client: httpx.AsyncClient, every_s: float = SAMPLE_EVERY_S) -> AsyncIterator[dict[str, Any]]:
    """Around a block: the /metrics delta, the peaks of running/waiting requests and the timeline.

    ``peak_busy`` is the most requests (running + waiting) the engine held in any one
    sample: above what the block itself had in flight, other traffic shared the engine.
    ``timeline`` holds every sample (``TIMELINE_SERIES``; ``t`` on the records' clock).

    Yields a dict that is filled in when the block ends; a server without
    /metrics gives ``{"error": ...}`` instead and the block runs anyway.
    """
    report: dict[str, Any] = {}
    peaks = Peaks()

    async def sample() -> None:
        while True:
            try:
                await _sample(client, peaks)
            except (httpx.HTTPError, ValueError) as exc:
                peaks.errors.append(str(exc))
            await asyncio.sleep(every_s)

    try:
        before = await _sample(client, peaks)
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
            report |= delta(before, await _sample(client, peaks))
        except (httpx.HTTPError, ValueError) as exc:
            report["error"] = f"/metrics unavailable: {exc}"
        report |= {
            "peak_running": peaks.running,
            "peak_waiting": peaks.waiting,
            "peak_kv_cache_usage": peaks.kv_cache_usage,
            "peak_busy": peaks.busy,
            "samples": peaks.samples,
            "sample_errors": len(peaks.errors),
            "preemptions": peaks.timeline["preemptions"][-1] - peaks.timeline["preemptions"][0],
            "timeline": peaks.timeline,
        }


def joined(timelines: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Several timelines as one, in time order (a cell measured in several blocks)."""
    keys = ["t", *TIMELINE_SERIES]
    columns = [list(itertools.chain.from_iterable(t.get(k, []) for t in timelines)) for k in keys]
    rows = sorted(zip(*columns, strict=True))
    return {k: [row[i] for row in rows] for i, k in enumerate(keys)}


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
    preempted = [r["preemptions"] for r in reports if r.get("preemptions") is not None]
    out["preemptions"] = sum(preempted) if preempted else None
    timelines = [r["timeline"] for r in reports if r.get("timeline")]
    if timelines:
        out["timeline"] = joined(timelines)
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
