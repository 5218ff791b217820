"""Class-wide plotly figures: measured speeds per engine, and TTFT against retrieved context.

Each learner counts once: their latest finished job of the kind. Figures are plain
dicts for plotly.js (served from the installed package, as on the bench pages).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.utils.translation import gettext as _

LAYOUT = {"height": 420, "margin": {"t": 40, "l": 60, "r": 20, "b": 50}}


def _latest_finished(learners: Iterable[User], kind: str) -> list[tuple[User, Any]]:
    """(learner, their latest finished job of ``kind``) in one query."""
    from bench.models import BenchJob

    by_id = {u.pk: u for u in learners}
    jobs = (
        BenchJob.objects.filter(owner_id__in=by_id, kind=kind, status=BenchJob.Status.DONE)
        .order_by("owner_id", "-pk")
        .only("pk", "owner_id", "engine_url", "results")
    )
    latest: dict[int, Any] = {}
    for job in jobs:
        latest.setdefault(job.owner_id, job)
    return [(by_id[owner], job) for owner, job in sorted(latest.items(), key=lambda kv: by_id[kv[0]].username)]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def speed_points(learners: Iterable[User]) -> dict[str, list[tuple[str, float | None, float | None]]]:
    """engine URL → [(username, prefill tok/s, decode tok/s)] from each learner's latest Lab 1 run."""
    out: dict[str, list[tuple[str, float | None, float | None]]] = {}
    for learner, job in _latest_finished(learners, "speed"):
        results = job.results or {}
        prefill, decode = _number(results.get("prefill_speed")), _number(results.get("decode_speed"))
        if prefill is None and decode is None:
            continue
        out.setdefault(job.engine_url or "?", []).append((learner.username, prefill, decode))
    return out


def ttft_points(learners: Iterable[User]) -> dict[str, list[tuple[float, float]]]:
    """username → [(context tokens, TTFT ms)] over the cells of their latest Lab 4 run."""
    out: dict[str, list[tuple[float, float]]] = {}
    for learner, job in _latest_finished(learners, "retrieval"):
        points = []
        for cell in (job.results or {}).get("cells", []):
            x, y = _number(cell.get("median_context_tokens")), _number(cell.get("median_ttft_ms"))
            if cell.get("completed") and x is not None and y is not None:
                points.append((x, y))
        if points:
            out[learner.username] = sorted(points)
    return out


def _done(figure: Any) -> dict[str, Any]:
    figure.update_layout(**LAYOUT)
    return dict(json.loads(figure.to_json()))


def speeds_figure(points: dict[str, list[tuple[str, float | None, float | None]]]) -> dict[str, Any] | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not points:
        return None
    figure = make_subplots(rows=1, cols=2, subplot_titles=(_("프리필 속도 (tok/s)"), _("디코드 속도 (tok/s)")))
    for engine, rows in sorted(points.items()):
        for column, index in ((1, 1), (2, 2)):
            kept = [(row[0], row[index]) for row in rows if row[index] is not None]
            figure.add_trace(
                go.Box(
                    y=[value for _name, value in kept],
                    text=[name for name, _value in kept],
                    name=engine,
                    legendgroup=engine,
                    showlegend=column == 1,
                    boxpoints="all",
                    jitter=0.4,
                    pointpos=0,
                    hovertemplate="%{text}: %{y:.1f} tok/s<extra></extra>",
                ),
                1,
                column,
            )
    figure.update_yaxes(rangemode="tozero")
    return _done(figure)


def ttft_figure(points: dict[str, list[tuple[float, float]]]) -> dict[str, Any] | None:
    import plotly.graph_objects as go

    if not points:
        return None
    figure = go.Figure()
    for username, pairs in sorted(points.items()):
        figure.add_trace(
            go.Scatter(
                x=[x for x, _y in pairs],
                y=[y for _x, y in pairs],
                mode="markers",
                name=username,
                hovertemplate=username + ": %{x:.0f} tok → %{y:.0f} ms<extra></extra>",
            )
        )
    figure.update_xaxes(title_text=_("검색해 넣은 문맥 토큰"))
    figure.update_yaxes(title_text="TTFT (ms)", rangemode="tozero")
    figure.update_layout(title_text=_("문맥 토큰에 따른 TTFT (학습자별)"))
    return _done(figure)


def class_charts(learners: list[User]) -> list[dict[str, Any]]:
    """[{"id", "data_id", "figure"}] for templates/bench/charts.html; a chart without data is left out."""
    out = []
    speeds = speeds_figure(speed_points(learners))
    if speeds is not None:
        out.append({"id": "class-speeds", "data_id": "class-speeds-data", "figure": speeds})
    ttft = ttft_figure(ttft_points(learners))
    if ttft is not None:
        out.append({"id": "class-ttft", "data_id": "class-ttft-data", "figure": ttft})
    return out
