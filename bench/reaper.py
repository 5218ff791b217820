"""Lost workers: a running job whose beat stopped ``BENCH_STALE_S`` ago goes back to its queue, or fails.

A running job beats (``heartbeat_at``) every few seconds; one silent for longer lost its
worker (killed, or its machine gone). ``jobs_reap_stale`` (run by the job pages, the lab
pages, ``job_create`` and every worker's timer, ``bench.tasks.ReapLostJobs``) puts it back in
its queue, to start over from nothing on the next free engine of its pool, and ``send``s its id
(``bench.services.jobs_reap_stale``: a task for it), so it does not wait for the broker to
deliver the lost worker's task again (Redis gives an unacknowledged task back only after its
visibility timeout, two hours here). A job lost on
its ``MAX_ATTEMPTS``-th start fails with the reason instead, keeping what it measured. The
conditional claim (``bench.jobrun.JobRun.claim``) keeps it from running twice, whichever
delivery comes first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db.models.functions import Coalesce
from django.utils import timezone

from bench.models import BenchJob
from labapp.said import gettext as _  # the reason is saved and said again in each reader's language

MAX_ATTEMPTS = 2  # a job whose worker was lost is started over once; the next loss fails it


def alive(job: BenchJob) -> bool:
    """The job's worker beat less than BENCH_STALE_S ago (or it started that recently)."""
    last = job.heartbeat_at or job.started_at
    return last is not None and timezone.now() - last < timedelta(seconds=settings.BENCH_STALE_S)


def jobs_reap_stale(send: Callable[[int], object] | None = None) -> int:
    """Running jobs whose worker stopped beating BENCH_STALE_S ago: back in their queue (each id to ``send``)
    before their last attempt, else failed (results kept); how many."""
    now = timezone.now()
    stale_s = int(settings.BENCH_STALE_S)
    stale = (
        BenchJob.objects.filter(status=BenchJob.Status.RUNNING)
        .annotate(last_sign=Coalesce("heartbeat_at", "started_at", "created_at"))
        .filter(last_sign__lt=now - timedelta(seconds=stale_s))
        .only("pk", "attempts", "heartbeat_at", "done_requests", "total_requests")
    )
    reaped = 0
    for job in stale:
        # Only if it has not beaten since it was read: a worker that is merely slow keeps its job.
        still = BenchJob.objects.filter(
            pk=job.pk, status=BenchJob.Status.RUNNING, attempts=job.attempts, heartbeat_at=job.heartbeat_at
        )
        if job.attempts < MAX_ATTEMPTS:
            if still.update(status=BenchJob.Status.QUEUED, current_cell=""):  # claim starts it over, saying why
                reaped += 1
                if send is not None:
                    send(job.pk)
            continue
        error = BenchJob.error_fields(
            _(
                "이 작업을 실행하던 워커가 작업 도중 사라졌습니다 (시도 %(attempt)d/%(most)d): %(stale)d초 넘게 "
                "아무 신호가 없었고, 요청 %(total)d개 중 %(done)d개를 마친 뒤였습니다. "
                "이어서 실행되지 않습니다: 다시 실행하세요."
            )
            % {
                "attempt": job.attempts,
                "most": MAX_ATTEMPTS,
                "stale": stale_s,
                "done": job.done_requests,
                "total": job.total_requests,
            }
        )
        reaped += still.update(status=BenchJob.Status.FAILED, **error, finished_at=now, current_cell="")
    return reaped
