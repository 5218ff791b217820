"""Plotly figures of job results, one builder per job kind; several jobs of a kind overlay.

Each builder takes ``[(name, results), ...]``: one entry draws one job, more draw
them over each other with the job's name in every legend entry. The figures are
plain dicts (plotly's JSON) for plotly.js, which the site serves from the package.
"""

from __future__ import annotations

import json
from typing import Any

Runs = list[tuple[str, dict[str, Any]]]
Series = list[tuple[str, str]]
LAYOUT = {"height": 400, "margin": {"t": 40, "l": 55, "r": 20, "b": 45}}


def _figure(titles: tuple[str, ...]) -> Any:
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=len(titles), subplot_titles=titles)


def _done(figure: Any) -> dict[str, Any]:
    figure.update_layout(**LAYOUT)
    return dict(json.loads(figure.to_json()))


def _cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in results.get("cells", []) if c.get("completed")]


def _name(run: str, series: str, runs: Runs) -> str:
    return f"{run} {series}" if len(runs) > 1 else series


def lengths(runs: Runs) -> dict[str, Any]:
    """Labs 1-2: TTFT against input tokens and decode time against output tokens, with fit lines."""
    import plotly.graph_objects as go

    figure = _figure(("TTFT vs input tokens", "decode time vs output tokens"))
    for run, results in runs:
        cells = _cells(results)
        ttft_cells = [c for c in cells if c.get("sweep") != "output"]
        decode_cells = [c for c in cells if c.get("sweep") != "input"]
        figure.add_trace(
            go.Scatter(
                x=[c["input_tokens"] for c in ttft_cells],
                y=[c["median_ttft_ms"] for c in ttft_cells],
                mode="markers",
                name=_name(run, "median TTFT (ms)", runs),
            ),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Scatter(
                x=[c["output_tokens"] for c in decode_cells],
                y=[c["median_decode_ms"] for c in decode_cells],
                mode="markers",
                name=_name(run, "median decode (ms)", runs),
            ),
            row=1,
            col=2,
        )
        fits = results.get("fits") or {}
        for column, key, xs, shift in (
            (1, "ttft_vs_input", [c["input_tokens"] for c in ttft_cells], 0),
            (2, "decode_vs_output", [c["output_tokens"] - 1 for c in decode_cells], 1),
        ):
            fit = fits.get(key)
            if fit and xs:
                ends = [min(xs), max(xs)]
                figure.add_trace(
                    go.Scatter(
                        x=[x + shift for x in ends],
                        y=[fit["slope"] * x + fit["intercept"] for x in ends],
                        mode="lines",
                        name=_name(run, f"fit (r² {fit['r2']:.3f})", runs),
                    ),
                    row=1,
                    col=column,
                )
    figure.update_xaxes(title_text="input tokens", row=1, col=1)
    figure.update_xaxes(title_text="output tokens", row=1, col=2)
    figure.update_yaxes(title_text="ms")
    return _done(figure)


LATENCY_SERIES = (
    ("median_ttft_ms", "TTFT p50"),
    ("p99_ttft_ms", "TTFT p99"),
    ("median_tpot_ms", "TPOT p50"),
    ("p99_tpot_ms", "TPOT p99"),
)


def load(runs: Runs) -> dict[str, Any]:
    """Lab 3: throughput and goodput per level; TTFT p50/p99 and TPOT p50 with the SLO lines."""
    import plotly.graph_objects as go

    figure = _figure(("throughput and goodput", "TTFT and TPOT"))
    axis = "concurrency"
    for run, results in runs:
        cells = _cells(results)
        if cells and cells[0].get("load_mode") == "rate":
            axis = "request rate (req/s)"
        levels: list[float] = [c.get("level", c.get("concurrency")) or 0 for c in cells]
        for key, series in (("request_throughput", "req/s"), ("request_goodput", "goodput req/s")):
            figure.add_trace(go.Scatter(x=levels, y=[c[key] for c in cells], name=_name(run, series, runs)), 1, 1)
        for key, series in (
            ("median_ttft_ms", "TTFT p50"),
            ("p99_ttft_ms", "TTFT p99"),
            ("median_tpot_ms", "TPOT p50"),
        ):
            figure.add_trace(
                go.Scatter(x=levels, y=[c[key] for c in cells], name=_name(run, f"{series} (ms)", runs)), 1, 2
            )
        slo = results.get("slo") or {}
        for key, label in (("ttft_ms", "SLO TTFT"), ("tpot_ms", "SLO TPOT")):
            if slo.get(key) and levels:
                figure.add_trace(
                    go.Scatter(
                        x=[min(levels), max(levels)],
                        y=[slo[key]] * 2,
                        mode="lines",
                        line={"dash": "dash"},
                        name=_name(run, f"{label} {slo[key]:g} ms", runs),
                    ),
                    1,
                    2,
                )
    figure.update_xaxes(title_text=axis, type="log")
    figure.update_yaxes(title_text="ms", type="log", row=1, col=2)
    return _done(figure)


