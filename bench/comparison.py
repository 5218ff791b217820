"""Jobs of different kinds side by side: what every kind measures alike, and which of them share a kind.

Charts and settings are a kind's own, so only jobs of one kind are drawn over each other
(``bench.views.bench_compare``). Every kind sends requests, though, and each request has its
TTFT, TPOT and end-to-end time (docs/metrics.md): pooled over a job's cells, their medians
compare any two jobs, while the workloads behind them differ.
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
    median and its 95 % interval in ms (None: no request measured it)."""

    job: BenchJob
    requests: int
    medians: list[tuple[float | None, list[float] | None]]


@dataclass(frozen=True)
class KindGroup:
    """The chosen jobs of one kind, and the comparison of just them (None when there is only one)."""

    label: str
    jobs: list[BenchJob]
    compare_url: str | None


def _succeeded(results: dict[str, Any]) -> list[dict[str, Any]]:
    cells = [c for c in results.get("cells") or [] if isinstance(c, dict)]
    return [r for c in cells for r in c.get("requests") or [] if isinstance(r, dict) and r.get("success")]


def pooled(job: BenchJob) -> Pooled:
    requests = _succeeded(job.results or {})
    medians = []
    for metric, _label in COMMON_METRICS:
        values = [float(r[metric]) * 1000 for r in requests if isinstance(r.get(metric), int | float)]
        medians.append((statistics.median(values) if values else None, stats.median_ci(values)))
    return Pooled(job, len(requests), medians)


def kind_groups(jobs: list[BenchJob]) -> list[KindGroup]:
    """The jobs by kind, in the order the kinds first appear, each group with its own comparison's URL."""
    by_kind: dict[str, list[BenchJob]] = {}
    for job in jobs:
        by_kind.setdefault(job.kind, []).append(job)
    groups = []
    for same in by_kind.values():
        url = reverse("bench_compare") + "?" + urlencode([("ids", j.pk) for j in same]) if len(same) > 1 else None
        groups.append(KindGroup(str(same[0].get_kind_display()), same, url))
    return groups
