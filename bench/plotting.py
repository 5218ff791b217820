"""The plotting toolkit the job kinds draw their charts with (below ``bench.kinds``: it imports no kind).

Each kind's builder (in its module under ``bench.kinds``) takes ``[(name, results), ...]``:
one entry draws one job, more draw them over each other with the job's name in
every legend entry; the helpers here are what they share. The figures are plain
dicts (plotly's JSON) for plotly.js, which the site serves from the package.
``bench.charts`` (above the kinds) picks a kind's chart from the registry.
"""

from __future__ import annotations

import json
from typing import Any

Runs = list[tuple[str, dict[str, Any]]]  # (job name, its results), one entry per job drawn
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


def interval_bars(shown: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Error bars for the cells' ``median_<name>_ms`` from their 95 % intervals (``ci_<name>_ms``); None
    for another key or when no cell has an interval."""
    from bench import stats

    if not key.startswith("median_"):
        return None
    ci_key = "ci_" + key.removeprefix("median_")
    return stats.error_bars([c.get(key) for c in shown], [c.get(ci_key) for c in shown])


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
                values = [c.get(key) for c in shown]
                bar = go.Bar(x=cases, y=values, name=series_name(run, label, runs), error_y=interval_bars(shown, key))
                fig.add_trace(bar, 1, column)
    fig.update_layout(barmode="group")
    return done(fig)
