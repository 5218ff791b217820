"""Writes of benchmark jobs: create (row first, task after commit), cancel, execute."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from bench import jobs
from bench.models import BenchJob
from rag import vllm_client


class EngineBusy(RuntimeError):
    """Another job is measuring the same engine; this one waits its turn."""


def job_create(*, owner: AbstractBaseUser, kind: str, config: dict[str, Any]) -> BenchJob:
    from bench import tasks

    seeded = config | {"seed": random.SystemRandom().randrange(1, 1 << 30)}  # fresh prompts: no cache hits
    with transaction.atomic():
        job = BenchJob.objects.create(
            owner_id=owner.pk,
            kind=kind,
            config=seeded,
            engine_url=vllm_client.base_url(),
            total_requests=job_config(kind, seeded).total_requests,
        )
        transaction.on_commit(lambda: tasks.job_run.delay(job.pk))
    return job


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


@contextmanager
def engine_lock(engine_url: str, *, hold_s: int) -> Iterator[None]:
    """One job per engine at a time, across every worker (a Redis lock that expires on its own)."""
    import redis

    lock = redis.Redis.from_url(settings.REDIS_URL).lock(f"lab:bench-engine:{engine_url}", timeout=hold_s)
    if not lock.acquire(blocking=False):
        raise EngineBusy(engine_url)
    try:
        yield
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass  # expired meanwhile


def job_execute(*, job_id: int) -> BenchJob:
    """Run a job to its end in this process; every outcome is saved on the row."""
    job = BenchJob.objects.get(pk=job_id)
    if job.status in (BenchJob.Status.DONE, BenchJob.Status.FAILED, BenchJob.Status.CANCELLED):
        return job  # a redelivered task for a finished job does nothing
    BenchJob.objects.filter(pk=job.pk).update(
        status=BenchJob.Status.RUNNING,
        started_at=timezone.now(),
        attempts=job.attempts + 1,
        done_requests=0,
        results={},  # a redelivered job starts over: exactly one set of results
        error="",
    )
    config = job_config(job.kind, job.config)

    async def progress(done: int, total: int, cell: str) -> bool:
        def save() -> bool:
            BenchJob.objects.filter(pk=job.pk).update(done_requests=done, total_requests=total, current_cell=cell)
            return not BenchJob.objects.filter(pk=job.pk, cancel_requested=True).exists()

        from asgiref.sync import sync_to_async

        keep_going = bool(await sync_to_async(save)())
        await _push(job.pk, {"status": "running", "done": done, "total": total, "cell": cell})
        return keep_going

    async def measure() -> tuple[dict[str, Any], bool]:
        model = await vllm_client.engine_model(job.engine_url)
        return await jobs.job_measure(config, base_url=job.engine_url, model=model, progress=progress)

    try:
        results, cancelled = async_to_sync(measure)()
    except Exception as exc:
        BenchJob.objects.filter(pk=job.pk).update(
            status=BenchJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}", finished_at=timezone.now()
        )
        return BenchJob.objects.get(pk=job.pk)
    failed = [c for c in results["cells"] if c["failed"]]
    status = BenchJob.Status.CANCELLED if cancelled else BenchJob.Status.DONE
    error = ""
    if failed and not cancelled:
        status = BenchJob.Status.FAILED
        error = "; ".join(sorted({e for c in failed for e in c["errors"]}))[:2000]
    BenchJob.objects.filter(pk=job.pk).update(
        status=status, results=results, error=error, finished_at=timezone.now(), current_cell=""
    )
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
