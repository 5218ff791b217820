"""``manage.py chart_load``: the first drawn point of the demo, a sweep and a lab page (Chromium, test server)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from bench.kinds import retrieval, sweep
from bench.models import BenchJob


def demo_cells() -> list[dict[str, Any]]:
    """A team demo sweep as the real engine draws it: 12 points, each the median of 3 questions with its interval."""
    cells = []
    for size in (200, 500, 1000):
        for k in (1, 2, 4, 6):
            context, tpot = size * k * 0.47, 96.0 + k
            ttft = 150 + 1.9 * context
            cells.append(
                {"cell": f"{size}/{k}", "completed": 3, "failed": 0, "chunk_size": size, "top_k": k,
                 "median_context_tokens": context, "median_ttft_ms": ttft, "ci_ttft_ms": [ttft * 0.96, ttft * 1.05],
                 "median_tpot_ms": tpot, "ci_tpot_ms": [tpot - 6, tpot + 8], "median_output_tokens": 8}
            )  # fmt: skip
    return cells


def sweep_cells() -> list[dict[str, Any]]:
    """A length sweep: TTFT over five input lengths, decode time over five output lengths."""
    inputs = [("input", i, 16) for i in (100, 400, 800, 1200, 1600)]
    outputs = [("output", 100, o) for o in (16, 64, 128, 192, 256)]
    return [
        {"completed": 1, "failed": 0, "sweep": name, "input_tokens": i, "output_tokens": o,
         "median_ttft_ms": 40 + 1.6 * i, "median_decode_ms": 40.0 * (o - 1)}
        for name, i, o in inputs + outputs
    ]  # fmt: skip


def seeded_jobs(owner: User) -> dict[str, BenchJob]:
    """A finished demo sweep, length sweep and Lab 4 run of ``owner``."""
    done = {"owner": owner, "status": "done", "engine_url": "http://e"}
    fits = {"ttft_vs_input": {"slope": 1.6, "intercept": 40, "r2": 0.99}}
    return {
        "demo": BenchJob.objects.create(kind=retrieval.KIND.name, results={"cells": demo_cells()}, **done),
        "sweep": BenchJob.objects.create(kind=sweep.KIND.name, results={"cells": sweep_cells(), "fits": fits}, **done),
        "lab": BenchJob.objects.create(kind=retrieval.KIND.name, lab=4, results={"cells": demo_cells()}, **done),
    }


@pytest.fixture
def seeded(shared_database: None) -> Iterator[dict[str, BenchJob]]:
    owner = User.objects.create(username=f"chart-seed-{uuid.uuid4().hex[:6]}")
    try:
        yield seeded_jobs(owner)
    finally:
        owner.delete()


def test_chart_load_names_each_page_and_gives_its_first_point_in_seconds(
    web_server: str, seeded: dict[str, BenchJob]
) -> None:
    chosen = {f"{name}_job": job.pk for name, job in seeded.items()}
    out = StringIO()
    call_command("chart_load", url=web_server, times=1, stdout=out, **chosen)
    text = out.getvalue()
    for name in ("demo", "sweep", "lab"):
        line = next(line for line in text.splitlines() if line.startswith(name + " "))
        assert "cold " in line and "warm " in line and " s" in line and "goal" in line
    out = StringIO()
    call_command("chart_load", url=web_server, times=1, json=True, stdout=out, **chosen)
    report = json.loads(out.getvalue())
    assert set(report["pages"]) == {"demo", "sweep", "lab"} and not report["missing"]
    for row in report["pages"].values():
        assert row["cold"]["first_point_s"] > 0 and row["warm"]["first_point_s"] > 0
        assert row["cold"]["bytes"] > 0 and row["warm_to_goal"] > 0
    assert not User.objects.filter(username__startswith="chart-load-").exists()  # its throwaway account is gone


@pytest.mark.django_db
def test_chart_load_says_what_it_lacks_before_opening_a_browser() -> None:
    with pytest.raises(CommandError, match="--times"):
        call_command("chart_load", url="http://127.0.0.1:9", times=0)
    with pytest.raises(CommandError, match="no finished demo sweep"):
        call_command("chart_load", url="http://127.0.0.1:9", times=1)
    with pytest.raises(CommandError, match="--sweep-job 999"):
        call_command("chart_load", url="http://127.0.0.1:9", times=1, sweep_job=999)
    assert not User.objects.filter(username__startswith="chart-load-").exists()
