"""Class-wide plotly figures: each job kind's class chart (``bench.kinds``), e.g. speeds per engine, TTFT by context.

Each learner counts once: their latest finished job of the kind. Figures are plain
dicts for plotly.js (served vendored, as on the bench pages).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.core.cache import cache
from django.utils import translation

from bench.kinds import registry
from bench.kinds.registry import ClassChart


def _latest_jobs(learners: Iterable[User], kind: str) -> list[tuple[str, Any]]:
    """(username, job) of each learner's latest finished job of ``kind`` (no results read), by username."""
    from bench.models import BenchJob

    by_id = {u.pk: u for u in learners}
    jobs = (
        BenchJob.objects.filter(owner_id__in=by_id, kind=kind, status=BenchJob.Status.DONE)
        .order_by("owner_id", "-pk")
        .only("pk", "owner_id", "engine_url", "created_at", "finished_at")
    )
    latest: dict[int, Any] = {}
    for job in jobs:
        latest.setdefault(job.owner_id, job)
    return sorted(((by_id[owner].username, job) for owner, job in latest.items()), key=lambda pair: pair[0])


def _with_results(jobs: list[tuple[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(username, engine URL, results) of those jobs: their results in one query."""
    from bench.models import BenchJob

    results = dict(BenchJob.objects.filter(pk__in=[job.pk for _u, job in jobs]).values_list("pk", "results"))
    return [(username, job.engine_url, results.get(job.pk) or {}) for username, job in jobs]


def _latest_finished(learners: Iterable[User], kind: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(username, engine URL, results) of each learner's latest finished job of ``kind``."""
    return _with_results(_latest_jobs(learners, kind))


def _figure(kind: str, chart: ClassChart, learners: Iterable[User]) -> dict[str, Any] | None:
    """The class chart of ``kind``, kept (per process) until a learner's latest job of it changes.

    Its data are each learner's latest finished job: reading their results and drawing them
    with plotly was most of the gradebook's time once the runs' outcomes were kept.
    """
    jobs = _latest_jobs(learners, kind)
    # A job's times as well as its id: a test database hands the same ids out again.
    seen = "|".join(f"{u}:{j.pk}:{j.created_at}:{j.finished_at}:{j.engine_url}" for u, j in jobs)
    key = f"class-chart:{kind}:{translation.get_language()}:{hashlib.sha256(seen.encode()).hexdigest()}"
    found = cache.get(key)
    if found is None:
        found = {"figure": chart.figure(chart.points(_with_results(jobs)))}
        cache.set(key, found, timeout=3600)
    figure: dict[str, Any] | None = found["figure"]
    return figure


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
    learners = list(learners)
    for kind, chart in _class_charts():
        figure = _figure(kind, chart, learners)
        if figure is not None:
            out.append({"id": chart.id, "data_id": f"{chart.id}-data", "figure": figure})
        else:
            spec = registry.find(kind)
            empty.append(str(spec.label) if spec is not None else kind)
    return out, empty
