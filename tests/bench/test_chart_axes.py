"""Every chart's axes in their unit (bench.plotting.tidy_axes): fractions 0–1, seconds past 10 000 ms,
and a live sweep's single point without an absurd ±0.5 axis."""

from __future__ import annotations

from typing import Any

from bench import charts, plotting


def _sweep_cell(sweep: str, input_tokens: int, output_tokens: int, decode_ms: float) -> dict[str, Any]:
    return {
        "cell": f"{sweep} {input_tokens}/{output_tokens}",
        "sweep": sweep,
        "completed": 3,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "median_ttft_ms": input_tokens / 0.3,
        "median_decode_ms": decode_ms,
    }


def _chart(kind: str, results: dict[str, Any]) -> dict[str, Any]:
    figures = charts.charts(kind, [("#1", results)])
    return dict(figures[0]["figure"])


def test_a_decode_axis_past_ten_seconds_is_drawn_in_seconds_not_10k_ms() -> None:
    cells = [_sweep_cell("output", 64, n, 110.0 * n) for n in (32, 128, 256, 480)]  # up to 52 800 ms
    figure = _chart("sweep", {"cells": cells})
    layout = figure["layout"]
    assert layout["yaxis2"]["title"]["text"] == "s"
    decode = [t for t in figure["data"] if t.get("yaxis") == "y2"]
    assert max(decode[0]["y"]) == 52.8 and decode[0]["name"] == "디코드 시간 중앙값 (s)"  # hover and key in s too
    assert all(max(t["y"]) <= 60 for t in decode)  # the fitted line as well
    ttft = _chart("sweep", {"cells": [_sweep_cell("input", n, 16, 900.0) for n in (100, 2600)]})
    assert ttft["layout"]["yaxis"]["title"]["text"] == "ms"  # under 10 s: plain ms


def test_a_log_axis_in_ms_past_ten_seconds_is_ticked_in_seconds() -> None:
    figure = {
        "data": [{"type": "scatter", "x": [1, 2], "y": [800.0, 25_000.0], "meta": "ms"}],
        "layout": {"yaxis": {"type": "log", "title": {"text": "ms"}}},
    }
    ticks = charts.tidy_log_axes(figure)["layout"]["yaxis"]["ticktext"]
    assert ticks[-1] == "50 s" and "500 ms" in ticks and "k" not in "".join(ticks)


def test_fraction_axes_run_from_zero_to_one_wherever_they_are_drawn() -> None:
    cells = [
        {"cell": name, "completed": 3, "median_ttft_ms": 100.0, "answer_coverage": share}
        for name, share in (("normal", 0.14), ("brief", 0.11))
    ]
    bars = plotting.bars(
        [("#1", {"cells": cells})], ("ms", "share"), ([("median_ttft_ms", "TTFT")], [("answer_coverage", "c")])
    )
    assert bars["layout"]["yaxis2"]["range"] == [0, 1.02]  # 0.11 against 0.14 is no collapse
    assert bars["layout"]["yaxis"].get("range") != [0, 1.02]  # the ms panel beside it is no fraction
    prefix_cells = [{"cell": "warm", "completed": 2, "median_ttft_ms": 50.0, "hit_rate": 0.4}]
    prefix_layout = _chart("prefix", {"cells": prefix_cells})["layout"]
    assert prefix_layout["yaxis2"]["range"] == [0, 1.02] and "range" not in prefix_layout["xaxis2"]  # cases along x
    titled = {"data": [{"y": [0.1, 0.2]}], "layout": {"yaxis": {"title": {"text": "share (0-1)"}}}}
    assert plotting.tidy_axes(titled)["layout"]["yaxis"]["range"] == [0, 1.02]


def test_a_live_sweep_with_one_point_has_no_absurd_axis() -> None:
    figure = _chart("sweep", {"cells": [_sweep_cell("input", 2600, 16, 1700.0)], "partial": True})
    layout = figure["layout"]
    assert layout["xaxis"]["range"] == [0, 3120.0]  # not 2599.5–2601
    assert layout["yaxis"]["range"][0] == 0


def test_a_live_sweep_says_not_yet_and_a_finished_one_names_its_two_prefill_speeds() -> None:
    from django.template.loader import render_to_string

    from bench.kinds import sweep

    live = render_to_string("bench/kinds/lengths.html", {"r": {"cells": [], "partial": True}})
    assert "아직 없음" in live and '<b id="prefill-speed"></b>' not in live and '<b id="decode-speed"></b>' not in live
    assert 'id="fits"' not in live  # no line yet: no "기울기 ms/토큰" without numbers
    # TTFT = 400 ms fixed + 1/300 s per token: the line says 300 tok/s, the longest cell's own ratio less.
    ttft = {n: n / 0.3 + 400 for n in (100, 2600)}
    cells = [
        _sweep_cell("input", n, 16, 1650.0)
        | {"median_ttft_ms": ttft[n], "prefill_speed": n / (ttft[n] / 1000), "decode_speed": 9.0}
        for n in ttft
    ]
    finished = render_to_string("bench/kinds/lengths.html", {"r": sweep.results(cells)})
    measured, fitted = sweep.results(cells)["prefill_speed"], sweep.results(cells)["fits"]["prefill_speed"]
    assert round(measured) == 287 and round(fitted) == 300
    assert "측정한 프리필 속도" in finished and "직선으로 구한 프리필 속도" in finished
    assert '<b id="fit-prefill-speed">300</b>' in finished and "측정한 287 tok/s보다 큰 까닭" in finished


def test_a_panel_with_no_point_yet_says_so_instead_of_bare_axes() -> None:
    figure = _chart("sweep", {"cells": [_sweep_cell("input", 2600, 16, 1700.0)], "partial": True})
    layout = figure["layout"]
    assert layout["yaxis2"]["showticklabels"] is False and layout["xaxis2"]["showticklabels"] is False
    notes = [a for a in layout["annotations"] if a.get("xref") == "x2 domain"]
    assert [a["text"] for a in notes] == ["측정한 값이 없습니다"]
    assert "showticklabels" not in layout["yaxis"]  # the panel with its point keeps its axes
