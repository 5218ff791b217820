"""Celery tasks of the bench queue: thin, take an id, call a service."""

from __future__ import annotations

from celery import shared_task

from bench import jobrun, pools, services
from bench.engine_lock import EngineBusy, engine_lock

# Last resort only: the job itself stops at JOB_TIME_LIMIT_S (results kept) and cuts a hung request off after the grace.
SOFT_TIME_LIMIT_S = jobrun.JOB_TIME_LIMIT_S + jobrun.HARD_LIMIT_GRACE_S + 60
WAIT_S = 3  # how soon a task whose job waits for an engine asks again


# ignore_result: the job's row is its result; without it every .delay() in a web process also
# subscribes to the task's result channel on Redis (pub/sub), a step that once left a request
# waiting for minutes in the class-mode browser test.
@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
    soft_time_limit=SOFT_TIME_LIMIT_S,
    ignore_result=True,
)
def job_run(self, job_id: int) -> str:  # type: ignore[no-untyped-def]
    """Run the head of the job's queue on a free engine (``bench.pools``: perhaps another learner's job,
    whose own task then finds it finished); ask again while this job still waits."""
    from bench.models import BenchJob

    job = BenchJob.objects.filter(pk=job_id).first()
    if job is None:
        return "missing"
    if job.status in jobrun.FINISHED:
        return str(job.status)  # a redelivered task for a finished job does nothing, and waits for no lock
    try:
        if job.status == BenchJob.Status.RUNNING:  # delivered again: its worker was lost, or still runs it
            with engine_lock(job.engine_url) as lease:
                return str(services.job_execute(job_id=job_id, lease=lease).status)
        ran = pools.run_next((job.pool, job.hardware))
    except EngineBusy:  # the engine is measuring, or this job still runs in another worker
        raise self.retry(countdown=WAIT_S) from None  # its turn comes; the page shows its queue position
    if ran is not None and ran.pk == job_id:
        return str(ran.status)
    job.refresh_from_db()
    if job.status in jobrun.FINISHED:
        return str(job.status)  # cancelled while it waited, or no engine of its pool measures
    raise self.retry(countdown=0 if ran is not None else WAIT_S) from None  # another's job ran: try again now
