"""Celery tasks of the bench queue: thin, take an id, call a service."""

from __future__ import annotations

from celery import shared_task

from bench import services

JOB_TIME_LIMIT_S = 3600


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, soft_time_limit=JOB_TIME_LIMIT_S)
def job_run(self, job_id: int) -> str:  # type: ignore[no-untyped-def]
    from bench.models import BenchJob

    try:
        with services.engine_lock(BenchJob.objects.get(pk=job_id).engine_url, hold_s=JOB_TIME_LIMIT_S + 60):
            return str(services.job_execute(job_id=job_id).status)
    except services.EngineBusy:
        raise self.retry(countdown=3) from None  # its turn comes; the page shows its queue position
