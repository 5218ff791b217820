"""The plotting toolkit the job kinds draw their charts with (below ``bench.kinds``: it imports no kind).

Each kind's builder (in its module under ``bench.kinds``) takes ``[(name, results), ...]``:
one entry draws one job, more draw them over each other with the job's name in
every legend entry; the helpers here are what they share. The figures are plain
dicts (plotly's JSON) for plotly.js, which the site serves vendored (templates/plotly_script.html).
``bench.charts`` (above the kinds) picks a kind's chart from the registry.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.utils.translation import gettext as _

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
    return tidy_axes(dict(json.loads(fig.to_json())))


def cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells with a completed request: the ones worth a point."""
    return [c for c in results.get("cells", []) if c.get("completed")]


# An interval's bar on a page: thick enough to read beside plotly's 6 px markers, its caps wider than them.
INTERVAL_BARS = {"visible": True, "thickness": 2, "width": 6}
# On a projector (the team demo): thick lines, hollow markers so that a short interval shows through
# its point, and bars and caps wider than the markers (a 1.2 px bar vanished under a 14 px marker).
PROJECTOR_LINE = 5
PROJECTOR_MARKER = {"size": 12, "line": {"width": 3}}
PROJECTOR_BARS = {"visible": True, "thickness": 4, "width": 9}


