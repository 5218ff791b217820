"""What each benchmark job measures (async, no database): today the speed probe of Lab 1.

A job reports progress after every request through ``progress``; when that
returns False the job stops and returns what it measured so far.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench import runner, server_metrics
from bench.estimator import gen_seconds
from bench.metrics import SLO, RequestRecord, summarize
from bench.workloads import synthetic_prompts

Progress = Callable[[int, int, str], Awaitable[bool]]  # done, total, current cell -> keep going?

# The chapter's estimator table, then an unseen shape to check the estimate against.
SPEED_SHAPES: tuple[tuple[int, int], ...] = ((100, 50), (1500, 50), (100, 500))
CHECK_SHAPE = (800, 100)


@dataclass(frozen=True)
class SpeedConfig:
    repeats: int = 2
    shapes: tuple[tuple[int, int], ...] = SPEED_SHAPES
    check: tuple[int, int] = CHECK_SHAPE
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.repeats * (len(self.shapes) + 1)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cell_summary(input_tokens: int, output_tokens: int, records: list[RequestRecord]) -> dict[str, Any]:
    """One cell's medians, speeds per METRICS.md, and its requests (CSV-ready rows)."""
    ok = [r for r in records if r.success]
    duration = sum((r.e2el or 0) for r in ok)
    summary = summarize(records, duration=duration)
    prefill = [r.prefill_speed for r in ok if r.prefill_speed]
    decode = [r.decode_speed for r in ok if r.decode_speed]
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "completed": summary["completed"],
        "failed": summary["failed"],
        "errors": [r.error for r in records if r.error],
        "median_ttft_ms": summary["median_ttft_ms"],
        "median_tpot_ms": summary["median_tpot_ms"],
        "median_e2el_ms": summary["median_e2el_ms"],
        "median_decode_ms": _median([(r.decode_time or 0) * 1000 for r in ok]),
        "median_prompt_tokens": _median([float(r.prompt_tokens or 0) for r in ok]),
        "median_cached_tokens": _median([float(r.cached_tokens or 0) for r in ok]),
        "median_server_prefill_ms": _median([r.prefill_time_server * 1000 for r in ok if r.prefill_time_server]),
        "median_server_queue_ms": _median([r.queue_time_server * 1000 for r in ok if r.queue_time_server is not None]),
        "prefill_speed": _median(prefill),
        "decode_speed": _median(decode),
        "requests": [r.as_dict() | {"itl": None, "text_chunk_at": None} for r in records],
    }


@dataclass
class SpeedResult:
    cells: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False

    def as_dict(self) -> dict[str, Any]:
        cells = [c for c in self.cells if c["completed"]]
        long_input = max(cells, key=lambda c: c["input_tokens"] / c["output_tokens"], default=None)
        long_output = max(cells, key=lambda c: c["output_tokens"] / c["input_tokens"], default=None)
        prefill_speed = long_input["prefill_speed"] if long_input else None
        decode_speed = long_output["decode_speed"] if long_output else None
        check = None
        checked = [c for c in cells if c.get("check")]
        if checked and prefill_speed and decode_speed:
            cell = checked[0]
            prefill_s, decode_s = gen_seconds(cell["input_tokens"], cell["output_tokens"], prefill_speed, decode_speed)
            measured = (cell["median_e2el_ms"] or 0) / 1000
            check = {
                "input_tokens": cell["input_tokens"],
                "output_tokens": cell["output_tokens"],
                "estimate_s": round(prefill_s + decode_s, 3),
                "measured_s": round(measured, 3),
                "error_pct": round(100 * abs(prefill_s + decode_s - measured) / measured, 1) if measured else None,
            }
        return {
            "cells": self.cells,
            "prefill_speed": prefill_speed,
            "decode_speed": decode_speed,
            "check": check,
            "cancelled": self.cancelled,
        }


@dataclass(frozen=True)
class Cell:
    input_tokens: int
    output_tokens: int
    tags: tuple[tuple[str, Any], ...] = ()  # e.g. (("check", True),) or (("sweep", "input"),)

    @property
    def label(self) -> str:
        extra = "".join(f" ({value if isinstance(value, str) else key})" for key, value in self.tags if value)
        return f"{self.input_tokens} in / {self.output_tokens} out{extra}"


async def _warm_up(*, base_url: str, model: str, seed: int) -> None:
    """One short request, not measured: the first request after a quiet engine is slow."""
    warm = runner.RequestSpec(prompt=f"warm-up {seed}", max_tokens=4)
    await runner.run([], base_url=base_url, model=model, shape=runner.LoadShape(concurrency=1), warmup=[warm])


