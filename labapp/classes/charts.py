"""Class-wide plotly figures: each job kind's class chart (``bench.kinds``), e.g. speeds per engine, TTFT by context.

Each learner counts once: their latest finished job of the kind. Figures are plain
dicts for plotly.js (served from the installed package, as on the bench pages).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User

from bench.kinds import registry
from bench.kinds.registry import ClassChart


def _latest_finished(learners: Iterable[User], kind: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(username, engine URL, results) of each learner's latest finished job of ``kind``, in one query."""
    from bench.models import BenchJob

    by_id = {u.pk: u for u in learners}
    jobs = (
        BenchJob.objects.filter(owner_id__in=by_id, kind=kind, status=BenchJob.Status.DONE)
        .order_by("owner_id", "-pk")
        .only("pk", "owner_id", "engine_url")
    )
    latest: dict[int, Any] = {}
    for job in jobs:
        latest.setdefault(job.owner_id, job)
    # The results of each learner's latest job only (a second query): not of every earlier run.
    results = dict(BenchJob.objects.filter(pk__in=[j.pk for j in latest.values()]).values_list("pk", "results"))
    ordered = sorted(latest.items(), key=lambda kv: by_id[kv[0]].username)
    return [(by_id[owner].username, job.engine_url, results.get(job.pk) or {}) for owner, job in ordered]


def _class_charts() -> list[tuple[str, ClassChart]]:
    return [(kind.name, kind.class_chart) for kind in registry.all_kinds() if kind.class_chart is not None]


def chart_data(learners: list[User]) -> dict[str, Any]:
    """Every class chart's data by its key (``/classes/<id>/charts.json``)."""
    return {chart.key: chart.points(_latest_finished(learners, kind)) for kind, chart in _class_charts()}


def class_charts(learners: list[User]) -> list[dict[str, Any]]:
    """[{"id", "data_id", "figure"}] for templates/bench/charts.html; a chart without data is left out."""
    return charts_and_empty(learners)[0]


def charts_and_empty(learners: list[User]) -> tuple[list[dict[str, Any]], list[str]]:
    """``class_charts``, and the names of the job kinds whose class chart has no finished run yet (the page
    says so in a word instead of leaving the chart out silently)."""
    out, empty = [], []
    for kind, chart in _class_charts():
        figure = chart.figure(chart.points(_latest_finished(learners, kind)))
        if figure is not None:
            out.append({"id": chart.id, "data_id": f"{chart.id}-data", "figure": figure})
        else:
            spec = registry.find(kind)
            empty.append(str(spec.label) if spec is not None else kind)
    return out, empty
