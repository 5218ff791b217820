"""Celery tasks of the bench queue: thin, take an id, call a service."""

from __future__ import annotations

import logging
import re
from typing import Any

from celery import bootsteps, shared_task
from django.conf import settings
from django.db import close_old_connections

from bench import jobrun, pools, services
from bench.engine_lock import EngineBusy, engine_lock
from labapp.celery import app
from rag import conversations, keeper

log = logging.getLogger(__name__)

# Last resort only: the job itself stops at JOB_TIME_LIMIT_S (results kept) and cuts a hung request off after the grace.
SOFT_TIME_LIMIT_S = jobrun.JOB_TIME_LIMIT_S + jobrun.HARD_LIMIT_GRACE_S + 60
WAIT_S = 3  # how soon a task asks again when no run of its queue is measuring (engine down, or being taken)


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
    whose own task then finds it finished); ask again while this job still waits.

    A run's end hands its queue on (``hand_on``): the next run starts then, not at its task's next ask.
    So while a run of the queue measures, a waiting task asks only every ``BENCH_WAITING_ASK_S``, a
    fallback; with none measuring (its engines down, or one being taken) every ``WAIT_S``.
    """
    from bench.models import BenchJob

    job = BenchJob.objects.filter(pk=job_id).first()
    if job is None:
        return "missing"
    if job.status in jobrun.FINISHED:
        return str(job.status)  # a redelivered task for a finished job does nothing, and waits for no lock
    queue = (job.pool, job.hardware)
    try:
        if job.status == BenchJob.Status.RUNNING:  # delivered again: its worker was lost, or still runs it
            with engine_lock(job.engine_url) as lease:
                ran: BenchJob | None = services.job_execute(job_id=job_id, lease=lease)
        else:
            ran = pools.run_next(queue)
    except EngineBusy:  # the engine is measuring, or this job still runs in another worker
        raise self.retry(countdown=WAIT_S) from None  # its turn comes; the page shows its queue position
    if ran is not None:
        hand_on(queue)
        if ran.pk == job_id:
            return str(ran.status)
    job.refresh_from_db()
    if job.status in jobrun.FINISHED:
        return str(job.status)  # cancelled while it waited, or no engine of its pool measures
    measuring = pools.measuring_in(queue)
    raise self.retry(countdown=settings.BENCH_WAITING_ASK_S if measuring else WAIT_S) from None


def deliveries_logged(worker_log: str) -> int:
    """How many times a worker was handed a ``job_run`` task, read from its log (Celery logs each delivery,
    a retry included, as "Task <name>[<id>] received" once)."""
    return len(re.findall(rf"Task {re.escape(job_run.name)}\[[^\]]+\] received", worker_log))


def hand_on(queue: pools.Queue) -> None:
    """A run of ``queue`` has ended and freed its engine: the task of the run first in the queue's fair order
    is sent now (that task runs whichever run is first when it comes, and hands on after it in turn)."""
    head = pools.fair_queue(queue)[:1]
    if head:
        job_run.delay(head[0].pk)


class ReapLostJobs(bootsteps.StartStopStep):
    """Every worker looks for lost workers' jobs on a timer, a third of ``BENCH_STALE_S`` apart.

    The pages reap too, but a class whose learners sit on a running job's page while its worker is
    gone would otherwise wait for someone to open another page; and the runs queued behind it wait with it.
    A Celery worker bootstep on the worker's own timer: no beat process to run and keep alive. The
    same timer saves stopped the chat answers a killed web process left streaming (``rag.keeper``).
    """

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.every_s = max(1.0, settings.BENCH_STALE_S / 3)
        self.tref: Any = None
        self.answers_tref: Any = None

    def start(self, parent: Any) -> None:
        self.tref = parent.timer.call_repeatedly(self.every_s, reap_lost_jobs)
        # Answers left streaming by a killed web process, on the same timer, as often as they go stale.
        self.answers_tref = parent.timer.call_repeatedly(keeper.ORPHAN_S / 2, reap_lost_answers)

    def stop(self, parent: Any) -> None:
        for tref in (self.tref, self.answers_tref):
            if tref is not None:
                tref.cancel()


def reap_lost_jobs() -> int:
    """``services.jobs_reap_stale`` from the worker's timer thread; a failure (the database down) waits a tick."""
    try:
        return services.jobs_reap_stale()
    except Exception:  # the timer must keep ticking; the status page names the dead component
        log.warning("the lost-job reaper could not run this time", exc_info=True)
        return 0
    finally:
        close_old_connections()  # the timer thread's own connection, as a request's end would


def reap_lost_answers() -> int:
    """``rag.conversations.answers_orphaned_stop`` from the worker's timer thread, as ``reap_lost_jobs``."""
    try:
        return conversations.answers_orphaned_stop()
    except Exception:
        log.warning("the lost-answer reaper could not run this time", exc_info=True)
        return 0
    finally:
        close_old_connections()


app.steps["worker"].add(ReapLostJobs)
