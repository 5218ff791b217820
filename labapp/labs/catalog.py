"""The six labs: their pages and run buttons, and a learner's status in each.

Which job a lab runs, its auto-checks, key numbers and minimum settings belong to the
job kind that serves it (``bench.kinds``: pure functions of ``BenchJob.results`` and
``BenchJob.config``), so the lab page, the gradebook and the tests agree on what
"passed" means.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext_lazy as _

from bench.kinds import registry
from bench.kinds.checks import Check, all_passed
from bench.kinds.registry import JobKind, LabChecks
from labapp.labs import outcomes

__all__ = ["LABS", "Check", "Lab", "LabState", "Status", "state_for", "states_for"]

Results = dict[str, Any]


@dataclass(frozen=True)
class Lab:
    """A lab page: its chapter section, title and run button's settings; its job kind, checks and key
    numbers are those of the registered kind that serves it (``bench.kinds``)."""

    number: int
    slug: str  # the chapter section with the lab's prose
    title: Any
    config: dict[str, Any] = field(default_factory=dict)  # the run button's settings (the job form has all)
    # The engine timeline's panels that explain this lab, under its requests (``bench.charts.ENGINE_PANELS``).
    engine_panels: tuple[str, ...] = ()

    def _served(self) -> tuple[JobKind, LabChecks]:
        kind = registry.for_lab(self.number)
        if kind is None or kind.lab is None:
            raise LookupError(f"no job kind serves lab {self.number}")
        return kind, kind.lab

    @property
    def job_kind(self) -> str:
        return self._served()[0].name

    @property
    def job_kind_label(self) -> Any:
        """The kind's name as a reader sees it (translated), e.g. "속도 측정 (실습 1)"."""
        return self._served()[0].label

    @property
    def keys(self) -> tuple[tuple[str, str], ...]:
        """(label, dotted path into the job's results) of the key numbers."""
        return self._served()[1].keys

    @property
    def minimums(self) -> Any:
        """The lab's minimum settings in words (shown on its page)."""
        return self._served()[1].minimums

    def checks(self, results: Results, config: dict[str, Any]) -> list[Check]:
        """The checks of a finished job: its results and its saved settings (``BenchJob.config``)."""
        return self._served()[0].lab_checks(results, config)

    def missing(self, results: Results, config: dict[str, Any]) -> list[str]:
        """What a job lacks of the lab's minimum settings (empty: enough to hand in)."""
        return self._served()[0].lab_missing(results, config)

    def key_numbers(self, results: Results) -> dict[str, Any]:
        return self._served()[1].key_numbers(results)

    def key_intervals(self, results: Results) -> dict[str, list[float]]:
        return self._served()[1].key_intervals(results)


LABS: dict[int, Lab] = {
    lab.number: lab
    for lab in (
        Lab(1, "lab1-speed", _("실습 1 — 프리필·디코드 속도 재기")),
        Lab(2, "lab2-length-sweep", _("실습 2 — 길이 스윕")),
        Lab(3, "lab3-load", _("실습 3 — 부하 아래의 서빙"), engine_panels=("requests", "cache")),
        Lab(4, "lab4-rag-retrieval", _("실습 4 — 검색 크기와 지연")),
        Lab(5, "lab5-prefix-caching", _("실습 5 — 프리픽스 캐싱"), engine_panels=("cache",)),
        Lab(6, "lab6-short-answers", _("실습 6 — 짧게 답하게 하기")),
    )
}


class Status:
    NOT_STARTED = "not_started"
    IN_PROGRESS = "in_progress"
    PASSED = "passed"
    SUBMITTED = "submitted"

    LABELS = {
        NOT_STARTED: _("시작 전"),
        IN_PROGRESS: _("진행 중"),
        PASSED: _("확인 통과"),
        SUBMITTED: _("제출함"),
    }


@dataclass
class LabState:
    """A learner's state in one lab, from the runs made for it on its page (``BenchJob.lab``).

    Two jobs may be in view: ``checked_job``, the latest finished run (what a hand-in now would
    stand on), and the hand-in's own job. Each number shown comes from the job it names:
    ``checks`` and ``key_numbers`` are the latest run's, ``shown_*`` the hand-in's when there is one.
    """

    lab: Lab
    status: str = Status.NOT_STARTED
    job: Any = None  # the latest run of the lab (any status)
    checked_job: Any = None  # the latest finished run, whose checks are shown
    checks: list[Check] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # what the checked job lacks of the lab's minimum settings
    submission: Any = None
    # The checked job's outcomes without words (labapp.labs.outcomes): a gradebook's states stand on
    # these alone, and then ``checks`` have no names or messages (``states_for(..., words=False)``).
    summary: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return all_passed(self.checks)

    @property
    def status_label(self) -> Any:
        return Status.LABELS[self.status]

    @property
    def key_numbers(self) -> dict[str, Any]:
        """The latest finished run's key numbers."""
        if self.summary is not None:
            return dict(self.summary.get("key_numbers") or {})
        return self.lab.key_numbers(self.checked_job.results or {}) if self.checked_job else {}

    @property
    def key_intervals(self) -> dict[str, list[float]]:
        """The 95 % intervals of the latest run's key numbers that have one (by the same labels)."""
        if self.summary is not None:
            return dict(self.summary.get("key_intervals") or {})
        return self.lab.key_intervals(self.checked_job.results or {}) if self.checked_job else {}

    @property
    def shown_job(self) -> Any:
        """The job the summary stands on: the hand-in's (None if it was deleted), else the latest finished run."""
        return self.submission.job if self.submission is not None else self.checked_job

    @property
    def shown_checks(self) -> list[Check]:
        """The checks as graded: those stored with the hand-in, else the latest finished run's."""
        if self.submission is None:
            return self.checks
        return [stored_check(c) for c in self.submission.checks or [] if isinstance(c, dict)]

    @property
    def shown_numbers(self) -> dict[str, Any]:
        """The key numbers as graded: those stored with the hand-in, else the latest finished run's."""
        return dict(self.submission.key_numbers or {}) if self.submission is not None else self.key_numbers

    @property
    def newer_run(self) -> bool:
        """A run finished after the hand-in's job (the lab page shows both, each named)."""
        shown = self.shown_job
        return self.submission is not None and self.checked_job is not None and self.checked_job != shown