def retrieval(runs: Runs) -> dict[str, Any]:
    """Lab 4: TTFT against retrieved context tokens, one line per chunk size; TPOT stays flat."""
    import plotly.graph_objects as go

    figure = _figure(("TTFT vs context tokens", "TPOT vs context tokens"))
    for run, results in runs:
        cells = _cells(results)
        for size in sorted({c["chunk_size"] for c in cells}):
            line = sorted((c for c in cells if c["chunk_size"] == size), key=lambda c: c["top_k"])
            xs = [c["median_context_tokens"] for c in line]
            labels = [f"top-k {c['top_k']}" for c in line]
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=[c["median_ttft_ms"] for c in line],
                    text=labels,
                    mode="lines+markers",
                    name=_name(run, f"{size} chars", runs),
                ),
                1,
                1,
            )
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=[c["median_tpot_ms"] for c in line],
                    text=labels,
                    mode="lines+markers",
                    name=_name(run, f"TPOT {size} chars", runs),
                ),
                1,
                2,
            )
    figure.update_xaxes(title_text="retrieved context tokens")
    figure.update_yaxes(title_text="ms")
    figure.update_yaxes(rangemode="tozero", row=1, col=2)
    return _done(figure)


def _bars(runs: Runs, titles: tuple[str, str], panels: tuple[Series, Series]) -> dict[str, Any]:
    """Grouped bars per case ("cell"), one panel per list of (key, series name)."""
    import plotly.graph_objects as go

    figure = _figure(titles)
    for run, results in runs:
        cells = _cells(results)
        names = [c["cell"] for c in cells]
        for column, series in enumerate(panels, start=1):
            for key, label in series:
                bar = go.Bar(x=names, y=[c.get(key) for c in cells], name=_name(run, label, runs))
                figure.add_trace(bar, 1, column)
    figure.update_layout(barmode="group")
    return _done(figure)


def prefix(runs: Runs) -> dict[str, Any]:
    """Lab 5: cold vs warm bars of TTFT, and the cached share of the prompt."""
    figure = _bars(
        runs,
        ("median TTFT (ms)", "cached tokens / prompt tokens"),
        ([("median_ttft_ms", "TTFT")], [("hit_rate", "hit rate")]),
    )
    figure["layout"]["yaxis2"]["range"] = [0, 1]
    return figure


def short(runs: Runs) -> dict[str, Any]:
    """Lab 6: output tokens and time per variant (normal, brief, capped, both)."""
    return _bars(
        runs,
        ("median output tokens", "median time (ms)"),
        ([("median_output_tokens", "output tokens")], [("median_ttft_ms", "TTFT"), ("median_decode_ms", "decode")]),
    )


def timeline(results: dict[str, Any]) -> dict[str, Any] | None:
    """Every request as a bar from its send time: client queue | server queue | prefill | decode."""
    import plotly.graph_objects as go

    rows = [r for c in results.get("cells", []) for r in c.get("requests", []) if r.get("t_send")]
    if not rows:
        return None
    start = min(r.get("t_scheduled") or r["t_send"] for r in rows)
    parts: dict[str, list[tuple[int, float, float]]] = {
        "client queue": [],
        "server queue": [],
        "prefill": [],
        "decode": [],
    }
    for index, r in enumerate(rows):
        sent = r["t_send"] - start
        queued = r.get("client_queue_time") or 0.0
        parts["client queue"].append((index, sent - queued, queued))
        ttft = r.get("ttft") or 0.0
        server_queue = min(r.get("queue_time_server") or 0.0, ttft)
        parts["server queue"].append((index, sent, server_queue))
        parts["prefill"].append((index, sent + server_queue, ttft - server_queue))
        parts["decode"].append((index, sent + ttft, r.get("decode_time") or 0.0))
    figure = go.Figure()
    for name, bars in parts.items():
        figure.add_trace(
            go.Bar(
                y=[i for i, _, _ in bars],
                base=[b for _, b, _ in bars],
                x=[d for _, _, d in bars],
                orientation="h",
                name=name,
            )
        )
    figure.update_layout(barmode="overlay", title="per-request timeline (s from the first request)")
    figure.update_xaxes(title_text="seconds")
    figure.update_yaxes(title_text="request", autorange="reversed")
    figure.update_layout(height=min(900, 160 + 14 * len(rows)), margin=LAYOUT["margin"])
    return dict(json.loads(figure.to_json()))


BUILDERS = {"speed": lengths, "sweep": lengths, "load": load, "retrieval": retrieval, "prefix": prefix, "short": short}


def charts(kind: str, runs: Runs) -> list[dict[str, Any]]:
    """The kind's chart, then (for one job) its per-request timeline: [{"id", "data_id", "figure"}, ...]."""
    runs = [(name, results) for name, results in runs if _cells(results)]
    if not runs or kind not in BUILDERS:
        return []
    out = [{"id": "job-chart", "data_id": "job-chart-data", "figure": BUILDERS[kind](runs)}]
    if len(runs) == 1:
        line = timeline(runs[0][1])
        if line:
            out.append({"id": "job-timeline", "data_id": "job-timeline-data", "figure": line})
    return out
