"""Reads of a class: the gradebook (learners × labs), its CSV, one learner's work.

The gradebook's queries do not grow with the number of learners: one for the
learners, one for the assignments and ``labs.states_for``'s batch for every state.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.translation import gettext as _

from labapp.access import learners_of
from labapp.csvcells import csv_safe
from labapp.labs import outcomes
from labapp.labs.catalog import LABS, Lab, LabState, states_for
from labapp.labs.predict import Comparison, compare
from labapp.models import Assignment, Classroom


@dataclass(frozen=True)
class Cell:
    state: LabState
    assignment: Assignment | None
    checks_passed: int
    checks_total: int
    late: bool
    overdue: bool  # not handed in and the due date has passed

    @property
    def key_numbers(self) -> dict[str, Any]:
        """The hand-in's numbers when there is one (what was graded), else the latest finished run's."""
        return self.state.shown_numbers

    @property
    def job(self) -> Any:
        """The job those numbers and checks come from (None: none yet, or the hand-in's job was deleted)."""
        return self.state.shown_job

    @property
    def comparison(self) -> Comparison | None:
        """The learner's prediction made with that job, beside what it measured (from the job's stored
        outcomes when they are current: the gradebook reads no results)."""
        job = self.job
        if job is None:
            return None
        checked = self.state.checked_job
        stored = self.state.summary if checked is not None and checked.pk == job.pk else None
        if stored is None and outcomes.current(job.__dict__.get("lab_summary")):
            stored = job.lab_summary  # a hand-in's job read with its outcomes (not its results)
        return compare(job, stored=stored)


@dataclass(frozen=True)
class Row:
    learner: User
    cells: list[Cell]


@dataclass(frozen=True)
class Gradebook:
    classroom: Classroom
    labs: list[Lab]
    assignments: dict[int, Assignment]
    rows: list[Row]

    @property
    def nothing_assigned(self) -> bool:
        return not self.assignments


def _checks(state: LabState) -> tuple[int, int]:
    """Checks of the hand-in when there is one (what was graded), else of the latest finished run."""
    shown = state.shown_checks
    counted = [c for c in shown if c.applies]
    return sum(c.passed for c in counted), len(counted)


def gradebook(classroom: Classroom) -> Gradebook:
    learners = list(learners_of(classroom).only("pk", "username", "email", "first_name", "last_name"))
    assignments = {a.lab: a for a in Assignment.objects.filter(classroom=classroom) if a.lab in LABS}
    numbers = sorted(assignments) or list(LABS)  # nothing assigned yet: every lab
    states = states_for([u.pk for u in learners], numbers, words=False)  # counts and numbers, no check's words
    now = timezone.now()
    rows = []
    for learner in learners:
        cells = []
        for number in numbers:
            state = states[(learner.pk, number)]
            assignment = assignments.get(number)
            passed, total = _checks(state)
            submitted = state.submission is not None
            cells.append(
                Cell(
                    state=state,
                    assignment=assignment,
                    checks_passed=passed,
                    checks_total=total,
                    late=submitted and bool(state.submission.late),
                    overdue=not submitted and assignment is not None and assignment.due_at < now,
                )
            )
        rows.append(Row(learner, cells))
    return Gradebook(classroom, [LABS[n] for n in numbers], assignments, rows)


def _prediction_columns(cell: Cell) -> list[Any]:
    """The shown job's id, the prediction made with it, what it measured and the error in % (blank: none)."""
    found = cell.comparison
    error = found.error_pct if found is not None else None
    return [
        cell.job.pk if cell.job is not None else "",
        found.predicted if found is not None else "",
        found.measured if found is not None and found.measured is not None else "",
        round(error, 1) if error is not None else "",
    ]


def gradebook_csv(book: Gradebook) -> str:
    header: list[Any] = ["username", "email"]
    for lab in book.labs:
        prefix = f"lab{lab.number}"
        header += [f"{prefix} status", f"{prefix} checks", f"{prefix} late", f"{prefix} submitted_at"]
        header += [f"{prefix} {key}" for key, _path in lab.keys]
        header += [f"{prefix} job", f"{prefix} prediction", f"{prefix} measured", f"{prefix} prediction error %"]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([csv_safe(h) for h in header])
    for row in book.rows:
        line: list[Any] = [row.learner.username, row.learner.email]
        for cell in row.cells:
            submission = cell.state.submission
            submitted_at = timezone.localtime(submission.submitted_at).isoformat() if submission else ""
            late = _("늦음") if cell.late else (_("마감 지남") if cell.overdue else "")
            line += [str(cell.state.status_label), f"{cell.checks_passed}/{cell.checks_total}", late, submitted_at]
            numbers = cell.key_numbers
            line += [numbers.get(key) for key, _path in cell.state.lab.keys]
            line += _prediction_columns(cell)
        writer.writerow([csv_safe(value) for value in line])
    return out.getvalue()


@dataclass(frozen=True)
class LearnerWork:
    learner: User
    states: list[LabState]
    jobs: list[Any]
    answers: list[Any]

    @property
    def submitted(self) -> list[LabState]:
        return [s for s in self.states if s.submission is not None]


def learner_work(learner: User, *, limit: int = 50) -> LearnerWork:
    from bench.models import BenchJob
    from rag.models import Answer

    states = states_for([learner.pk])
    jobs = list(BenchJob.objects.filter(owner=learner).defer("results", "config").order_by("-pk")[:limit])
    answers = list(
        Answer.objects.filter(conversation__owner=learner)
        .select_related("conversation")
        .defer("prompt", "sources")
        .order_by("-created_at", "-pk")[:limit]
    )
    return LearnerWork(learner, [states[(learner.pk, n)] for n in LABS], jobs, answers)
