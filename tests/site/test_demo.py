"""The team demo page: the sweep the sliders ask for, its live state, the two-settings form."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import palette, services
from bench.kinds import retrieval
from bench.models import BenchJob
from labapp.labs import demo
from labapp.labs.demo import state_words, sweep_settings
from rag.chunking import CHUNK_SIZES


def test_the_sliders_give_top_k_from_one_and_every_chunk_size_up_to_the_largest() -> None:
    assert sweep_settings(6, 1000) == {
        "questions": "3", "top_ks": "1, 2, 4, 6", "chunk_sizes": "200, 500, 1000", "max_tokens": "8",
    }  # fmt: skip
    assert sweep_settings(3, 500)["top_ks"] == "1, 2, 3" and sweep_settings(3, 500)["chunk_sizes"] == "200, 500"
    assert sweep_settings(99, 100)["top_ks"].endswith("10") and sweep_settings(0, 100)["chunk_sizes"] == "200"


@pytest.mark.django_db
def test_a_sweep_starts_a_retrieval_job_and_its_state_carries_the_cells_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    owner = User.objects.create(username="demo")
    client = Client()
    client.force_login(owner)
    page = client.get("/demo/").content.decode()
    assert 'name="top_k_max"' in page and 'name="top_k_b"' in page and 'data-keep-url="true"' in page
    made: list[dict[str, Any]] = []

    def job_create(**kw: Any) -> BenchJob:
        made.append(kw)
        return BenchJob.objects.create(owner=owner, kind=kw["kind"], config=kw["config"], engine_url=kw["engine_url"])

    monkeypatch.setattr(services, "job_create", job_create)
    response = client.post("/demo/sweep/", {"top_k_max": "4", "chunk_size_max": "500"})
    job = BenchJob.objects.get()
    assert response["Location"] == f"/demo/?job={job.pk}" and made[0]["config"]["top_ks"] == "1, 2, 4"
    cell = {"completed": 1, "chunk_size": 200, "top_k": 1, "median_context_tokens": 90.0, "median_ttft_ms": 300.0,
            "median_tpot_ms": 40.0, "requests": []}  # fmt: skip
    BenchJob.objects.filter(pk=job.pk).update(status="running", done_requests=1, total_requests=6,
                                              results={"cells": [cell], "partial": True})  # fmt: skip
    state = client.get(f"/demo/sweep/{job.pk}.json").json()
    assert (state["status"], state["done"], state["cells"]) == ("running", 1, 1)
    assert state["state_text"] == "측정 중 · 6개 중 1개"
    assert state["figure"]["data"][0]["x"] == [90.0]
    assert 'id="demo-chart"' in client.get(f"/demo/?job={job.pk}").content.decode()
    stranger = Client()
    stranger.force_login(User.objects.create(username="stranger-demo"))
    assert stranger.get(f"/demo/sweep/{job.pk}.json").status_code == 404
    assert 'id="demo-chart"' not in stranger.get(f"/demo/?job={job.pk}").content.decode()


@pytest.mark.django_db
def test_after_a_sweep_the_sliders_show_the_settings_that_made_the_chart() -> None:
    owner = User.objects.create(username="presenter")
    client = Client()
    client.force_login(owner)
    config = sweep_settings(4, 500) | {"seed": 3}
    job = BenchJob.objects.create(owner=owner, kind="retrieval", config=config, engine_url="http://e", status="done",
                                  done_requests=6, total_requests=6)  # fmt: skip
    page = client.get(f"/demo/?job={job.pk}").content.decode()
    assert 'name="top_k_max" min="1" max="10" value="4"' in page and 'value="500" list="demo-sizes"' in page
    assert 'data-top-k-max="4" data-chunk-size-max="500"' in page  # the script warns when a slider moves off it
    assert "완료 · 6개 모두 측정" in page and 'id="ab-result"' in page and 'id="ab-details"' in page
    fresh = client.get("/demo/").content.decode()
    assert 'name="top_k_max" min="1" max="10" value="6"' in fresh and 'id="demo-chart"' not in fresh


@pytest.mark.django_db
def test_the_job_state_reads_as_words_in_each_status() -> None:
    job = BenchJob(kind="retrieval", status="running", done_requests=6, total_requests=15)
    assert state_words(job) == "측정 중 · 15개 중 6개"
    job.status = "failed"
    assert state_words(job) == "실패 · 15개 중 6개에서 멈춤"
    job.status = "queued"
    assert state_words(job).startswith("대기 중")


def test_a_chunk_size_has_one_colour_in_both_panels_from_the_shared_palette() -> None:
    cells = [
        {"completed": 1, "chunk_size": size, "top_k": k, "median_context_tokens": size * k / 4.0,
         "median_ttft_ms": 100.0 + size * k / 8, "median_tpot_ms": 40.0}
        for size in (200, 1000) for k in (1, 4)
    ]  # fmt: skip
    figure = retrieval.chart([("#1", {"cells": cells})])
    colours = {(t["legendgroup"], t["line"]["color"]) for t in figure["data"]}
    assert colours == {("#1 200", palette.CHUNK_COLOURS[200]), ("#1 1000", palette.CHUNK_COLOURS[1000])}
    assert [t["showlegend"] for t in figure["data"]].count(True) == 2  # one key per size, not per panel
    assert set(palette.CHUNK_COLOURS) == set(CHUNK_SIZES) and len(set(palette.CHUNK_COLOURS.values())) == 3


def _point(size: int, top_k: int, context: float, ttft: float, tpot: float) -> dict[str, Any]:
    return {"cell": f"{size}/{top_k}", "completed": 3, "chunk_size": size, "top_k": top_k,
            "median_context_tokens": context, "median_ttft_ms": ttft, "median_tpot_ms": tpot}  # fmt: skip


def test_each_point_is_the_median_of_several_questions_with_its_interval() -> None:
    """One question per point made the TPOT panel zigzag 80–160 ms under a caption saying it stays flat."""
    assert int(sweep_settings(6, 1000)["questions"]) >= 3
    cells = [_point(200, k, 60.0 * k, 200.0 + 100 * k, 95.0) | {"ci_tpot_ms": [88.0, 104.0]} for k in (1, 2)]
    tpot = [t for t in retrieval.chart([("#1", {"cells": cells})])["data"] if t["xaxis"] == "x2"]
    assert tpot[0]["error_y"]["array"] == [9.0, 9.0] and tpot[0]["error_y"]["arrayminus"] == [7.0, 7.0]


def test_the_demos_intervals_show_beside_its_markers_on_a_projector() -> None:
    """Its 1.2 px bars with 4 px caps vanished under the projector's 14 px markers."""
    ttfts = {1: 300.0, 2: 400.0}
    cells = [_point(200, k, 60.0 * k, t, 95.0) | {"ci_ttft_ms": [t - 10, t + 20]} for k, t in ttfts.items()]
    figure = demo.sweep_figure(BenchJob(pk=7, kind=demo.DEMO_KIND, results={"cells": cells}))
    assert figure is not None
    ttft = next(t for t in figure["data"] if t["xaxis"] == "x")
    bars, marker = ttft["error_y"], ttft["marker"]
    assert bars["visible"] is True and bars["thickness"] >= 3 and bars["width"] * 2 > marker["size"]
    assert marker["symbol"].endswith("-open") and marker["line"]["width"] >= 2  # a short bar shows through it
    assert bars["array"] == [20.0, 20.0] and bars["arrayminus"] == [10.0, 10.0]  # the interval itself, unchanged
    page_bars = retrieval.chart([("#1", {"cells": cells})])["data"][0]["error_y"]  # Lab 4's and the job page's
    assert page_bars["visible"] is True and page_bars["thickness"] >= 2 and page_bars["width"] >= 6


