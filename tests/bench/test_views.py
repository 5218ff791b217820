"""The job and compare pages: every number explained, the settings that differ side by side."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench.models import BenchJob
from bench.views import settings_diff


def load_cell(level: int) -> dict[str, Any]:
    return {
        "cell": f"@{level}",
        "completed": 8,
        "failed": 0,
        "level": level,
        "concurrency": level,
        "request_throughput": 10.0 * level,
        "request_goodput": 10.0 * level,
        "output_throughput": 40.0,
        "median_ttft_ms": 15.0,
        "p99_ttft_ms": 20.0,
        "median_tpot_ms": 3.0,
        "p99_tpot_ms": 4.0,
        "p99_client_queue_ms": 8708.0,
        "meets_slo": True,
        "requests": [],
    }


def job(owner: User, config: dict[str, Any], **fields: Any) -> BenchJob:
    results = {"cells": [load_cell(1), load_cell(2)], "slo": {"ttft_ms": 3000.0, "tpot_ms": 200.0}, "model": "m"}
    return BenchJob.objects.create(
        owner=owner, kind="load", config=config, engine_url="http://e:8000", status="done", results=results, **fields
    )


@pytest.mark.django_db
def test_the_settings_diff_shows_what_differs_and_folds_what_is_the_same() -> None:
    owner = User.objects.create(username="comparer")
    a = job(owner, {"concurrencies": "1, 2", "slo_ttft_ms": "3000"})
    b = job(owner, {"concurrencies": "1, 2", "slo_ttft_ms": "60"})
    differ, same = settings_diff([a, b])
    assert [(label, values) for label, values in differ] == [("SLO: TTFT 상한 (ms)", ["3000", "60"])]
    assert ("동시성 단계들", ["1, 2", "1, 2"]) in same  # a default is shown as the form shows it
    client = Client()
    client.force_login(owner)
    page = client.get(f"/bench/compare/?ids={a.pk}&ids={b.pk}").content.decode()
    assert 'id="settings-diff"' in page and "<td>60</td>" in page
    assert 'id="settings-same"' in page and 'id="job-chart-data"' in page


@pytest.mark.django_db
def test_every_number_of_the_load_table_is_explained() -> None:
    owner = User.objects.create(username="reader")
    done = job(owner, {})
    client = Client()
    client.force_login(owner)
    page = client.get(f"/bench/{done.pk}/").content.decode()
    head = page[page.index("<thead>") : page.index("</thead>")]
    assert head.count("<th title=") == 11 and "<th>" not in head  # every column has its explanation
    assert "우리 클라이언트가 실제로 보낸 시각까지" in page and 'id="load-glossary"' in page


def _timed(kind: str, owner: User, ttft_s: list[float], **fields: Any) -> BenchJob:
    """A finished job of ``kind`` whose one cell's requests took these TTFTs (TPOT 20 ms, 1 s end to end)."""
    requests = [{"success": True, "ttft": t, "tpot": 0.02, "e2el": 1.0} for t in ttft_s]
    results = {"cells": [{"cell": "c", "completed": len(requests), "requests": requests}]}
    return BenchJob.objects.create(owner=owner, kind=kind, status="done", results=results, **fields)


@pytest.mark.django_db
def test_comparing_jobs_of_different_kinds_names_the_kinds_offers_each_kinds_comparison_and_shows_their_latencies() -> (
    None
):
    owner = User.objects.create(username="mixer")
    speeds = [_timed("speed", owner, [0.1, 0.2, 0.3], lab=1), _timed("speed", owner, [0.4, 0.5, 0.6])]
    prefix = _timed("prefix", owner, [0.05, 0.07])
    client = Client()
    client.force_login(owner)
    response = client.get("/bench/compare/", {"ids": [speeds[0].pk, prefix.pk, speeds[1].pk]})
    assert response.status_code == 200  # not a dead end
    page = response.content.decode()
    assert 'id="kinds-differ"' in page and "속도 측정" in page and "프리픽스 캐시" in page
    assert f"/bench/compare/?ids={speeds[0].pk}&amp;ids={speeds[1].pk}" in page  # the two speed jobs, together
    assert "하나만 골랐습니다" in page  # the lone prefix job says what it lacks
    table = page.split('id="common-metrics"')[1]
    first = table.split(f'data-job="{speeds[0].pk}"')[1].split("</tr>")[0]
    assert "<td>3</td>" in first and "200.0" in first and "20.0" in first and "1000.0" in first
    assert "70.0" not in first and "60.0" in table.split(f'data-job="{prefix.pk}"')[1].split("</tr>")[0]


@pytest.mark.django_db
def test_comparing_jobs_of_different_kinds_in_english_shows_no_hangul() -> None:
    import re

    owner = User.objects.create(username="mixer_en")
    a, b = _timed("speed", owner, [0.1, 0.2], lab=1), _timed("load", owner, [0.3, 0.4])
    client = Client()
    client.force_login(owner)
    client.cookies["django_language"] = "en"
    page = client.get(f"/bench/compare/?ids={a.pk}&ids={b.pk}").content.decode()
    assert "Compare by kind" in page and "Lab 1" in page
    assert not re.findall(r"[\uac00-\ud7a3]+", page.split("<main")[1].split("</main>")[0])


@pytest.mark.django_db
def test_the_job_list_marks_the_runs_a_lab_page_made() -> None:
    owner = User.objects.create(username="marked")
    from_lab, from_bench = _timed("speed", owner, [0.1], lab=1), _timed("speed", owner, [0.1])
    client = Client()
    client.force_login(owner)
    page = client.get("/bench/").content.decode()
    lab_row = page.split(f'data-job="{from_lab.pk}"')[1].split("</tr>")[0]
    bench_row = page.split(f'data-job="{from_bench.pk}"')[1].split("</tr>")[0]
    assert 'class="lab-run" data-lab="1" href="/labs/1/"' in lab_row and "실습 1" in lab_row
    assert "lab-run" not in bench_row and "벤치마크 페이지" in bench_row
    assert 'id="lab-run-note"' in page
