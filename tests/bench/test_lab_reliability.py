"""The reliability report's table: runs, passed runs, median time and each failed check with examples."""

from __future__ import annotations

from bench.kinds.checks import Check
from labapp.ops.measures.lab_reliability import RunOutcome, table_lines, tally


def _run(lab: int, seconds: float, *failed: tuple[str, str], error: str = "") -> RunOutcome:
    checks = (Check("ok", True, "fine"), *(Check(name, False, message) for name, message in failed))
    return RunOutcome(lab, seconds, () if error else checks, error, load=2.0 + seconds / 100)


def test_it_counts_passed_runs_failed_checks_and_the_median_time_per_lab() -> None:
    outcomes = [
        _run(4, 60.0),
        _run(4, 80.0, ("TTFT rises", "500: -0.21 ms/tok")),
        _run(4, 70.0, ("TTFT rises", "200: -0.05 ms/tok"), ("TPOT flat", "1.73")),
        _run(4, 90.0, ("TTFT rises", "500: -0.21 ms/tok")),
        _run(1, 100.0, error="EngineUnavailable: down"),
        _run(1, 120.0),
    ]
    rows = {row.lab: row for row in tally(outcomes)}
    assert [row.lab for row in tally(outcomes)] == [4, 1]  # the labs in the order they ran
    lab4 = rows[4]
    assert (lab4.runs, lab4.passed, lab4.median_s) == (4, 1, 75.0)
    assert lab4.failures == {
        "TTFT rises": ["500: -0.21 ms/tok", "200: -0.05 ms/tok", "500: -0.21 ms/tok"],
        "TPOT flat": ["1.73"],
    }
    assert (rows[1].runs, rows[1].passed, rows[1].failures) == (2, 1, {"error": ["EngineUnavailable: down"]})

    lines = table_lines(tally(outcomes))
    assert lines[0].split() == ["lab", "runs", "passed", "median", "s", "load"]
    assert lines[1].split() == ["4", "4", "1", "75", "2.8"]
    # The most frequent failure first, its distinct examples once each.
    assert lines[2].strip() == "failed 3x TTFT rises: 500: -0.21 ms/tok | 200: -0.05 ms/tok"
    assert lines[3].strip() == "failed 1x TPOT flat: 1.73"
    assert lines[4].split() == ["1", "2", "1", "110", "3.1"]
    assert lines[5].strip() == "failed 1x error: EngineUnavailable: down"


def test_a_run_without_checks_did_not_pass() -> None:
    assert not RunOutcome(2, 1.0).passed
    assert RunOutcome(2, 1.0, (Check("a", True, ""),)).passed
