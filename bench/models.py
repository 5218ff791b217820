from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class BenchJob(models.Model):
    """A benchmark job: the database row is the source of truth for its state and results."""

    class Kind(models.TextChoices):
        SPEED = "speed", _("속도 측정 (실습 1)")
        SWEEP = "sweep", _("길이 스윕 (실습 2)")
        LOAD = "load", _("부하 스윕 (실습 3)")
        RETRIEVAL = "retrieval", _("검색 크기 스윕 (실습 4)")
        PREFIX = "prefix", _("프리픽스 캐시 콜드/웜 (실습 5)")
        SHORT = "short", _("짧은 답변 대 보통 답변 (실습 6)")

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="bench_jobs")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    config = models.JSONField(default=dict)
    engine_url = models.CharField(max_length=300)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    done_requests = models.PositiveIntegerField(default=0)
    total_requests = models.PositiveIntegerField(default=0)
    current_cell = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the running worker's last sign of life
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    @property
    def progress_percent(self) -> int:
        return round(100 * self.done_requests / self.total_requests) if self.total_requests else 0

    @property
    def active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"


class Engine(models.Model):
    """A vLLM endpoint registered by an admin or instructor; learners pick one for their runs.

    The configured engine (VLLM_BASE_URL) is always there without a row.
    """

    name = models.CharField(max_length=100, unique=True)
    base_url = models.CharField(max_length=300, unique=True)
    model = models.CharField(max_length=200, blank=True)  # empty: the first model it serves
    hardware = models.CharField(max_length=200, blank=True)  # e.g. "H200", "2-core CPU"
    added_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.base_url})"
