"""Plotly figures of job results: the kind's chart (from the registry) and the per-request timeline.

Each kind's builder (in its module under ``bench.kinds``) takes ``[(name, results), ...]``:
one entry draws one job, more draw them over each other with the job's name in
every legend entry; the helpers here are what they share. The figures are plain
dicts (plotly's JSON) for plotly.js, which the site serves from the package.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bench.kinds import registry
from bench.kinds.registry import Runs

Series = list[tuple[str, str]]
LAYOUT = {"height": 400, "margin": {"t": 40, "l": 55, "r": 20, "b": 45}}
CLASS_LAYOUT = {"height": 420, "margin": {"t": 40, "l": 60, "r": 20, "b": 50}}  # the class-wide charts


def figure(titles: tuple[str, ...]) -> Any:
    """One row of panels with these titles."""
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=len(titles), subplot_titles=titles)


def done(fig: Any, layout: dict[str, Any] = LAYOUT) -> dict[str, Any]:
    fig.update_layout(**layout)
    return dict(json.loads(fig.to_json()))


def cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells with a completed request: the ones worth a point."""
    return [c for c in results.get("cells", []) if c.get("completed")]


def series_name(run: str, series: str, runs: Runs) -> str:
    """A legend entry: the series, after the job's name when several jobs are drawn together."""
    return f"{run} {series}" if len(runs) > 1 else series


def bars(
    runs: Runs, titles: tuple[str, str], panels: tuple[Series, Series], *, names: dict[str, str] | None = None
) -> dict[str, Any]:
    """Grouped bars per case ("cell", shown by its name in ``names``), one panel per list of (key, series name)."""
    import plotly.graph_objects as go

    fig = figure(titles)
    for run, results in runs:
        shown = cells(results)
        cases = [(names or {}).get(c["cell"], c["cell"]) for c in shown]
        for column, series in enumerate(panels, start=1):
            for key, label in series:
                bar = go.Bar(x=cases, y=[c.get(key) for c in shown], name=series_name(run, label, runs))
                fig.add_trace(bar, 1, column)
    fig.update_layout(barmode="group")
    return done(fig)


# The phases by their METRICS.md names; the legend shows them in the reader's language.
PHASES = ("client queue", "server queue", "prefill", "decode")
PHASE_LABELS = {
    "client queue": gettext_lazy("클라이언트 대기"),
    "server queue": gettext_lazy("서버 대기"),
    "prefill": gettext_lazy("프리필"),
    "decode": gettext_lazy("디코드"),
}


def timeline(results: dict[str, Any]) -> dict[str, Any] | None:
    """Every request as a bar from its send time: client queue | server queue | prefill | decode."""
    import plotly.graph_objects as go

    rows = [r for c in results.get("cells", []) for r in c.get("requests", []) if r.get("t_send")]
    if not rows:
        return None
    start = min(r.get("t_scheduled") or r["t_send"] for r in rows)
    parts: dict[str, list[tuple[int, float, float]]] = {name: [] for name in PHASES}
    for index, r in enumerate(rows):
        sent = r["t_send"] - start
        queued = r.get("client_queue_time") or 0.0
        parts["client queue"].append((index, sent - queued, queued))
        ttft = r.get("ttft") or 0.0
        server_queue = min(r.get("queue_time_server") or 0.0, ttft)
        parts["server queue"].append((index, sent, server_queue))
        parts["prefill"].append((index, sent + server_queue, ttft - server_queue))
        parts["decode"].append((index, sent + ttft, r.get("decode_time") or 0.0))
    fig = go.Figure()
    for name, spans in parts.items():
        fig.add_trace(
            go.Bar(
                y=[i for i, _start, _length in spans],
                base=[b for _index, b, _length in spans],
                x=[d for _index, _start, d in spans],
                orientation="h",
                name=str(PHASE_LABELS[name]),
            )
        )
    fig.update_layout(barmode="overlay", title=_("요청별 타임라인 (첫 요청부터의 초)"))
    fig.update_xaxes(title_text=_("초"))
    fig.update_yaxes(title_text=_("요청"), autorange="reversed")
    fig.update_layout(height=min(900, 160 + 14 * len(rows)), margin=LAYOUT["margin"])
    return dict(json.loads(fig.to_json()))


def charts(kind: str, runs: Runs) -> list[dict[str, Any]]:
    """The kind's chart, then (for one job) its per-request timeline: [{"id", "data_id", "figure"}, ...]."""
    runs = [(name, results) for name, results in runs if cells(results)]
    job_kind = registry.find(kind)
    if not runs or job_kind is None or job_kind.chart is None:
        return []
    out = [{"id": "job-chart", "data_id": "job-chart-data", "figure": job_kind.chart(runs)}]
    if len(runs) == 1:
        line = timeline(runs[0][1])
        if line:
            out.append({"id": "job-timeline", "data_id": "job-timeline-data", "figure": line})
    return out
