"""The figures of job results: jobs drawn together, log axes, the timeline."""

from __future__ import annotations

import math
from typing import Any

from bench import charts


def load_results(scale: float, levels: tuple[int, ...] = (1, 2, 4, 8, 16)) -> dict[str, Any]:
    cells = [
        {
            "cell": f"@{level}",
            "completed": 8,
            "level": level,
            "concurrency": level,
            "request_throughput": 10.0 * level * scale,
            "request_goodput": 9.0 * level * scale,
            "median_ttft_ms": 15.0 * level * scale,
            "p99_ttft_ms": 20.0 * level * scale,
            "median_tpot_ms": 3.0 + level / 10,
            "requests": [],
        }
        for level in levels
    ]
    return {"cells": cells, "slo": {"ttft_ms": 3000.0, "tpot_ms": 200.0}}


def test_log_ticks_are_one_two_five_or_decades_and_span_the_data() -> None:
    assert charts.log_ticks(15, 22) == [10.0, 20.0, 50.0]
    assert charts.log_ticks(0.5, 4) == [0.5, 1.0, 2.0, 5.0]
    wide = charts.log_ticks(2.4, 3000)  # 1-2-5 would give 11 ticks: decades instead
    assert wide == [1.0, 10.0, 100.0, 1000.0, 10000.0]
    for low, high in ((3.8, 7.1), (1, 16), (0.02, 90_000)):
        ticks = charts.log_ticks(low, high)
        assert ticks[0] <= low and ticks[-1] >= high and len(ticks) <= charts.MOST_TICKS
    assert charts.log_ticks(0, 10) == []


def test_every_log_axis_gets_readable_ticks_the_levels_themselves_on_x() -> None:
    (chart,) = charts.charts("load", [("#1", load_results(1.0))])  # no requests: no timeline
    layout = chart["figure"]["layout"]
    assert layout["xaxis"]["tickvals"] == [1, 2, 4, 8, 16] and layout["xaxis"]["ticktext"] == ["1", "2", "4", "8", "16"]
    y = layout["yaxis2"]
    assert y["type"] == "log" and y["tickmode"] == "array"
    assert len(y["tickvals"]) <= charts.MOST_TICKS and "10 s" in y["ticktext"]  # the 3000 ms SLO line is covered
    assert "10k" not in y["ticktext"] and "100 ms" in y["ticktext"]  # an ms axis reaching 10 s: ticks with units
    low, high = y["range"]
    assert low <= math.log10(min(y["tickvals"])) and high >= math.log10(max(y["tickvals"]))
    assert layout["yaxis"]["title"]["text"] and layout["yaxis2"]["title"]["text"]  # axis titles with units


def test_jobs_drawn_together_get_one_colour_each_and_one_line_style_per_series() -> None:
    (chart,) = charts.charts("load", [("#1", load_results(1.0)), ("#2", load_results(1.3, (1, 2, 4)))])
    traces = chart["figure"]["data"]
    assert {t["legendgroup"] for t in traces} == {"#1", "#2"}
    for run in ("#1", "#2"):
        mine = [t for t in traces if t["legendgroup"] == run]
        assert len({t["line"]["color"] for t in mine}) == 1  # one colour per job
        assert all(t["legendgrouptitle"]["text"] == run and not t["name"].startswith(run) for t in mine)
    first = {(t.get("xaxis", "x"), t["name"]): t["line"]["dash"] for t in traces if t["legendgroup"] == "#1"}
    second = {(t.get("xaxis", "x"), t["name"]): t["line"]["dash"] for t in traces if t["legendgroup"] == "#2"}
    same = set(first) & set(second)
    assert same and all(first[key] == second[key] for key in same)  # a series looks the same in every job
    colours = {t["line"]["color"] for t in traces}
    assert len(colours) == 2
    panel2 = [dash for (panel, _name), dash in first.items() if panel == "x2"]
    assert len(set(panel2)) == len(panel2)  # within a panel every series has its own style
    legend = chart["figure"]["layout"]["legend"]
    assert legend["orientation"] == "h" and legend["groupclick"] == "togglegroup"


def test_a_kind_that_colours_by_chunk_size_keeps_its_colours_and_tells_jobs_by_line_style() -> None:
    def cells(scale: float) -> list[dict[str, Any]]:
        return [
            {
                "cell": f"{size}/{k}",
                "chunk_size": size,
                "top_k": k,
                "completed": 1,
                "median_context_tokens": size * k,
                "median_ttft_ms": scale * size * k,
                "median_tpot_ms": 20.0,
            }
            for size in (200, 500)
            for k in (1, 3)
        ]

    (chart,) = charts.charts("retrieval", [("#3", {"cells": cells(1.0)}), ("#4", {"cells": cells(1.5)})])
    traces = chart["figure"]["data"]
    by_job = {run: {t["line"]["dash"] for t in traces if t["legendgroup"] == run} for run in ("#3", "#4")}
    assert by_job["#3"] != by_job["#4"] and all(len(d) == 1 for d in by_job.values())
    assert len({t["line"]["color"] for t in traces}) == 2  # the two chunk sizes' colours


def test_one_job_gets_its_timeline_and_bars_of_a_comparison_get_patterns() -> None:
    results = load_results(1.0)
    results["cells"][0]["requests"] = [{"t_send": 1.0, "ttft": 0.1, "decode_time": 0.2, "client_queue_time": 0.05}]
    figures = charts.charts("load", [("#1", results)])
    assert [f["id"] for f in figures] == ["job-chart", "job-timeline"]
    fig = {
        "data": [
            {"type": "bar", "name": "#1 TTFT"},
            {"type": "bar", "name": "#2 TTFT"},
            {"type": "bar", "name": "#1 x"},
        ],
        "layout": {},
    }
    styled = charts.compare_style(fig, ["#1", "#2"])["data"]
    assert styled[0]["marker"]["color"] != styled[1]["marker"]["color"]
    assert styled[0]["marker"]["pattern"] == styled[1]["marker"]["pattern"] != styled[2]["marker"]["pattern"]