async def measure_cells(
    cells: list[Cell], *, repeats: int, seed: int, base_url: str, model: str, progress: Progress
) -> SpeedResult:
    """Each cell ``repeats`` times, one request at a time, token-exact prompts with unique openings."""
    result = SpeedResult()
    total = repeats * len(cells)
    done = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        await _warm_up(base_url=base_url, model=model, seed=seed)
        for number, cell in enumerate(cells):
            if not await progress(done, total, cell.label):
                result.cancelled = True
                return result
            prompts = await synthetic_prompts(
                repeats, cell.input_tokens, seed=seed * 100 + number, model=model, client=http
            )
            records: list[RequestRecord] = []
            async with server_metrics.watched(http) as server:
                for prompt in prompts:
                    spec = runner.RequestSpec(prompt=prompt, max_tokens=cell.output_tokens)
                    shape = runner.LoadShape(concurrency=1)
                    run = await runner.run([spec], base_url=base_url, model=model, shape=shape)
                    records += run.records
                    done += 1
                    if not await progress(done, total, cell.label):
                        result.cancelled = True
                        break
            summary = cell_summary(cell.input_tokens, cell.output_tokens, records)
            result.cells.append(summary | dict(cell.tags) | {"server": server})
            if result.cancelled:
                return result
    return result


async def speed_probe(config: SpeedConfig, *, base_url: str, model: str, progress: Progress) -> SpeedResult:
    """Lab 1: the estimator table's shapes, then the unseen check shape."""
    cells = [Cell(i, o, (("check", False),)) for i, o in config.shapes] + [Cell(*config.check, (("check", True),))]
    return await measure_cells(
        cells, repeats=config.repeats, seed=config.seed, base_url=base_url, model=model, progress=progress
    )


# --- Lab 2: length sweeps ---------------------------------------------------------------


@dataclass(frozen=True)
class SweepConfig:
    repeats: int = 1
    input_lengths: tuple[int, ...] = (100, 400, 800, 1600)
    fixed_output: int = 16
    output_lengths: tuple[int, ...] = (16, 64, 128, 256)
    fixed_input: int = 100
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.repeats * (len(self.input_lengths) + len(self.output_lengths))


