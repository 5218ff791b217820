"""The labs: their pages and run buttons, and a learner's status in each.

A lab is declared once, by the job kind that serves it (``bench.kinds.labs.Lab``: its number,
chapter section, title, run settings, panels, checks, key numbers, minimum settings and
prediction target: pure functions of ``BenchJob.results`` and ``BenchJob.config``). ``LABS``
reads the registered kinds each time it is asked, so the lab page, the gradebook and the tests
agree on what "passed" means, and a kind registered later (a test's) is a lab at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.translation import gettext_lazy as _

from bench.kinds import registry
from bench.kinds.checks import Check, all_passed
from bench.kinds.labs import Lab as DeclaredLab
from bench.kinds.labs import Target
from bench.kinds.registry import JobKind
from labapp import said
from labapp.labs import outcomes

__all__ = ["LABS", "Check", "Lab", "LabState", "Status", "state_for", "states_for"]

Results = dict[str, Any]


@dataclass(frozen=True)
class Lab:
    """A lab page: the lab declared by the registered kind that serves it (``bench.kinds``)."""

    kind: JobKind

    @property
    def declared(self) -> DeclaredLab:
        if self.kind.lab is None:
            raise LookupError(f"the job kind {self.kind.name!r} serves no lab")
        return self.kind.lab

    @property
    def number(self) -> int:
        return self.declared.number

    @property
    def slug(self) -> str:
        """The chapter section with the lab's prose."""
        return self.declared.slug

    @property
    def title(self) -> Any:
        return self.declared.title

    @property
    def config(self) -> dict[str, Any]:
        """The run button's settings (the job form has all)."""
        return self.declared.config

    @property
    def engine_panels(self) -> tuple[str, ...]:
        """The engine timeline's panels that explain this lab, under its requests (``bench.charts.ENGINE_PANELS``)."""
        return self.declared.engine_panels

    @property
    def notice(self) -> str:
        """A template shown above the run button ("" for none)."""
        return self.declared.notice

    @property
    def target(self) -> Target:
        """What the learner predicts before a run."""
        return self.declared.target

    @property
    def job_kind(self) -> str:
        return self.kind.name

    @property
    def job_kind_label(self) -> Any:
        """The kind's name as a reader sees it (translated), e.g. "속도 측정 (실습 1)"."""
        return self.kind.label

    @property
    def keys(self) -> tuple[tuple[str, str], ...]:
        """(stored key, dotted path into the job's results) of the key numbers."""
        return self.declared.paths

    @property
    def minimums(self) -> Any:
        """The lab's minimum settings in words (shown on its page)."""
        return self.declared.minimums

    def checks(self, results: Results, config: dict[str, Any]) -> list[Check]:
        """The checks of a finished job: its results and its saved settings (``BenchJob.config``)."""
        return self.kind.lab_checks(results, config)

    def missing(self, results: Results, config: dict[str, Any]) -> list[str]:
        """What a job lacks of the lab's minimum settings (empty: enough to hand in)."""
        return self.kind.lab_missing(results, config)

    def key_numbers(self, results: Results) -> dict[str, Any]:
        return self.declared.key_numbers(results)

    def key_intervals(self, results: Results) -> dict[str, list[float]]:
        return self.declared.key_intervals(results)

    def run_config(self) -> dict[str, Any]:
        """The run button's raw settings: the declaration's, with ``settings.LAB_RUN_SETTINGS`` laid over
        (the test harness's processes run each lab at its smallest real run)."""
        return dict(self.config) | dict(settings.LAB_RUN_SETTINGS.get(self.number, {}))

    def run_settings(self) -> Any:
        """The typed settings of the run button (None if they no longer read)."""
        return self.kind.saved_config(self.run_config())


class _Labs(Mapping[int, Lab]):
    """lab number → ``Lab`` of every registered kind that serves one, in the labs' order, read from the
    registry at each use (nothing cached: registering or removing a kind adds or removes its lab)."""

    def __getitem__(self, number: int) -> Lab:
        kind = registry.for_lab(number) if isinstance(number, int) else None
        if kind is None:
            raise KeyError(number)
        return Lab(kind)

    def __iter__(self) -> Iterator[int]:
        return iter([lab.number for _kind, lab in registry.labs()])

    def __len__(self) -> int:
        return len(registry.labs())


LABS: Mapping[int, Lab] = _Labs()


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
    """A check kept in a hand-in (``Check.as_dict``), its texts in the reader's language (``labapp.said``;
    older hand-ins kept plain strings, and lack ``advice``)."""
    return Check(
        said.render(stored.get("name", "")),
        bool(stored.get("passed")),
        said.render(stored.get("message", "")),
        said.render(stored.get("advice", "") or ""),
        bool(stored.get("applies", True)),
    )


# provenance: small (a few hundred bytes), and the lab page shows the checked run's.
JOB_FIELDS = (
    "pk",
    "owner_id",
    "kind",
    "lab",
    "status",
    "config",
    "prediction",
    "engine_url",
    "lab_summary",
    "provenance",
)
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
    user_ids: Iterable[int], labs: Iterable[int] | None = None, *, words: bool = True
) -> dict[tuple[int, int], LabState]:
    """Every (user, lab) state in a few queries, however many learners (the gradebook's need); ``labs``:
    the lab numbers (None: every lab).

    ``words=False`` (the gradebook): the states stand on each run's stored outcomes, read
    without its results; their checks count and pass but have no names or messages.
    """
    from labapp.models import LabSubmission

    ids, numbers = list(user_ids), list(LABS if labs is None else labs)
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
