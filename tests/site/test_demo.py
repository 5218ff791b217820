"""The team demo page: the sweep the sliders ask for, its live state, the two-settings form."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import palette, services
from bench.kinds import retrieval
from bench.models import BenchJob
from labapp.labs.demo import state_words, sweep_settings
from rag.chunking import CHUNK_SIZES


def test_the_sliders_give_top_k_from_one_and_every_chunk_size_up_to_the_largest() -> None:
    assert sweep_settings(6, 1000) == {
        "questions": "1", "top_ks": "1, 2, 4, 6", "chunk_sizes": "200, 500, 1000", "max_tokens": "8",
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
