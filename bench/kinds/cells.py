"""What every kind stores of a cell (a group of requests measured alike): pure functions over records."""

from __future__ import annotations

import statistics
from typing import Any

from bench import stats
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def number(value: Any) -> float | None:
    """A saved result that is a number (not a bool, not missing), as a float; else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def request_row(record: RequestRecord) -> dict[str, Any]:
    """A request as a job stores it: every docs/metrics.md field, the gaps (ITL) but not each chunk's clock."""
    return record.as_dict() | {"text_chunk_at": None}


def cell_summary(records: list[RequestRecord], **fields: Any) -> dict[str, Any]:
    """One cell: ``fields`` (what the cell is, e.g. its shape), the medians over its successful
    requests (times in ms, speeds in tokens/s per docs/metrics.md; None when none succeeded),
    its errors and its requests (CSV-ready rows)."""
    ok = [r for r in records if r.success]

    def med(values: list[float | None], scale: float = 1.0) -> float | None:
        return median([v * scale for v in values if v is not None])

    return fields | {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": [r.error for r in records if r.error],
        "median_ttft_ms": med([r.ttft for r in ok], 1000),
        "median_tpot_ms": med([r.tpot for r in ok], 1000),
        "median_e2el_ms": med([r.e2el for r in ok], 1000),
        "median_decode_ms": med([r.decode_time for r in ok], 1000),
        # The typical gap between tokens: one stall (another program on the CPU) moves one gap, not the median.
        "median_itl_ms": med([gap for r in ok for gap in r.itl], 1000),
        "median_server_queue_ms": med([r.queue_time_server for r in ok], 1000),
        "median_server_prefill_ms": med([r.prefill_time_server or None for r in ok], 1000),
        "median_prompt_tokens": med([float(r.prompt_tokens or 0) for r in ok]),
        "median_output_tokens": med([float(r.output_tokens or 0) for r in ok]),
        "median_cached_tokens": med([float(r.cached_tokens or 0) for r in ok]),
        "prefill_speed": med([r.prefill_speed or None for r in ok]),
        "decode_speed": med([r.decode_speed or None for r in ok]),
        **intervals(ok),
        "requests": [request_row(r) for r in records],
    }


def intervals(ok: list[RequestRecord]) -> dict[str, list[float] | None]:
    """95 % bootstrap intervals of the cell's median TTFT, TPOT, E2EL and decode time, in ms
    (``ci_<name>_ms`` beside ``median_<name>_ms``; None with fewer than two requests)."""
    return {
        "ci_ttft_ms": stats.median_ci([r.ttft for r in ok], scale=1000),
        "ci_tpot_ms": stats.median_ci([r.tpot for r in ok], scale=1000),
        "ci_e2el_ms": stats.median_ci([r.e2el for r in ok], scale=1000),
        "ci_decode_ms": stats.median_ci([r.decode_time for r in ok], scale=1000),
    }


def watched_cell(cell: dict[str, Any], server: dict[str, Any], *, own: float = 1) -> dict[str, Any]:
    """The cell with the engine's /metrics around it (``server``) and whether other traffic ran on
    the engine meanwhile: ``disturbed`` when it held more requests than the cell's ``own`` in flight
    (1 for a cell sent one request at a time), ``extra_requests`` the most beyond them; both None
    when /metrics could not be sampled."""
    extra = server_metrics.extra_requests(server, own)
    return cell | {"server": server, "disturbed": None if extra is None else extra > 0, "extra_requests": extra}


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


def farthest_point(xs: list[float], ys: list[float], fit: dict[str, float] | None) -> int | None:
    """The index of the point farthest from the fitted line (the outlier a message names); None without a fit."""
    if not fit or not xs:
        return None
    residuals = [abs(y - (fit["slope"] * x + fit["intercept"])) for x, y in zip(xs, ys, strict=True)]
    return max(range(len(xs)), key=residuals.__getitem__)


def step_ms(cell: dict[str, Any]) -> float | None:
    """A cell's time per output token for comparing cells: the median gap between tokens when stored
    (robust to a stall), else the median TPOT."""
    return number(cell.get("median_itl_ms")) or number(cell.get("median_tpot_ms"))


def trend(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """The fitted line's values at the smallest and the largest x: how much y grows across the range,
    averaged over every point (a max/min of single points follows the noisiest one); None without a line."""
    fit = line_fit(xs, ys)
    if fit is None:
        return None
    return fit["slope"] * min(xs) + fit["intercept"], fit["slope"] * max(xs) + fit["intercept"]
