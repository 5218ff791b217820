from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.choices import BaseChoiceIterator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from labapp import addresses, said

if TYPE_CHECKING:
    from bench.kinds.registry import JobKind


class KindChoices(BaseChoiceIterator):
    """``BenchJob.kind``'s choices: the registry's kinds (``bench.kinds``), read each time they are used.

    Not a callable, which Django would write into a migration by its path: this compares
    equal to the list a migration holds while the kinds and their labels are the same,
    so ``makemigrations`` sees a change only when they differ, and then writes the list.
    """

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        from bench.kinds import registry

        yield from registry.choices()


DEFAULT_POOL = "default"  # the configured engine's pool, and every engine's unless registered in another


class BenchJob(said.KeepsError, models.Model):
    """A benchmark job: the database row is the source of truth for its state and results."""

    error_form_field = "error_text"

    class Status(models.TextChoices):
        QUEUED = "queued", _("대기 중")
        RUNNING = "running", _("실행 중")
        DONE = "done", _("완료")
        FAILED = "failed", _("실패")
        CANCELLED = "cancelled", _("취소됨")

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="bench_jobs")
    kind = models.CharField(max_length=16, choices=KindChoices())  # a name in the registry of job kinds
    config = models.JSONField(default=dict)
    # The engine that measured it (bench.pools): while it waits, the engine it was asked for.
    engine_url = models.CharField(max_length=300)
    # Where it waits (bench.pools): the pool and hardware label of the engine it was asked for; a job
    # not ``pinned`` runs on the first free measuring engine of that pool with that hardware.
    pool = models.CharField(max_length=50, default=DEFAULT_POOL)
    hardware = models.CharField(max_length=200, blank=True)
    pinned = models.BooleanField(default=True)  # runs on engine_url only
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    done_requests = models.PositiveIntegerField(default=0)
    total_requests = models.PositiveIntegerField(default=0)
    current_cell = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Saved through ``error_fields`` and read through ``error_shown`` (``labapp.said.KeepsError``): the
    # error as the site says it (logs), and its form to say it in each reader's language ({}: none).
    error = models.TextField(blank=True)
    error_text = models.JSONField(default=dict, blank=True)
    results = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the running worker's last sign of life
    finished_at = models.DateTimeField(null=True, blank=True)
    # The lab whose page's run button made this job (null: made on the benchmark pages); only
    # such runs count for the lab's status, so a /bench/ job never passes a lab.
    lab = models.PositiveSmallIntegerField(null=True, blank=True)
    # The learner's prediction made with the run, set only by the lab's run form:
    # {"value": float, "unit": str, "what": str, "made_at": ISO time} (null: none made).
    prediction = models.JSONField(null=True, blank=True)
    # A lab run's outcomes without words, kept so that a class's gradebook need not read every
    # run's results (labapp.labs.outcomes): {"v": code version, "checks": [[passed, applies]],
    # "key_numbers", "key_intervals", "measured"}; {} until first read, stale after a code change.
    lab_summary = models.JSONField(default=dict, blank=True)
    # Where its numbers came from, read from the engine when the run started (``bench.provenance``):
    # the engine, its settings and this project's version; {} until a run has started.
    provenance = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "lab"], name="benchjob_owner_lab"),
            models.Index(fields=["status", "pool", "hardware"], name="benchjob_queue"),
        ]

    @property
    def progress_percent(self) -> int:
        return round(100 * self.done_requests / self.total_requests) if self.total_requests else 0

    @property
    def kind_spec(self) -> JobKind | None:
        """The registered kind of the job (None for a kind no longer registered)."""
        from bench.kinds import registry

        return registry.find(self.kind)

    @property
    def kind_shown(self) -> str:
        """What the pages call the job: its kind's label, or the kind's title for it (an imported run
        names its tool), in the reader's language."""
        spec = self.kind_spec
        return spec.title(self.results or {}) if spec is not None else str(self.get_kind_display())

    @property
    def runnable(self) -> bool:
        """Whether the job's kind is one that runs (an imported run is not: it has no engine or progress)."""
        spec = self.kind_spec
        return spec is None or spec.runnable

    @property
    def deletable(self) -> bool:
        """Whether its kind lets the owner delete it (an imported run; a run measured here is kept)."""
        spec = self.kind_spec
        return spec is not None and spec.deletable

    @property
    def provenance_rows(self) -> list[Any]:
        """Where its numbers came from, each field as a page shows it (``bench.provenance``); [] when not read."""
        from bench import provenance

        return provenance.shown_rows(self.provenance) if self.provenance else []

    @property
    def active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def disturbed_cells(self) -> list[tuple[str, float]]:
        """(cell name, most requests beyond its own) of each cell measured while other traffic ran on the engine."""
        spec = self.kind_spec
        return spec.disturbed(self.results or {}) if spec is not None else []

    @classmethod
    def fail_waiting(cls, queue: tuple[str, str], error: dict[str, Any], **only: Any) -> int:
        """The waiting jobs of ``queue`` (pool, hardware), those of them matching ``only``, failed at once with
        ``error`` (``error_fields``); how many. For a queue that can never run them (``bench.pools.strand``)
        or whose engines stayed down too long (``bench.outages``)."""
        pool, hardware = queue
        waiting = cls.objects.filter(status=cls.Status.QUEUED, pool=pool, hardware=hardware, **only)
        return waiting.update(status=cls.Status.FAILED, finished_at=timezone.now(), **error)

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"


class Engine(models.Model):
    """A vLLM endpoint registered by an admin or instructor; learners pick one for their runs.

    The configured engine (VLLM_BASE_URL) is always there without a row, in the default pool
    with both roles. Which engine runs which job, and where the chat goes: ``bench.pools``.
    """

    class Role(models.TextChoices):
        MEASURE = "measure", pgettext_lazy("엔진 역할", "측정")  # lab runs and benchmark jobs, one at a time
        CHAT = "chat", pgettext_lazy("엔진 역할", "채팅")  # shared by the chat, never measured on
        BOTH = "both", pgettext_lazy("엔진 역할", "측정과 채팅")

    name = models.CharField(_("이름"), max_length=100, unique=True)
    base_url = models.CharField(_("주소"), max_length=300, unique=True)
    model = models.CharField(_("모델"), max_length=200, blank=True)  # empty: the first model it serves
    hardware = models.CharField(_("하드웨어"), max_length=200, blank=True)  # e.g. "H200", "2-core CPU"
    pool = models.CharField(_("풀"), max_length=50, default=DEFAULT_POOL)
    role = models.CharField(_("역할"), max_length=8, choices=Role.choices, default=Role.BOTH)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("등록한 사람"), null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(_("등록한 때"), auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("엔진")
        verbose_name_plural = pgettext_lazy("여럿", "엔진")

    def __str__(self) -> str:
        return f"{self.name} ({addresses.shown(self.base_url)})"  # the admin's history and messages show it
