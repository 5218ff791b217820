"""The class rehearsal at CI's size (`make class` reduced): four learners on the scripted engines.

The whole class server runs as `make class` starts it (PostgreSQL, Redis, Chroma, two engines,
vllm-router, two Daphne processes behind nginx, two Celery workers) in a process of its own, with
its own ports and database; the test asserts only that nothing was lost or broken. Its speed
(makespan against the ideal, waits, Jain's index, TTFT) is printed, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labapp.ops.rehearsal.report import jain
from tests import harness

ROOT = Path(__file__).resolve().parents[2]


def test_jain_index() -> None:
    assert jain([]) is None
    assert jain([0.0, 0.0]) == 1.0
    assert jain([5.0, 5.0, 5.0]) == 1.0
    assert jain([10.0, 0.0]) == 0.5  # one of two learners waited everything


@pytest.mark.integration
def test_reduced_class_loses_nothing() -> None:
    harness.refuse_in_check_tier("the class rehearsal")
    folder = Path(os.environ["LAB_TEST_DATA_DIR"]) / "rehearsal"
    saved = folder / "report.json"
    command = [
        sys.executable, "-m", "labapp.ops.rehearsal", "--scripted", "--learners", "4", "--base-port", "0",
        "--arrive-over-s", "4", "--limit-s", "300", "--data-dir", str(folder), "--json", str(saved),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(done.stdout[-4000:])  # the report, in pytest's output of this test
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(saved.read_text())
    assert "Jain's fairness index" in done.stdout
    assert report["learners"] == {"asked": 4, "signed_up": 4}
    assert report["runs"]["status"] == {"done": 8}, report["runs"]
    assert report["handed_in"] == {"accepted": 8, "saved": 8}
    assert report["lost"]["frames"] == report["lost"]["runs"] == report["lost"]["hand_ins"] == 0, report["lost"]
    assert report["http_5xx"] == 0, report["http_5xx_lines"]
    assert report["chat"]["done"] == report["chat"]["asked"] >= 8
    assert report["jain"] is not None
    assert report["gradebook"]["learners_listed"] == 4