def line_fit(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least-squares line y = slope·x + intercept and its r²; None with fewer than two x values."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for y in ys)
    residual = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    return {"slope": slope, "intercept": intercept, "r2": 1.0 - residual / total if total else 1.0}


def sweep_fits(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """TTFT against input length (slope = 1/prefill speed) and decode time against output length (slope = TPOT)."""
    inputs = [c for c in cells if c.get("sweep") == "input" and c["completed"]]
    outputs = [c for c in cells if c.get("sweep") == "output" and c["completed"]]
    ttft = line_fit([c["input_tokens"] for c in inputs], [c["median_ttft_ms"] for c in inputs])
    decode = line_fit([c["output_tokens"] - 1 for c in outputs], [c["median_decode_ms"] or 0 for c in outputs])
    return {
        "ttft_vs_input": ttft,
        "decode_vs_output": decode,
        "prefill_speed": 1000 / ttft["slope"] if ttft and ttft["slope"] > 0 else None,
        "tpot_ms": decode["slope"] if decode else None,
        # Short contexts: decode per token hardly changes with the input length.
        "tpot_by_input": {str(c["input_tokens"]): c["median_tpot_ms"] for c in inputs},
    }


async def length_sweep(config: SweepConfig, *, base_url: str, model: str, progress: Progress) -> SpeedResult:
    cells = [Cell(i, config.fixed_output, (("sweep", "input"),)) for i in config.input_lengths]
    cells += [Cell(config.fixed_input, o, (("sweep", "output"),)) for o in config.output_lengths]
    return await measure_cells(
        cells, repeats=config.repeats, seed=config.seed, base_url=base_url, model=model, progress=progress
    )


CSV_COLUMNS = ["cell", "input_tokens", "output_tokens", "success", "error", "prompt_tokens", "output_tokens_got",
               "cached_tokens", "ttft_ms", "first_chunk_ms", "e2el_ms", "decode_time_ms", "tpot_ms",
               "server_queue_ms", "server_prefill_ms", "server_decode_ms"]  # fmt: skip
MS_FIELDS = {
    "ttft_ms": "ttft",
    "first_chunk_ms": "first_chunk",
    "e2el_ms": "e2el",
    "decode_time_ms": "decode_time",
    "tpot_ms": "tpot",
    "server_queue_ms": "queue_time_server",
    "server_prefill_ms": "prefill_time_server",
    "server_decode_ms": "decode_time_server",
}


def csv_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per request of a job's results, times in ms (the page's and the command's CSV)."""
    rows = []
    for cell in results.get("cells", []):
        shape = {key: cell[key] for key in ("input_tokens", "output_tokens")}
        name = "{input_tokens}/{output_tokens}".format(**shape)
        if "concurrency" in cell:
            name += f" @{cell['concurrency']}"
        for r in cell["requests"]:
            row = {"cell": name, **shape}
            row |= {key: r[key] for key in ("success", "prompt_tokens", "cached_tokens")}
            row |= {"error": r["error"] or "", "output_tokens_got": r["output_tokens"]}
            row |= {col: None if r[key] is None else round(r[key] * 1000, 3) for col, key in MS_FIELDS.items()}
            rows.append(row)
    return rows


# --- Lab 3: serving under load ----------------------------------------------------------


@dataclass(frozen=True)
class LoadConfig:
    repeats: int = 1  # requests per level = repeats × 8
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    input_tokens: int = 256
    output_tokens: int = 32
    slo_ttft_ms: float = 3000.0
    slo_tpot_ms: float = 200.0
    seed: int = 0
    meets_share: float = 0.9  # a level "meets the SLO" when this share of its requests do

    @property
    def per_level(self) -> int:
        return 8 * self.repeats

    @property
    def total_requests(self) -> int:
        return self.per_level * len(self.concurrencies)


async def load_sweep(config: LoadConfig, *, base_url: str, model: str, progress: Progress) -> SpeedResult:
    """Each concurrency level in turn with fresh prompts; a cancel takes effect between levels."""
    result = SpeedResult()
    slo = SLO(ttft_ms=config.slo_ttft_ms, tpot_ms=config.slo_tpot_ms)
    done = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        await _warm_up(base_url=base_url, model=model, seed=config.seed)
        for number, concurrency in enumerate(config.concurrencies):
            label = f"concurrency {concurrency}"
            if not await progress(done, config.total_requests, label):
                result.cancelled = True
                return result
            prompts = await synthetic_prompts(
                config.per_level, config.input_tokens, seed=config.seed * 100 + number, model=model, client=http
            )
            specs = [runner.RequestSpec(prompt=p, max_tokens=config.output_tokens) for p in prompts]
            base_done = done

            async def on_done(
                finished: int, total: int, record: RequestRecord, base_done: int = base_done, label: str = label
            ) -> None:
                await progress(base_done + finished, config.total_requests, label)

            async with server_metrics.watched(http) as server:
                run = await runner.run(
                    specs,
                    base_url=base_url,
                    model=model,
                    shape=runner.LoadShape(concurrency=concurrency),
                    on_done=on_done,
                )
            done += len(specs)
            summary = summarize(run.records, duration=run.duration, slo=slo, max_concurrent_requests=run.max_concurrent)
            level = {key: summary[key] for key in LEVEL_KEYS} | {
                "concurrency": concurrency,
                "input_tokens": config.input_tokens,
                "output_tokens": config.output_tokens,
                "errors": [r.error for r in run.records if r.error],
                "server": server,
                "requests": [r.as_dict() | {"itl": None, "text_chunk_at": None} for r in run.records],
            }
            level["meets_slo"] = bool(
                summary["request_throughput"]
                and summary["request_goodput"] >= config.meets_share * summary["request_throughput"]
            )
            result.cells.append(level)
    return result


LEVEL_KEYS = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_e2el_ms",
    "max_concurrent_requests",
)


def load_summary(cells: list[dict[str, Any]], config: LoadConfig) -> dict[str, Any]:
    meeting = [c["concurrency"] for c in cells if c.get("meets_slo")]
    return {
        "slo": {"ttft_ms": config.slo_ttft_ms, "tpot_ms": config.slo_tpot_ms, "share": config.meets_share},
        "best_concurrency": max(meeting) if meeting else None,
        "peak_output_throughput": max((c["output_throughput"] for c in cells), default=None),
    }


JobConfig = SpeedConfig | SweepConfig | LoadConfig


def config_for(kind: str, raw: dict[str, Any]) -> JobConfig:
    """The configuration of a job kind ("speed", "sweep", "load") from its saved settings."""
    repeats, seed = int(raw.get("repeats", 1)), int(raw.get("seed", 0))
    if kind == "sweep":
        return SweepConfig(repeats=repeats, seed=seed)
    if kind == "load":
        return LoadConfig(repeats=repeats, seed=seed)
    return SpeedConfig(repeats=repeats, seed=seed)


async def job_measure(
    config: JobConfig, *, base_url: str, model: str, progress: Progress
) -> tuple[dict[str, Any], bool]:
    """Run a job of any kind; its results (with the kind's fits or summary) and whether it was cancelled."""
    if isinstance(config, LoadConfig):
        loaded = await load_sweep(config, base_url=base_url, model=model, progress=progress)
        results = {"cells": loaded.cells, "cancelled": loaded.cancelled} | load_summary(loaded.cells, config)
        return results, loaded.cancelled
    if isinstance(config, SweepConfig):
        swept = await length_sweep(config, base_url=base_url, model=model, progress=progress)
        return swept.as_dict() | {"fits": sweep_fits(swept.cells)}, swept.cancelled
    probed = await speed_probe(config, base_url=base_url, model=model, progress=progress)
    return probed.as_dict(), probed.cancelled