def interval_bars(shown: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Error bars for the cells' ``median_<name>_ms`` from their 95 % intervals (``ci_<name>_ms``); None
    for another key or when no cell has an interval."""
    from bench import stats

    if not key.startswith("median_"):
        return None
    ci_key = "ci_" + key.removeprefix("median_")
    bars = stats.error_bars([c.get(key) for c in shown], [c.get(ci_key) for c in shown])
    return None if bars is None else bars | INTERVAL_BARS


def _hollow(symbol: object) -> str:
    name = symbol if isinstance(symbol, str) else "circle"
    return name if name.endswith("-open") else name + "-open"


def projector(figure: dict[str, Any]) -> dict[str, Any]:
    """``figure`` readable from the back of a room: its scatter traces' lines thick, their markers hollow,
    their intervals' bars and caps larger than the markers."""
    for trace in figure.get("data", []):
        if trace.get("type", "scatter") != "scatter":
            continue
        trace["line"] = {**trace.get("line", {}), "width": PROJECTOR_LINE}
        marker = trace.get("marker", {})
        trace["marker"] = {**marker, **PROJECTOR_MARKER, "symbol": _hollow(marker.get("symbol"))}
        if trace.get("error_y"):
            trace["error_y"] = {**trace["error_y"], **PROJECTOR_BARS}
    return figure


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
                name, error_y = series_name(run, label, runs), interval_bars(shown, key)
                bar = go.Bar(x=cases, y=values, name=name, error_y=error_y, meta=unit(key))
                fig.add_trace(bar, 1, column)
    fig.update_layout(barmode="group")
    return done(fig)


# --- what an axis is in: fractions 0–1, milliseconds shown as seconds past 10 000 ----------------
#
# The one place that decides how an axis shows its unit. A trace says what its values are with
# ``meta`` ("fraction" or "ms", ``unit()``); an axis without such a trace is read from its title
# ("ms", "(0–1)"). Every figure made with ``done()`` passes through ``tidy_axes``.

FRACTION, MS = "fraction", "ms"
FRACTION_KEYS = frozenset({"hit_rate", "answer_coverage", "recall_at_k", "kv_cache_usage"})
SECONDS_PAST_MS = 10_000  # an axis whose values pass this many ms is ticked in seconds
FRACTION_TICKS = [0, 0.25, 0.5, 0.75, 1]
_MS_TITLE = re.compile(r"(?<![A-Za-z])ms(?![A-Za-z])")
_FRACTION_TITLE = re.compile(r"\(0\s*[-–]\s*1\)")


def unit(key: str) -> str | None:
    """What a result key's values are: a fraction (``FRACTION_KEYS``), milliseconds (``…_ms``) or neither."""
    if key in FRACTION_KEYS:
        return FRACTION
    return MS if key.endswith("_ms") else None


def _title(options: dict[str, Any]) -> str:
    title = options.get("title")
    return str(title.get("text") or "") if isinstance(title, dict) else str(title or "")


def _traces_on(figure: dict[str, Any], axis: str) -> list[dict[str, Any]]:
    letter, number = axis[0], axis[5:]
    return [t for t in figure.get("data", []) if str(t.get(f"{letter}axis", letter)) == f"{letter}{number}"]


def axis_values(figure: dict[str, Any], axis: str) -> list[float]:
    """The numbers drawn along the layout axis ``axis`` ("xaxis", "yaxis2", ...), error bars' ends included."""
    letter = axis[0]
    values: list[float] = []
    for trace in _traces_on(figure, axis):
        points = trace.get(letter)
        numbers = [float(v) for v in points if _number(v)] if isinstance(points, list) else []
        values += numbers
        plus = (trace.get(f"error_{letter}") or {}).get("array")
        if isinstance(plus, list) and len(plus) == len(points or []):
            values += [
                float(v) + float(e) for v, e in zip(points or [], plus, strict=True) if _number(v) and _number(e)
            ]
    return values


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _value_axis(trace: dict[str, Any]) -> str:
    """The letter of the axis a trace's values run along: x for horizontal bars, else y."""
    return "x" if trace.get("orientation") == "h" else "y"


def axis_unit(figure: dict[str, Any], axis: str, options: dict[str, Any]) -> str | None:
    """The unit of an axis: its traces' ``meta`` where they agree, else what its title says."""
    said = {
        t.get("meta") for t in _traces_on(figure, axis) if t.get("meta") in (FRACTION, MS) and _value_axis(t) == axis[0]
    }
    if len(said) == 1:
        return str(said.pop())
    title = _title(options)
    if _FRACTION_TITLE.search(title):
        return FRACTION
    return MS if _MS_TITLE.search(title) else None


def seconds_text(value: float) -> str:
    """A tick of a milliseconds log axis ticked in seconds: "20 s", "0.5 s"."""
    return f"{value / 1000:g} s"


def _fraction(options: dict[str, Any]) -> None:
    options.update(range=[0, 1.02], autorange=False, tickmode="array", tickvals=FRACTION_TICKS)
    options["ticktext"] = [f"{v:g}" for v in FRACTION_TICKS]


def _in_seconds(values: object) -> object:
    if not isinstance(values, list):
        return values
    return [round(v / 1000, 4) if _number(v) else v for v in values]


def _seconds(figure: dict[str, Any], axis: str, options: dict[str, Any]) -> None:
    """The axis and everything drawn on it in seconds: its values, error bars, legend and title
    ("디코드 시간 중앙값 (s)"), so hover, key and ticks all say the same unit."""
    letter = axis[0]
    for trace in _traces_on(figure, axis):
        trace[letter] = _in_seconds(trace.get(letter))
        bars = trace.get(f"error_{letter}")
        if isinstance(bars, dict):
            bars.update({k: _in_seconds(bars[k]) for k in ("array", "arrayminus") if k in bars})
        if trace.get("name"):
            trace["name"] = _MS_TITLE.sub("s", str(trace["name"]))
        trace["meta"] = "s"
    title = options.get("title")
    if isinstance(title, dict) and title.get("text"):
        title["text"] = _MS_TITLE.sub("s", str(title["text"]))


def _degenerate(options: dict[str, Any], values: list[float]) -> bool:
    """One value (a live sweep's first point): plotly would span it ±0.5 ("2599.5–2601")."""
    if not values or options.get("type") == "log" or options.get("range") is not None:
        return False
    low, high = min(values), max(values)
    return high - low <= 1e-6 * max(abs(high), 1)


def _empty_panels(figure: dict[str, Any]) -> None:
    """A panel with nothing drawn yet (a live sweep's second half) says so once, instead of plotly's
    bare −1…4 axes."""
    layout = figure.get("layout", {})
    if not any(axis_values(figure, a) for a in layout if re.fullmatch(r"yaxis\d*", a)):
        return  # an empty figure is the page's to explain
    for axis, options in list(layout.items()):
        if not (re.fullmatch(r"yaxis\d*", axis) and isinstance(options, dict)) or axis_values(figure, axis):
            continue
        x = str(options.get("anchor") or "x")
        for shown in (axis, "xaxis" + x[1:]):
            if isinstance(layout.get(shown), dict):
                layout[shown].update(showticklabels=False, showgrid=False, zeroline=False)
        note = {"text": _("측정한 값이 없습니다"), "showarrow": False, "font": {"size": 14, "color": "#5b6472"}}
        where = {"xref": f"{x} domain", "yref": f"{axis.replace('axis', '')} domain", "x": 0.5, "y": 0.5}
        layout.setdefault("annotations", []).append(note | where)


def tidy_axes(figure: dict[str, Any]) -> dict[str, Any]:
    """Every linear axis of the figure in its unit: fractions 0–1, ms past ``SECONDS_PAST_MS`` in
    seconds, an axis with a single value spanned from zero instead of ±0.5 around it, and an empty
    panel said to be empty."""
    _empty_panels(figure)
    layout = figure.get("layout", {})
    for axis, options in layout.items():
        if not (re.fullmatch(r"[xy]axis\d*", axis) and isinstance(options, dict)):
            continue
        kind, values = axis_unit(figure, axis, options), axis_values(figure, axis)
        if kind == FRACTION and options.get("type") != "log":
            _fraction(options)
        elif kind == MS and values and max(values) > SECONDS_PAST_MS and options.get("type") != "log":
            _seconds(figure, axis, options)
            values = axis_values(figure, axis)
        if _degenerate(options, values):
            value = values[0]
            options["range"] = [0, 1.2 * value] if value > 0 else [0, 1] if value == 0 else [1.2 * value, 0]
    return figure
