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
