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

from bench.kinds.registry import key_label
from labapp.access import learners_of
from labapp.csvcells import csv_safe
from labapp.labs import outcomes
from labapp.labs.catalog import LABS, Lab, LabState, states_for
from labapp.labs.predict import Comparison, compare
from labapp.models import Assignment, Classroom
from labapp.templatetags.classroom import rounded


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
    """The shown job's id, the prediction made with it, what it measured and the error in % (blank: none),
    rounded as the gradebook shows them."""
    found = cell.comparison
    error = found.error_pct if found is not None else None
    return [
        cell.job.pk if cell.job is not None else None,
        rounded(found.predicted) if found is not None else None,
        rounded(found.measured) if found is not None else None,
        round(error, 1) if error is not None else None,
    ]


def _lab_header(lab: Lab) -> list[str]:
    """A lab's columns, in the reader's language: "실습 1: 상태" …, its key numbers by their labels."""
    unit = f" ({lab.target.unit})" if lab.target.unit else ""
    zone = timezone.get_current_timezone_name()
    columns = [_("상태"), _("확인"), _("기한"), _("제출 시각 (%(zone)s)") % {"zone": zone}]
    columns += [key_label(key) for key, _path in lab.keys]
    columns += [_("작업"), _("예측") + unit, _("측정") + unit, _("예측 오차 (%)"), _("제출한 생각")]
    return [_("실습 %(number)d: %(column)s") % {"number": lab.number, "column": column} for column in columns]


def _lab_columns(cell: Cell) -> list[Any]:
    """One learner's cells of one lab, in the gradebook's words and rounding (None: an empty cell)."""
    submission = cell.state.submission
    submitted_at = timezone.localtime(submission.submitted_at).strftime("%Y-%m-%d %H:%M") if submission else None
    late = _("늦음") if cell.late else (_("마감 지남") if cell.overdue else None)
    checks = f"{cell.checks_passed}/{cell.checks_total}" if cell.checks_total else None  # the page shows none
    line = [str(cell.state.status_label), checks, late, submitted_at]
    line += [rounded(cell.key_numbers.get(key)) for key, _path in cell.state.lab.keys]
    return line + _prediction_columns(cell) + [submission.reflection if submission else None]


def gradebook_csv(book: Gradebook) -> str:
    """The gradebook as a spreadsheet reads it, in the reader's language (docs/instructors.md): the page's
    words for states and stored words, numbers rounded as the page shows them, and the reflections."""
    header: list[Any] = [_("학습자"), _("이메일")]
    for lab in book.labs:
        header += _lab_header(lab)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([csv_safe(h) for h in header])
    for row in book.rows:
        line: list[Any] = [row.learner.username, row.learner.email]
        for cell in row.cells:
            line += _lab_columns(cell)
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
