"""95 % bootstrap intervals: on medians, on ratios, in cells, charts, exports and the compare page."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import charts, stats
from bench.kinds import prefix, short
from bench.models import BenchJob


def test_a_median_interval_holds_the_median_and_is_repeatable() -> None:
    values = [100.0, 120.0, 110.0, 130.0, 90.0, 105.0, 115.0]
    ci = stats.median_ci(values)
    assert ci is not None and ci[0] <= statistics.median(values) <= ci[1]
    assert ci[0] >= min(values) and ci[1] <= max(values)
    assert stats.median_ci(values) == ci  # seeded
    assert stats.median_ci([0.1, 0.2], scale=1000) is not None
    assert stats.median_ci([5.0]) is None and stats.median_ci([]) is None
    assert stats.median_ci([3.0, 3.0, 3.0]) == [3.0, 3.0]
    assert stats.median_ci([1.0, None, float("nan"), 2.0]) is not None  # missing values are left out


def test_more_requests_give_a_narrower_interval() -> None:
    few = stats.median_ci([float(v % 17) for v in range(8)])
    many = stats.median_ci([float(v % 17) for v in range(400)])
    assert few is not None and many is not None and (many[1] - many[0]) < (few[1] - few[0])


def test_a_ratio_interval_brackets_the_ratio_of_medians() -> None:
    cold, warm = [200.0, 210.0, 190.0, 205.0], [100.0, 104.0, 96.0, 101.0]
    ci = stats.ratio_ci(cold, warm)
    assert ci is not None and ci[0] <= statistics.median(cold) / statistics.median(warm) <= ci[1]
    assert stats.ratio_ci([1.0], warm) is None and stats.ratio_ci(cold, [0.0, 0.0]) is None


def test_overlap_is_the_noise_verdict() -> None:
    assert stats.overlaps([1, 3], [2, 4]) is True and stats.overlaps([1, 2], [3, 4]) is False
    assert stats.overlaps(None, [1, 2]) is None


def _cell(name: str, ttfts: list[float], **more: Any) -> dict[str, Any]:
    requests = [{"success": True, "ttft": t, "e2el": t * 3, "t_send": 1.0 + i} for i, t in enumerate(ttfts)]
    ms = [1000 * t for t in ttfts]
    cell = {"cell": name, "completed": len(ttfts), "requests": requests, "median_ttft_ms": statistics.median(ms)}
    return cell | {"ci_ttft_ms": stats.median_ci(ms), "median_e2el_ms": 3 * statistics.median(ms)} | more


def test_the_cache_speed_up_and_the_time_saved_come_with_intervals() -> None:
    cells = [_cell("cold", [0.2, 0.21, 0.19]), _cell("warm", [0.1, 0.11, 0.09])]
    found = prefix.summary(cells)
    assert found["warm_speedup"] == pytest.approx(2.0)
    assert found["warm_speedup_ci"][0] <= 2.0 <= found["warm_speedup_ci"][1]
    asked = [{"id": f"q{i}"} for i in range(4)]  # the same four questions both ways, each saving 40-60 %
    normal = _cell("normal", [1.0, 1.1, 0.9, 1.0], max_tokens=160, answers=asked)
    brief = _cell("brief", [0.5, 0.44, 0.45, 0.6], max_tokens=160, answers=asked)
    saved = short.summary([normal, brief])
    assert saved["time_saved_pct"] == pytest.approx(50.0)  # the median of 50, 60, 50 and 40 %
    low, high = saved["time_saved_pct_ci"]
    assert 40.0 - 1e-9 <= low <= 50.0 <= high <= 60.0 + 1e-9


def test_chart_medians_carry_their_intervals_as_error_bars() -> None:
    cells = [_cell("cold", [0.2, 0.21, 0.19]), _cell("warm", [0.1, 0.11, 0.09])]
    figure = charts.charts("prefix", [("#1", {"cells": cells})])[0]["figure"]
    ttft = next(t for t in figure["data"] if t["name"] == "TTFT")
    bars = ttft["error_y"]
    assert bars["type"] == "data" and len(bars["array"]) == 2
    median, ci = cells[0]["median_ttft_ms"], cells[0]["ci_ttft_ms"]
    assert bars["array"][0] == pytest.approx(ci[1] - median) and bars["arrayminus"][0] == pytest.approx(median - ci[0])


@pytest.mark.django_db
def test_the_compare_page_says_which_differences_lie_inside_the_noise_and_the_export_has_intervals() -> None:
    owner = User.objects.create(username="noise")
    slow, same, fast = [0.20, 0.21, 0.19, 0.205], [0.2, 0.208, 0.195, 0.21], [0.10, 0.11, 0.09, 0.105]
    jobs = [
        BenchJob.objects.create(owner=owner, kind="prefix", status="done", results={"cells": [_cell("cold", t)]})
        for t in (slow, same, fast)
    ]
    client = Client()
    client.force_login(owner)
    inside = client.get(f"/bench/compare/?ids={jobs[0].pk}&ids={jobs[1].pk}").content.decode()
    assert 'id="noise-table"' in inside and 'data-inside="true"' in inside and "잡음 안" in inside
    apart = client.get(f"/bench/compare/?ids={jobs[0].pk}&ids={jobs[2].pk}").content.decode()
    assert 'data-inside="false"' in apart and "차이 있음" in apart
    exported = json.loads(client.get(f"/bench/{jobs[0].pk}/export.json").content)
    assert exported["benchmarks"][0]["ci_ttft_ms"] == jobs[0].results["cells"][0]["ci_ttft_ms"]


def test_a_labs_key_number_brings_its_interval_by_the_same_label() -> None:
    from labapp.labs.catalog import LABS

    cells = [_cell("cold", [0.2, 0.21, 0.19]), _cell("warm", [0.1, 0.11, 0.09])]
    results = {"cells": cells} | prefix.summary(cells)
    intervals = LABS[5].key_intervals(results)
    assert set(intervals) == {"warm speed-up"} and intervals["warm speed-up"] == results["warm_speedup_ci"]
    assert LABS[3].key_intervals({"best_level": 4}) == {}
