"""Plotly figures of job results: the kind's chart (from the registry) and the per-request timeline.

``charts(kind, runs)`` is the dispatch over the kinds: it sits above ``bench.kinds`` (whose
builders draw with ``bench.plotting``, below them), adds the per-request timeline with the
engine's own view, styles jobs drawn together and ticks log axes readably.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bench import plotting
from bench.kinds import registry
from bench.plotting import LAYOUT, Runs, cells

# The phases by their docs/metrics.md names; the legend shows them in the reader's language.
PHASES = ("client queue", "server queue", "prefill", "decode")
PHASE_LABELS = {
    "client queue": gettext_lazy("클라이언트 대기"),
    "server queue": gettext_lazy("서버 대기"),
    "prefill": gettext_lazy("프리필"),
    "decode": gettext_lazy("디코드"),
}


def _phase_spans(rows: list[dict[str, Any]], start: float) -> dict[str, list[tuple[int, float, float]]]:
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
    return parts


def engine_samples(results: dict[str, Any]) -> dict[str, list[float]] | None:
    """Every cell's /metrics samples as one timeline (``server_metrics.TIMELINE_SERIES``); None without two."""
    from rag.vllm import server_metrics

    found = [t for c in results.get("cells", []) if (t := (c.get("server") or {}).get("timeline")) and t.get("t")]
    if not found:
        return None
    joined = server_metrics.joined(found)
    return joined if len(joined["t"]) >= 2 else None


GAP_S = 1.5  # samples further apart than this belong to different cells: no rate is drawn across them


def engine_rates(samples: dict[str, list[float]], start: float) -> dict[str, list[float | None]]:
    """Per sample (from the second): seconds since ``start``, and what the engine did since the sample
    before: generation tokens per second, tokens per engine step, prefix-cache hit %, new preemptions."""
    t = samples["t"]
    out: dict[str, list[float | None]] = {"t": [], "tokens_per_s": [], "tokens_per_step": [], "hit_pct": []}
    out["preempted"] = []

    def step(key: str, i: int) -> float:
        return samples[key][i] - samples[key][i - 1]

    for i in range(1, len(t)):
        dt = t[i] - t[i - 1]
        near = 0 < dt <= GAP_S
        steps, queries = step("iteration_tokens_count", i), step("prefix_cache_queries", i)
        out["t"].append(round(t[i] - start, 3))
        out["tokens_per_s"].append(round(step("generation_tokens", i) / dt, 1) if near else None)
        out["tokens_per_step"].append(round(step("iteration_tokens_sum", i) / steps, 1) if near and steps else None)
        out["hit_pct"].append(round(100 * step("prefix_cache_hits", i) / queries, 1) if near and queries else None)
        out["preempted"].append(step("preemptions", i))
    return out


def has_lone_points(ys: Sequence[float | None]) -> bool:
    """A value with no value beside it: a line draws nothing for it (Lab 5's prefix-cache hits come
    only at the samples where a prompt arrived, between long gaps), so such a series needs markers."""
    return any(
        y is not None and (i == 0 or ys[i - 1] is None) and (i == len(ys) - 1 or ys[i + 1] is None)
        for i, y in enumerate(ys)
    )


# The engine panels that can go under the request timeline, in their usual order.
ENGINE_PANELS = ("requests", "cache", "tokens", "steps")
ENGINE_PANEL_PX = 120


def _engine_titles() -> dict[str, str]:
    return {
        "requests": _("엔진의 요청 수"),
        "cache": _("KV 캐시 사용률 · 프리픽스 캐시 적중률 (0–1)"),
        "tokens": _("생성 토큰/초"),
        "steps": _("엔진 스텝당 토큰"),
    }


def _fractions(percents: list[float | None]) -> list[float | None]:
    return [None if p is None else round(p / 100, 3) for p in percents]


def _engine_traces(fig: Any, samples: dict[str, list[float]], start: float, panels: tuple[str, ...]) -> None:
    """The rows under the requests: the engine's own view (vLLM's /metrics) on the requests' time axis."""
    import plotly.graph_objects as go

    at = [round(v - start, 3) for v in samples["t"]]
    rates = engine_rates(samples, start)
    lines = (
        ("requests", at, samples["running"], _("실행 중인 요청"), "#0072B2"),
        ("requests", at, samples["waiting"], _("대기 중인 요청"), "#D55E00"),
        ("cache", at, [round(v, 3) for v in samples["kv_cache_usage"]], _("KV 캐시 사용률"), "#009E73"),
        ("cache", rates["t"], _fractions(rates["hit_pct"]), _("프리픽스 캐시 적중률"), "#CC79A7"),
        ("tokens", rates["t"], rates["tokens_per_s"], _("생성 토큰/초"), "#E69F00"),
        ("steps", rates["t"], rates["tokens_per_step"], _("엔진 스텝당 토큰"), "#56B4E9"),
    )
    for panel, xs, ys, name, colour in lines:
        if panel not in panels:
            continue
        shape = "hv" if panel == "requests" else "linear"
        mode = "lines+markers" if has_lone_points(ys) else "lines"
        line = {"color": colour, "shape": shape, "width": 2}
        meta = plotting.FRACTION if panel == "cache" else None
        trace = go.Scatter(x=xs, y=ys, name=name, mode=mode, line=line, marker={"color": colour, "size": 6}, meta=meta)
        fig.add_trace(trace, 2 + panels.index(panel), 1)
    preempted = [(x, n) for x, n in zip(rates["t"], rates["preempted"], strict=True) if n and n > 0]
    if preempted and "requests" in panels:
        marks = go.Scatter(
            x=[x for x, _n in preempted],
            y=[0 for _x, _n in preempted],
            text=[f"{n:g}" for _x, n in preempted],
            name=_("선점"),
            mode="markers",
            marker={"symbol": "x", "size": 10, "color": "#000000"},
        )
        fig.add_trace(marks, 2 + panels.index("requests"), 1)


