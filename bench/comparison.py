"""Jobs of different kinds side by side: what every kind measures alike, and which of them share a kind.

Charts and settings are a kind's own, so only jobs of one kind are drawn over each other
(``bench.views.bench_compare``). Every kind sends requests, though, and each request has its
TTFT, TPOT and end-to-end time (docs/metrics.md): pooled over a job's cells, their medians
compare any two jobs, while the workloads behind them differ. An imported run (``bench.imports``)
joins them with its file's requests, or, when the file has only a run's aggregates, with the
tool's own median and no interval: then no verdict on the noise can be given.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy

from bench import stats
from bench.models import BenchJob

COMMON_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", gettext_lazy("전체 지연")))


@dataclass(frozen=True)
class Pooled:
    """One job's successful requests, every cell together: their count and, per common metric, the
    median and its 95 % interval in ms (None: no request measured it), and where each median came
    from: ``requests`` (per-request values), ``run`` (an imported file's aggregate only) or None."""

    job: BenchJob
    requests: int
    medians: list[tuple[float | None, list[float] | None]]
    basis: list[str | None]

    @property
    def shown(self) -> list[tuple[float | None, list[float] | None, str | None]]:
        """(median, interval, basis) per common metric, for the page."""
        return [(m, ci, b) for (m, ci), b in zip(self.medians, self.basis, strict=True)]


@dataclass(frozen=True)
class Verdict:
    """A later job's median against the first job's, per common metric: ``inside`` (intervals overlap),
    ``differs`` (they do not), ``aggregates`` (an imported file without per-request data: no interval),
    ``few`` (fewer than two requests), ``none`` (no median on one side)."""

    job: BenchJob
    outcomes: list[str]


@dataclass(frozen=True)
class KindGroup:
    """The chosen jobs of one kind, and the comparison of just them (None when there is only one)."""

    label: str
    jobs: list[BenchJob]
    compare_url: str | None


def _succeeded(results: dict[str, Any]) -> list[dict[str, Any]]:
    cells = [c for c in results.get("cells") or [] if isinstance(c, dict)]
    # An imported request whose success the file does not state (None) counts: the file gave no failure.
    return [r for c in cells for r in c.get("requests") or [] if isinstance(r, dict) and r.get("success") is not False]


def _reported(results: dict[str, Any], metric: str) -> float | None:
    """An imported run's median as its tool reported it, when its file had no per-request values."""
    cells = [c for c in results.get("cells") or [] if isinstance(c, dict)]
    if len(cells) != 1 or cells[0].get(f"{metric}_from") != "run":
        return None
    value = cells[0].get(f"median_{metric}_ms")
    return float(value) if isinstance(value, int | float) else None


def pooled(job: BenchJob) -> Pooled:
    results = job.results or {}
    requests = _succeeded(results)
    medians: list[tuple[float | None, list[float] | None]] = []
    basis: list[str | None] = []
    for metric, _label in COMMON_METRICS:
        values = [float(r[metric]) * 1000 for r in requests if isinstance(r.get(metric), int | float)]
        if values:
            medians.append((statistics.median(values), stats.median_ci(values)))
            basis.append("requests")
        else:
            reported = _reported(results, metric)
            medians.append((reported, None))
            basis.append("run" if reported is not None else None)
    return Pooled(job, len(requests), medians, basis)


def verdicts(rows: list[Pooled]) -> list[Verdict]:
    """Each job after the first against the first, per common metric (see ``Verdict``)."""
    if len(rows) < 2:
        return []
    first = rows[0]
    out = []
    for row in rows[1:]:
        outcomes = []
        for (mine, ci), (theirs, first_ci), basis, first_basis in zip(
            row.medians, first.medians, row.basis, first.basis, strict=True
        ):
            if mine is None or theirs is None:
                outcomes.append("none")
            elif "run" in (basis, first_basis):
                outcomes.append("aggregates")
            elif ci is None or first_ci is None:
                outcomes.append("few")
            else:
                outcomes.append("inside" if stats.overlaps(ci, first_ci) else "differs")
        out.append(Verdict(row.job, outcomes))
    return out


def kind_groups(jobs: list[BenchJob]) -> list[KindGroup]:
    """The jobs by kind, in the order the kinds first appear, each group with its own comparison's URL
    (none for runs that never ran here, such as imported ones: they have no settings or chart to overlay)."""
    by_kind: dict[str, list[BenchJob]] = {}
    for job in jobs:
        by_kind.setdefault(job.kind, []).append(job)
    groups = []
    for same in by_kind.values():
        if not same[0].runnable:
            continue
        url = reverse("bench_compare") + "?" + urlencode([("ids", j.pk) for j in same]) if len(same) > 1 else None
        groups.append(KindGroup(str(same[0].get_kind_display()), same, url))
    return groups