def test_the_caption_is_computed_from_the_points_and_never_claims_what_they_do_not_show() -> None:
    flat = [_point(200, 1, 65.0, 292.0, 98.0), _point(1000, 6, 1935.0, 3868.0, 103.0)]
    assert demo.caption({"cells": flat}) == [
        "문맥 65 → 1,935 토큰: TTFT 292 ms → 3.9 s (13배로 늘어남)",
        "TPOT 98 ms → 103 ms (거의 그대로)",
    ]
    zigzag = [_point(200, 1, 65.0, 292.0, 80.0), _point(1000, 6, 1935.0, 3868.0, 160.0)]
    assert demo.caption({"cells": zigzag})[1] == "TPOT 80 ms → 160 ms (2배로 늘어남)"  # not "거의 그대로"
    assert demo.caption({"cells": flat[:1]}) == []  # one point: nothing to say yet
    assert demo.times(15.84) == "16배" and demo.times(2.04) == "2배" and demo.times(2.36) == "2.4배"
    assert demo.change_words(100.0, 40.0) == "2.5배 줄어듦"


@pytest.mark.django_db
def test_the_live_state_and_the_page_carry_the_caption_and_the_ratio_words() -> None:
    owner = User.objects.create(username="captions")
    client = Client()
    client.force_login(owner)
    cells = [_point(200, 1, 65.0, 292.0, 98.0), _point(1000, 6, 1935.0, 3868.0, 103.0)]
    job = BenchJob.objects.create(owner=owner, kind="retrieval", config=sweep_settings(6, 1000), engine_url="http://e",
                                  status="running", results={"cells": cells, "partial": True})  # fmt: skip
    assert "13배로 늘어남" in client.get(f"/demo/sweep/{job.pk}.json").json()["caption"][0]
    page = client.get(f"/demo/?job={job.pk}").content.decode()
    assert 'id="demo-caption"' in page and "13배로 늘어남" in page and 'id="demo-figure"' in page
    assert "거의 그대로입니다" not in page  # the fixed claim is gone
    labels = demo.demo_labels()
    assert labels["times"] == "%(n)s배" and "%(n)s" in labels["slower_times"]
    client.cookies["django_language"] = "en"
    english = client.get(f"/demo/sweep/{job.pk}.json").json()["caption"]
    assert english == [
        "Context 65 → 1,935 tokens: TTFT 292 ms → 3.9 s (up 13×)",
        "TPOT 98 ms → 103 ms (about the same)",
    ]