def timeline(results: dict[str, Any], panels: tuple[str, ...] = ENGINE_PANELS) -> dict[str, Any] | None:
    """Every request as a bar from its send time (client queue | server queue | prefill | decode) and,
    when the engine's /metrics was sampled, the engine's own view under it on the same time axis:
    requests running and waiting (with preemptions), KV-cache usage and prefix-cache hits, generation
    tokens per second, tokens per engine step (``panels``: which of them, in order). Zooming one panel
    zooms them all."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for c in results.get("cells", []) for r in c.get("requests", []) if r.get("t_send")]
    if not rows:
        return None
    start = min(r.get("t_scheduled") or r["t_send"] for r in rows)
    samples = engine_samples(results) if panels else None
    bars_px = min(900, 120 + 14 * len(rows))
    shown = panels if samples else ()
    titles = [""] + [_engine_titles()[p] for p in shown]  # the requests' panel: under the figure's own title
    fig = make_subplots(
        rows=1 + len(shown),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.045 if shown else 0.02,
        row_heights=[bars_px] + [ENGINE_PANEL_PX] * len(shown),
        subplot_titles=titles if shown else None,
    )
    for name, spans in _phase_spans(rows, start).items():
        bar = go.Bar(
            y=[i for i, _start, _length in spans],
            base=[b for _index, b, _length in spans],
            x=[d for _index, _start, d in spans],
            orientation="h",
            name=str(PHASE_LABELS[name]),
        )
        fig.add_trace(bar, 1, 1)
    if samples:
        _engine_traces(fig, samples, start, shown)
    title = _("요청별 타임라인과 엔진 (첫 요청부터의 초)") if samples else _("요청별 타임라인 (첫 요청부터의 초)")
    fig.update_layout(barmode="overlay", title=title)
    fig.update_xaxes(title_text=_("초"), row=1 + len(shown), col=1)
    fig.update_yaxes(title_text=_("요청"), autorange="reversed", row=1, col=1)
    height = 80 + bars_px + (ENGINE_PANEL_PX + 40) * len(shown)
    fig.update_layout(height=height, margin=LAYOUT["margin"])
    return plotting.tidy_axes(dict(json.loads(fig.to_json())))


def charts(kind: str, runs: Runs, *, engine_panels: tuple[str, ...] = ENGINE_PANELS) -> list[dict[str, Any]]:
    """The kind's chart, then (for one job) its per-request timeline: [{"id", "data_id", "figure"}, ...].

    Jobs drawn together get one colour each and one line style per series (``compare_style``);
    every log axis gets readable ticks (``tidy_log_axes``).
    """
    runs = [(name, results) for name, results in runs if cells(results)]
    job_kind = registry.find(kind)
    if not runs or job_kind is None or job_kind.chart is None:
        return []
    main = tidy_log_axes(job_kind.chart(runs))
    if len(runs) > 1:
        main = compare_style(main, [name for name, _results in runs])
    out = [{"id": "job-chart", "data_id": "job-chart-data", "figure": main}]
    if len(runs) == 1:
        line = timeline(runs[0][1], engine_panels)
        if line:
            out.append({"id": "job-timeline", "data_id": "job-timeline-data", "figure": line})
    return out


# --- jobs drawn together ---------------------------------------------------------------------

# One colour per job (Okabe–Ito, apart from the chunk-size colours of bench.palette where it can),
# one line style (or bar pattern) per series within a panel.
JOB_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
PATTERNS = ("", "/", ".", "x", "-", "+")


def _run_of(name: str, runs: list[str]) -> str | None:
    return next((run for run in runs if name.startswith(f"{run} ")), None)


def compare_style(figure: dict[str, Any], runs: list[str]) -> dict[str, Any]:
    """Several jobs in one figure: each job one colour and one legend group titled by its name;
    each series (by its name, within its panel) one line style, the same for every job.

    A kind that colours its series itself (retrieval: a colour per chunk size, ``bench.palette``)
    keeps its colours; there a job is told by its line style instead.
    """
    kind_coloured = any((trace.get("line") or {}).get("color") for trace in figure.get("data", []))
    styles: dict[tuple[str, str], int] = {}
    for trace in figure.get("data", []):
        name = str(trace.get("name", ""))
        run = _run_of(name, runs)
        if run is None:
            continue
        series = name[len(run) + 1 :]
        panel = str(trace.get("xaxis", "x"))
        style = styles.setdefault((panel, series), sum(1 for key in styles if key[0] == panel))
        job = runs.index(run)
        colour = JOB_COLOURS[job % len(JOB_COLOURS)]
        trace.update(name=series, legendgroup=run, legendgrouptitle={"text": run})
        trace["hovertemplate"] = "%{x}, %{y}<extra>" + f"{run} {series}".replace("%", "%%") + "</extra>"
        if kind_coloured:
            trace["line"] = (trace.get("line") or {}) | {"dash": DASHES[job % len(DASHES)]}
        elif trace.get("type") == "bar":
            pattern = {"shape": PATTERNS[style % len(PATTERNS)]}
            trace["marker"] = (trace.get("marker") or {}) | {"color": colour, "pattern": pattern}
        else:
            trace["line"] = (trace.get("line") or {}) | {"color": colour, "dash": DASHES[style % len(DASHES)]}
            trace["marker"] = (trace.get("marker") or {}) | {"color": colour}
    # Below the panels, one row per job (its group title first): the panels keep their width.
    legend = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.2, "yanchor": "top", "groupclick": "togglegroup"}
    layout = figure.setdefault("layout", {})
    layout["legend"] = (layout.get("legend") or {}) | legend | {"tracegroupgap": 4, "font": {"size": 12}}
    shown = [t for t in figure.get("data", []) if t.get("showlegend", True) and t.get("legendgroup") == runs[0]]
    layout["height"] = int(str(layout.get("height") or LAYOUT["height"])) + 20 * len(shown) + 50
    return figure


# --- log axes ----------------------------------------------------------------------------------

MOST_TICKS = 8


def _nice(value: float, *, seconds: bool = False) -> str:
    """A log tick: "2", "50", "20k"; on a milliseconds axis that reaches 10 s, each tick with its unit
    ("500 ms", "1 s", "20 s"), never "10k" ms."""
    if seconds:
        return f"{value:g} ms" if value < 1000 else plotting.seconds_text(value)
    if value >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def log_ticks(low: float, high: float, *, most: int = MOST_TICKS) -> list[float]:
    """Tick values for a log axis over [low, high]: 1-2-5 in each decade, or the decades alone
    when 1-2-5 would give more than ``most``; always one tick at or below ``low`` and one at or
    above ``high``, so that the ticks span the data."""
    if low <= 0 or high <= 0:
        return []
    low, high = min(low, high), max(low, high)
    first, last = math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1
    for steps in ((1, 2, 5), (1,)):
        every = [m * 10.0**e for e in range(first, last + 1) for m in steps]
        below = max(v for v in every if v <= low * (1 + 1e-9))
        above = min(v for v in every if v >= high * (1 - 1e-9))
        ticks = [float(f"{v:.6g}") for v in every if below <= v <= above]
        if len(ticks) <= most:
            return ticks
    return ticks


def _axis_values(figure: dict[str, Any], axis: str) -> list[float]:
    """The positive numbers drawn along the layout axis ``axis`` ("xaxis", "yaxis2", ...)."""
    return [v for v in plotting.axis_values(figure, axis) if v > 0]


def tidy_log_axes(figure: dict[str, Any]) -> dict[str, Any]:
    """Every log axis of the figure ticked readably: the few levels themselves on an x axis that
    has at most ``MOST_TICKS`` of them (1, 2, 4, 8 concurrent requests), else 1-2-5 or decades."""
    layout = figure.get("layout", {})
    for axis, options in layout.items():
        if not (axis.startswith(("xaxis", "yaxis")) and isinstance(options, dict) and options.get("type") == "log"):
            continue
        values = _axis_values(figure, axis)
        if not values:
            continue
        levels = sorted(set(values))
        ticks = (
            levels if axis.startswith("xaxis") and len(levels) <= MOST_TICKS else log_ticks(min(values), max(values))
        )
        pad = 0.06 * max(math.log10(ticks[-1] / ticks[0]), 0.3)
        seconds = plotting.axis_unit(figure, axis, options) == plotting.MS and ticks[-1] >= plotting.SECONDS_PAST_MS
        options.update(
            tickmode="array",
            tickvals=ticks,
            ticktext=[_nice(v, seconds=seconds) for v in ticks],
            range=[math.log10(ticks[0]) - pad, math.log10(ticks[-1]) + pad],
            minor={"showgrid": False},
        )
    return figure
