"""The team demo page: the sweep the sliders ask for, its live state, the two-settings form."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import services
from bench.models import BenchJob
from labapp.labs.demo import sweep_settings


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
    assert state["figure"]["data"][0]["x"] == [90.0]
    assert 'id="demo-chart"' in client.get(f"/demo/?job={job.pk}").content.decode()
    stranger = Client()
    stranger.force_login(User.objects.create(username="stranger-demo"))
    assert stranger.get(f"/demo/sweep/{job.pk}.json").status_code == 404
    assert 'id="demo-chart"' not in stranger.get(f"/demo/?job={job.pk}").content.decode()
