"""Writes of benchmark jobs: create (row first, task after commit), cancel, execute, reap.

Faults: a running job beats (``heartbeat_at``, and the engine lock's expiry pushed
back) every few seconds; a job whose beat stops for ``BENCH_STALE_S`` lost its
worker and is marked failed by ``jobs_reap_stale``. A redelivered task for a
finished job does nothing; one for a job whose worker was lost starts it over, at
most ``MAX_ATTEMPTS`` times in all.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext as _

from bench import jobs
from bench.models import BenchJob
from rag.vllm import client as vllm_client

if TYPE_CHECKING:
    from redis.lock import Lock

logger = logging.getLogger(__name__)

FINISHED = (BenchJob.Status.DONE, BenchJob.Status.FAILED, BenchJob.Status.CANCELLED)
ENGINE_LOCK_S = 60  # a killed worker's engine lock frees itself within a minute; a live job's beat renews it
HEARTBEAT_S = 10.0  # at most; a third of BENCH_STALE_S when that is shorter
MAX_ATTEMPTS = 2  # a job whose worker was lost is started over once; the next delivery fails it
JOB_TIME_LIMIT_S = 3600  # after this a job stops after its current request (results kept) and fails
HARD_LIMIT_GRACE_S = 120  # then, if a request hangs, the measurement is cut off


class EngineBusy(RuntimeError):
    """Another job is measuring the same engine; this one waits its turn."""


class JobAlive(EngineBusy):
    """The job is running in another worker that still beats: this delivery waits (and then finds it finished)."""


def heartbeat_interval() -> float:
    return min(HEARTBEAT_S, settings.BENCH_STALE_S / 3)


def job_create(
    *, owner: AbstractBaseUser, kind: str, config: dict[str, Any], engine_url: str | None = None
) -> BenchJob:
    """A job on ``engine_url`` (the learner's chosen engine; default the configured one)."""
    from bench import tasks

    jobs_reap_stale()  # a lost worker's job does not hold the queue up in front of the new one
    seeded = config | {"seed": random.SystemRandom().randrange(1, 1 << 30)}  # fresh prompts: no cache hits
    with transaction.atomic():
        job = BenchJob.objects.create(
            owner_id=owner.pk,
            kind=kind,
            config=seeded,
            engine_url=engine_url or vllm_client.base_url(),
            total_requests=job_config(kind, seeded).total_requests,
        )
        transaction.on_commit(lambda: tasks.job_run.delay(job.pk))
    return job


class JobsBusy(Exception):
    """The owner already has BENCH_MAX_ACTIVE_JOBS_PER_USER jobs queued or running; nothing was made."""

    def __init__(self, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(
            _(
                "바쁩니다: 먼저 낸 작업 %(most)d개가 아직 대기 중이거나 실행 중입니다. "
                "먼저 낸 작업이 끝나면 다시 내세요 (%(s)d초 뒤 다시 시도)."
            )
            % {"most": settings.BENCH_MAX_ACTIVE_JOBS_PER_USER, "s": retry_after_s}
        )


def job_submit(
    *, owner: AbstractBaseUser, kind: str, config: dict[str, Any], engine_url: str | None = None
) -> BenchJob:
    """``job_create`` for a person at a web page: refused with ``JobsBusy`` past the per-user limit."""
    wait_s = busy_retry_after_s(owner=owner)
    if wait_s is not None:
        raise JobsBusy(wait_s)
    return job_create(owner=owner, kind=kind, config=config, engine_url=engine_url)


def job_config(kind: str, config: dict[str, Any]) -> jobs.JobConfig:
    return jobs.config_for(kind, config)


def job_cancel(*, job: BenchJob) -> BenchJob:
    """A queued job ends now; a running one stops after its current request (results kept)."""
    BenchJob.objects.filter(pk=job.pk, status=BenchJob.Status.QUEUED).update(
        status=BenchJob.Status.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    )
    BenchJob.objects.filter(pk=job.pk, status=BenchJob.Status.RUNNING).update(cancel_requested=True)
    job.refresh_from_db()
    return job


def queue_position(job: BenchJob) -> int:
    """1 = next to run on its engine (0 when it is not waiting)."""
    if job.status != BenchJob.Status.QUEUED:
        return 0
    ahead = BenchJob.objects.filter(
        engine_url=job.engine_url, status__in=[BenchJob.Status.QUEUED, BenchJob.Status.RUNNING], pk__lt=job.pk
    )
    return ahead.count() + 1


RETRY_GUESS_S = 30  # when no running job of the user's has progress to go by


def busy_retry_after_s(*, owner: AbstractBaseUser) -> int | None:
    """Seconds until ``owner`` may submit again when they have BENCH_MAX_ACTIVE_JOBS_PER_USER
    jobs queued or running, else None.

    The estimate is the soonest end of one of their running jobs at its pace so far
    (time since it started, scaled by the requests left), or ``RETRY_GUESS_S``.
    """
    active = list(
        BenchJob.objects.filter(owner_id=owner.pk, status__in=[BenchJob.Status.QUEUED, BenchJob.Status.RUNNING])
    )
    if len(active) < settings.BENCH_MAX_ACTIVE_JOBS_PER_USER:
        return None
    now = timezone.now()
    guesses = [
        (now - job.started_at).total_seconds() * (job.total_requests - job.done_requests) / job.done_requests
        for job in active
        if job.status == BenchJob.Status.RUNNING and job.started_at and 0 < job.done_requests <= job.total_requests
    ]
    return max(5, min(3600, round(min(guesses)))) if guesses else RETRY_GUESS_S


class EngineLease:
    """The engine lock a running job holds; ``renew`` pushes its expiry back (called by the job's heartbeat)."""

    def __init__(self, lock: Lock, token: str) -> None:
        self.lock = lock
        self.token = token

    def renew(self) -> bool:
        """True when the lock is this job's for another ENGINE_LOCK_S; never raises."""
        import redis

        try:
            self.lock.reacquire()
            return True
        except redis.exceptions.LockNotOwnedError:
            pass  # expired, or Redis restarted without it: take it back if nobody else has
        except redis.RedisError as exc:
            logger.warning("bench: could not renew the engine lock (%s); the job goes on", exc)
            return False
        try:
            taken = bool(self.lock.acquire(blocking=False, token=self.token))
        except redis.RedisError as exc:
            logger.warning("bench: could not take the engine lock back (%s); the job goes on", exc)
            return False
        if not taken:
            logger.warning("bench: the engine lock %s is held by another job now", self.lock.name)
        return taken


@contextmanager
def engine_lock(engine_url: str, *, hold_s: int = ENGINE_LOCK_S) -> Iterator[EngineLease]:
    """One job per engine at a time, across every worker.

    A Redis lock that expires after ``hold_s`` unless the running job's heartbeat
    renews it, so the lock of a worker killed mid-job frees itself within a minute.
    Redis unreachable when taking it counts as busy (the task retries).
    """
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    lock = client.lock(f"lab:bench-engine:{engine_url}", timeout=hold_s, thread_local=False)
    try:
        acquired = lock.acquire(blocking=False)
    except redis.RedisError as exc:
        raise EngineBusy(f"{engine_url} (Redis: {exc})") from exc
    if not acquired:
        raise EngineBusy(engine_url)
    token = bytes(lock.local.token).decode()  # a hex UUID: the same bytes when encoded back
    try:
        yield EngineLease(lock, token)
    finally:
        try:
            lock.release()
        except redis.RedisError:
            pass  # expired meanwhile, taken by another job after that, or Redis is down: it expires on its own
        client.close()


def jobs_reap_stale() -> int:
    """Running jobs whose worker stopped beating BENCH_STALE_S ago end failed (results kept); how many."""
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
        error = (
            f"The worker running this job was lost mid-job (attempt {job.attempts} of {MAX_ATTEMPTS}): no sign of "
            f"life for over {stale_s} s, after {job.done_requests} of {job.total_requests} requests. "
            "It will not be resumed: run it again."
        )
        # Only if it has not beaten since it was read: a worker that is merely slow keeps its job.
        reaped += BenchJob.objects.filter(
            pk=job.pk, status=BenchJob.Status.RUNNING, attempts=job.attempts, heartbeat_at=job.heartbeat_at
        ).update(status=BenchJob.Status.FAILED, error=error, finished_at=now, current_cell="")
    return reaped


def _alive(job: BenchJob) -> bool:
    last = job.heartbeat_at or job.started_at
    return last is not None and timezone.now() - last < timedelta(seconds=settings.BENCH_STALE_S)


def job_execute(*, job_id: int, lease: EngineLease | None = None) -> BenchJob:
    """Run a job to its end in this process; every outcome is saved on the row.

    ``lease`` is the engine lock held for it (the heartbeat renews it). Raises
    JobAlive when another worker is still running the job.
    """
    job = BenchJob.objects.get(pk=job_id)
    if job.status in FINISHED:
        return job  # a redelivered task for a finished job does nothing
    if job.status == BenchJob.Status.RUNNING and _alive(job):
        raise JobAlive(f"job {job.pk} is running in another worker")
    if job.attempts >= MAX_ATTEMPTS:
        BenchJob.objects.filter(pk=job.pk, status=job.status, attempts=job.attempts).update(
            status=BenchJob.Status.FAILED,
            error=(
                f"The job was started {job.attempts} times and its worker was lost each time (attempt "
                f"{job.attempts} of {MAX_ATTEMPTS}); it is not started again: run it again."
            ),
            finished_at=timezone.now(),
            current_cell="",
        )
        return BenchJob.objects.get(pk=job.pk)
    attempt = job.attempts + 1
    now = timezone.now()
    claimed = BenchJob.objects.filter(pk=job.pk, status=job.status, attempts=job.attempts).update(
        status=BenchJob.Status.RUNNING,
        started_at=now,
        heartbeat_at=now,
        finished_at=None,
        attempts=attempt,
        done_requests=0,
        results={},  # a redelivered job starts over: exactly one set of results
        error=(
            f"The worker of attempt {job.attempts} was lost mid-job; started over (attempt {attempt} of "
            f"{MAX_ATTEMPTS})."
            if job.attempts
            else ""
        ),
    )
    if not claimed:
        return BenchJob.objects.get(pk=job.pk)  # another delivery claimed it first
    config = job_config(job.kind, job.config)
    mine = BenchJob.objects.filter(pk=job.pk, status=BenchJob.Status.RUNNING, attempts=attempt)
    state: dict[str, Any] = {"timed_out": False, "lost": False, "done": 0, "total": job.total_requests}

    async def progress(done: int, total: int, cell: str) -> bool:
        def save() -> bool:
            now = timezone.now()
            if not mine.update(done_requests=done, total_requests=total, current_cell=cell, heartbeat_at=now):
                state["lost"] = True  # the row is no longer this run's (reaped as lost): stop measuring
                return False
            return not mine.filter(cancel_requested=True).exists()

        state["done"], state["total"] = done, total
        keep_going = bool(await sync_to_async(save)())
        if state["lost"]:
            return False
        if asyncio.get_running_loop().time() > state["deadline"]:
            state["timed_out"] = True  # stops after this request; what was measured is kept
            keep_going = False
        await _push(job.pk, {"status": "running", "done": done, "total": total, "cell": cell})
        return keep_going

    def beat() -> None:
        mine.update(heartbeat_at=timezone.now())
        if lease is not None:
            lease.renew()

    async def heartbeat(stop: asyncio.Event) -> None:
        interval = heartbeat_interval()
        while True:
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
                return
            except TimeoutError:
                pass
            try:
                await sync_to_async(beat)()
            except Exception:  # a missed beat is not a reason to end the job
                logger.exception("bench: job %s missed a heartbeat", job.pk)

    async def save_partial(results: dict[str, Any]) -> None:
        """Finished cells onto the row while the job runs (pages draw them before the end)."""
        await sync_to_async(mine.update)(results=results)

    async def measure() -> tuple[dict[str, Any], bool]:
        loop = asyncio.get_running_loop()
        state["deadline"] = loop.time() + JOB_TIME_LIMIT_S
        stop = asyncio.Event()
        beating = asyncio.create_task(heartbeat(stop))
        try:
            async with asyncio.timeout(JOB_TIME_LIMIT_S + HARD_LIMIT_GRACE_S) as limit:
                state["limit"] = limit
                model = await vllm_client.engine_model(job.engine_url)
                token = jobs.PARTIAL.set(save_partial)
                try:
                    return await jobs.job_measure(config, base_url=job.engine_url, model=model, progress=progress)
                finally:
                    jobs.PARTIAL.reset(token)  # async_to_sync copies context back to the caller
        finally:
            stop.set()
            await beating  # ends at once: no database write is left running behind the job

    try:
        results, cancelled = async_to_sync(measure)()
    except Exception as exc:
        limit = state.get("limit")
        if isinstance(exc, TimeoutError) and limit is not None and limit.expired():
            error = f"Stopped: a request hung past the job's time limit ({JOB_TIME_LIMIT_S} s)."
        else:
            error = f"{type(exc).__name__}: {exc}"
        fields: dict[str, Any] = {"status": BenchJob.Status.FAILED, "error": error[:2000]}
        partial = getattr(exc, "partial_results", None)  # what was measured before the error, when it says
        if isinstance(partial, dict):
            fields["results"] = partial
        if mine.update(**fields, finished_at=timezone.now(), current_cell=""):
            async_to_sync(_push)(job.pk, {"status": str(BenchJob.Status.FAILED)})
        return BenchJob.objects.get(pk=job.pk)
    failed = [c for c in results["cells"] if c["failed"]]
    status = BenchJob.Status.CANCELLED if cancelled else BenchJob.Status.DONE
    error = ""
    if state["timed_out"]:
        status = BenchJob.Status.FAILED
        error = (
            f"Stopped at the time limit ({JOB_TIME_LIMIT_S} s) after {state['done']} of {state['total']} requests; "
            "the finished requests are kept."
        )
    elif failed and not cancelled:
        status = BenchJob.Status.FAILED
        count = sum(c["failed"] for c in failed)
        reasons = "; ".join(sorted({e for c in failed for e in c["errors"]}))
        error = f"{count} request(s) failed: {reasons}"[:2000]
    # Only while the row is still this run's: a run reaped as lost meanwhile leaves the row as the reaper left it.
    if mine.update(status=status, results=results, error=error, finished_at=timezone.now(), current_cell=""):
        async_to_sync(_push)(job.pk, {"status": str(status)})
    return BenchJob.objects.get(pk=job.pk)


async def _push(job_id: int, message: dict[str, Any]) -> None:
    """Tell the job's open pages (a hint: with Redis down the pages keep polling the row)."""
    from channels.layers import get_channel_layer

    from bench.consumers import group_name

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(group_name(job_id), {"type": "job.progress", **message})
    except Exception:  # noqa: S110 - the database row stays the source of truth
        pass
