"""What an importer gives: another tool's run mapped onto this lab's metrics (docs/metrics.md).

Nothing here is guessed: a figure the file does not give stays None and is listed as missing
(``Imported.missing``). Per-request samples come only from a file that has them; a file with
run-level aggregates only gives ``run`` and no samples, and then no interval can be drawn.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench import stats

# The request figures a sample may carry, as docs/metrics.md names them ("Per request").
SAMPLE_METRICS = ("ttft", "tpot", "itl", "e2el", "prompt_tokens", "output_tokens")
# The run figures looked for in every file (docs/metrics.md, "Per run (aggregates)"), in our keys.
TIMED = ("ttft", "tpot", "itl", "e2el")
RUN_KEYS = (
    "completed",
    "failed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    *(f"{stat}_{metric}_ms" for metric in TIMED for stat in ("mean", "median", "p90", "p99")),
)
# Where a run came from, as the file says it (None: the file does not say).
SOURCE_KEYS = ("tool", "version", "model", "endpoint", "backend", "date", "concurrency", "rate")


class NotImportable(Exception):
    """The file cannot be read as this tool's result; ``message`` says why (gettext'd, for the form)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _from(key: str, measured: set[str]) -> bool:
    """Whether a run key (``median_ttft_ms``) is a statistic of a metric the requests carry."""
    return any(key.endswith(f"_{metric}_ms") for metric in measured)


def tpot_of(ttft: float | None, e2el: float | None, output_tokens: int | None) -> float | None:
    """TPOT as docs/metrics.md defines it, from a request's own figures: (e2el − ttft) / (output − 1)."""
    if ttft is None or e2el is None or output_tokens is None or output_tokens <= 1:
        return None
    return (e2el - ttft) / (output_tokens - 1)


def number(value: Any) -> float | None:
    """A finite number from the file (not a bool), as a float; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def whole(value: Any) -> int | None:
    found = number(value)
    return int(found) if found is not None and found == int(found) else None


@dataclass(frozen=True)
class Sample:
    """One request as the file gives it: seconds and tokens, None where the file does not give it."""

    success: bool | None  # None: the file does not say whether it succeeded
    ttft: float | None = None
    e2el: float | None = None
    tpot: float | None = None
    itl: tuple[float, ...] | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None

    def row(self) -> dict[str, Any]:
        """The request as a job stores one (``bench.kinds.cells.request_row``'s keys that the file gives)."""
        decode = self.e2el - self.ttft if self.e2el is not None and self.ttft is not None else None
        return {
            "success": self.success,
            "error": self.error,
            "ttft": self.ttft,
            "tpot": self.tpot,
            "e2el": self.e2el,
            "decode_time": decode,
            "itl": list(self.itl) if self.itl is not None else None,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }


@dataclass(frozen=True)
class Imported:
    """A run another tool measured: where it came from, its aggregates, its requests where the file has them."""

    tool: str  # the importer's name in the registry, e.g. "vllm_bench_serve"
    source: dict[str, Any]  # SOURCE_KEYS (and any other fact the file states), None: not in the file
    run: dict[str, float | None]  # RUN_KEYS as the tool reported them, None: not in the file
    samples: tuple[Sample, ...] = ()
    notes: tuple[str, ...] = field(default=())  # stable keys of how the tool's definitions differ from ours

    @property
    def usable(self) -> list[Sample]:
        """The requests to take medians over: those that succeeded, or all when the file does not say."""
        return [s for s in self.samples if s.success is not False]

    @property
    def missing(self) -> list[str]:
        """What the file lacks, as stable keys: ``source:<key>``, ``request:<metric>``, ``run:<key>``."""
        given = {key for key in SOURCE_KEYS if self.source.get(key) not in (None, "")}
        # A run is driven by a concurrency or by a rate: the other is not missing, it does not apply.
        driven = {"concurrency", "rate"} if given & {"concurrency", "rate"} else set()
        out = [f"source:{key}" for key in SOURCE_KEYS if key not in given | driven]
        measured = {m for m in SAMPLE_METRICS if any(getattr(s, m) is not None for s in self.samples)}
        if not self.samples:
            out.append("request:all")
        else:
            out += [f"request:{m}" for m in SAMPLE_METRICS if m not in measured]
            if all(s.success is None for s in self.samples):
                out.append("request:success")
        # A figure taken over the file's requests (their medians, our intervals) is not missing from the run.
        return out + [f"run:{key}" for key in RUN_KEYS if self.run.get(key) is None and not _from(key, measured)]

    def cell(self) -> dict[str, Any]:
        """The run as one cell of a job's results: medians (ms) over the requests where the file has them,
        else as the tool reported them, their intervals (None without requests) and the requests."""
        ok = self.usable

        def values(metric: str, scale: float = 1.0) -> list[float]:
            return [float(v) * scale for s in ok if (v := getattr(s, metric)) is not None]

        cell: dict[str, Any] = {"cell": "imported", "completed": whole(self.run.get("completed")), "failed": None}
        if self.samples and all(s.success is not None for s in self.samples):
            cell["completed"] = len(ok)
            cell["failed"] = len(self.samples) - len(ok)
        else:
            cell["failed"] = whole(self.run.get("failed"))
        for metric in ("ttft", "tpot", "e2el"):
            found = values(metric, 1000)
            cell[f"median_{metric}_ms"] = statistics.median(found) if found else self.run.get(f"median_{metric}_ms")
            cell[f"ci_{metric}_ms"] = stats.median_ci(found)
            cell[f"{metric}_from"] = (
                "requests" if found else ("run" if cell[f"median_{metric}_ms"] is not None else None)
            )
        gaps = [g * 1000 for s in ok for g in (s.itl or ())]
        cell["median_itl_ms"] = statistics.median(gaps) if gaps else self.run.get("median_itl_ms")
        for metric in ("prompt_tokens", "output_tokens"):
            found = values(metric)
            cell[f"median_{metric}"] = statistics.median(found) if found else None
        return cell | {"requests": [s.row() for s in self.samples]}
