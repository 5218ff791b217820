"""A lab run's outcomes without words, stored on the job (``BenchJob.lab_summary``) for the gradebook.

A class's gradebook shows, per learner and lab, the checks passed, the key numbers and the
prediction's error: computing those means reading every checked run's results (tens of
kilobytes of JSON each) and running its checks, which at 30 learners × 6 labs was most of
the page's time. The outcomes are computed once per run and kept: which checks passed and
applied, the key numbers and their intervals, the measured value a prediction is judged by.

They hold no text, so they read the same in any language (a check's words are made when a
page shows them). They carry the version of the code that made them: a hash of the check,
key-number and prediction code, so changing that code recomputes them on next read instead
of showing outcomes by the old rules.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from bench.kinds.checks import Check

ROOT = Path(__file__).resolve().parents[2]
CODE = ("bench/kinds/*.py", "bench/stats.py", "labapp/labs/catalog.py", "labapp/labs/predict.py", __file__)


@functools.cache
def version() -> str:
    """A hash of the code the outcomes come from (checks, key numbers, predictions)."""
    digest = hashlib.sha256()
    for pattern in CODE:
        for path in sorted(ROOT.glob(pattern)) if "*" in pattern else [Path(pattern)]:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def current(summary: Any) -> bool:
    """Whether ``summary`` was made by this code."""
    return isinstance(summary, dict) and summary.get("v") == version()


def of(lab: Any, results: dict[str, Any], checks: list[Check]) -> dict[str, Any]:
    """The outcomes of a finished run of ``lab`` (a ``catalog.Lab``): its results and the checks made of them."""
    return {
        "v": version(),
        "checks": [[check.passed, check.applies] for check in checks],
        "key_numbers": lab.key_numbers(results),
        "key_intervals": lab.key_intervals(results),
        "measured": lab.target.measured(results),
    }


def save(jobs: list[Any]) -> None:
    """Store the jobs' ``lab_summary`` (set on them), in one query however many, touching nothing else."""
    from bench.models import BenchJob

    if jobs:
        BenchJob.objects.bulk_update(jobs, ["lab_summary"])


def checks(summary: dict[str, Any]) -> list[Check]:
    """The stored outcomes as checks without words: enough to count and to tell passed from not."""
    return [Check("", bool(passed), "", "", bool(applies)) for passed, applies in summary.get("checks", [])]