def stored_check(stored: dict[str, Any]) -> Check:
    """A check kept in a hand-in (``Check.as_dict``; older ones lack ``advice``)."""
    return Check(
        str(stored.get("name", "")),
        bool(stored.get("passed")),
        str(stored.get("message", "")),
        str(stored.get("advice", "") or ""),
        bool(stored.get("applies", True)),
    )


JOB_FIELDS = ("pk", "owner_id", "kind", "lab", "status", "config", "prediction", "engine_url", "lab_summary")
JOB_TIMES = ("created_at", "started_at", "finished_at", "done_requests", "total_requests")


def _runs(
    ids: list[int], numbers: list[int], *, words: bool = True
) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], Any]]:
    """(latest run, latest finished run) per (user, lab): only jobs made for the lab from its page.

    Every run's row is read but no run's results: a learner may have made many runs, and only
    the latest finished one per lab is checked (results are tens of kilobytes of JSON each).
    Without ``words`` even those are read only where the stored outcomes are missing or stale.
    """
    from bench.models import BenchJob

    kinds = {n: LABS[n].job_kind for n in numbers}
    latest: dict[tuple[int, int], Any] = {}
    finished: dict[tuple[int, int], Any] = {}
    jobs = BenchJob.objects.filter(owner_id__in=ids, lab__in=numbers).order_by("owner_id", "lab", "-pk")
    for job in jobs.only(*JOB_FIELDS, *JOB_TIMES):
        number = job.lab
        if number is None or kinds.get(number) != job.kind:
            continue  # a lab whose kind changed since: the run no longer answers it
        key = (job.owner_id, number)
        latest.setdefault(key, job)
        if job.status == BenchJob.Status.DONE:
            finished.setdefault(key, job)
    wanted = [j.pk for j in finished.values() if words or not outcomes.current(j.lab_summary)]
    results = dict(BenchJob.objects.filter(pk__in=wanted).values_list("pk", "results")) if wanted else {}
    for job in {*latest.values(), *finished.values()}:
        if job.pk in results:
            job.results = results[job.pk]  # the same object may be both the latest and the latest finished
    return latest, finished


def _checked(state: LabState, *, words: bool, stale: list[Any]) -> None:
    """The checked job's checks: without ``words`` from its stored outcomes when they are current, else
    computed from its results (and, without ``words``, its outcomes made and the job added to ``stale``)."""
    job = state.checked_job
    if not words and outcomes.current(job.lab_summary):
        state.summary = job.lab_summary
        state.checks = outcomes.checks(job.lab_summary)
        return
    results, config = job.results or {}, job.config or {}
    state.checks = state.lab.checks(results, config)
    state.missing = state.lab.missing(results, config)
    if not words:  # the gradebook: keep the outcomes, the next read needs no results
        job.lab_summary = outcomes.of(state.lab, results, state.checks)
        stale.append(job)
        state.summary = job.lab_summary


def states_for(
    user_ids: Iterable[int], labs: Iterable[int] = tuple(LABS), *, words: bool = True
) -> dict[tuple[int, int], LabState]:
    """Every (user, lab) state in a few queries, however many learners (the gradebook's need).

    ``words=False`` (the gradebook): the states stand on each run's stored outcomes, read
    without its results; their checks count and pass but have no names or messages.
    """
    from labapp.models import LabSubmission

    ids, numbers = list(user_ids), list(labs)
    latest, finished = _runs(ids, numbers, words=words)
    handed_in = LabSubmission.objects.filter(user_id__in=ids, lab__in=numbers).select_related("job")
    handed_in = handed_in.defer("job__results")  # its checks and numbers are stored with it
    submissions = {(s.user_id, s.lab): s for s in handed_in}
    states = {}
    stale: list[Any] = []
    for user_id in ids:
        for number in numbers:
            key = (user_id, number)
            state = LabState(LABS[number], job=latest.get(key), checked_job=finished.get(key))
            state.submission = submissions.get(key)
            if state.checked_job is not None:
                _checked(state, words=words, stale=stale)
            if state.submission is not None:
                state.status = Status.SUBMITTED
            elif state.passed:
                state.status = Status.PASSED
            elif state.job is not None:
                state.status = Status.IN_PROGRESS
            states[key] = state
    outcomes.save(stale)
    return states


def state_for(user_id: int, number: int) -> LabState:
    return states_for([user_id], [number])[(user_id, number)]
