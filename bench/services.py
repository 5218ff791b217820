"""Writes of benchmark jobs: create (row first, task after commit), submit, cancel, execute.

Executing a job is a ``bench.jobrun.JobRun``; the engine lock its task holds is in
``bench.engine_lock``, the reaping of jobs whose worker was lost in ``bench.reaper``.
"""

from __future__ import annotations

import math
import random
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from bench import imports, kinds, pools, provenance, reaper
from bench.engine_lock import EngineLease
from bench.jobrun import JobRun
from bench.models import BenchJob
from labapp import addresses
from rag.vllm import client as vllm_client


def jobs_reap_stale() -> int:
    """``bench.reaper.jobs_reap_stale``, each job put back in its queue sent to the worker again."""
    from bench import tasks

    return reaper.jobs_reap_stale(send=lambda job_id: transaction.on_commit(lambda: tasks.job_run.delay(job_id)))


def job_create(
    *,
    owner: AbstractBaseUser,
    kind: str,
    config: dict[str, Any],
    engine_url: str | None = None,
    pinned: bool = True,
    lab: int | None = None,
    prediction: dict[str, Any] | None = None,
) -> BenchJob:
    """A job on ``engine_url`` (the learner's chosen engine; default the configured one), or, when not
    ``pinned``, on the first free measuring engine of that engine's pool with its hardware (``bench.pools``).

    ``lab`` and ``prediction`` are set by a lab page's run form only (the run counts for that
    lab; the learner's prediction is compared with what it measures)."""
    from bench import tasks

    jobs_reap_stale()  # a lost worker's job does not hold the queue up in front of the new one
    seeded = config | {"seed": random.SystemRandom().randrange(1, 1 << 30)}  # fresh prompts: no cache hits
    url = engine_url or vllm_client.base_url()
    pool, hardware = pools.queue_of(url)
    with transaction.atomic():
        job = BenchJob.objects.create(
            owner_id=owner.pk,
            kind=kind,
            config=seeded,
            engine_url=url,
            pool=pool,
            hardware=hardware,
            pinned=pinned,
            total_requests=kinds.config_for(kind, seeded).total_requests,
            lab=lab,
            prediction=prediction,
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


class RunWaiting(JobsBusy):
    """The owner already has a run waiting for an engine: one at a time, so that the queue stays fair."""

    def __init__(self, waiting: BenchJob, retry_after_s: int) -> None:
        self.waiting = waiting
        self.retry_after_s = retry_after_s
        what = waiting.kind_spec.label if waiting.kind_spec is not None else waiting.kind
        Exception.__init__(
            self,
            _(
                "이미 엔진을 기다리는 실행이 있습니다: #%(id)d (%(what)s). 한 사람은 한 번에 실행 하나만 "
                "기다릴 수 있습니다. 그 실행이 시작된 뒤에 다시 내거나, 그 실행을 취소하세요."
            )
            % {"id": waiting.pk, "what": what},
        )


def job_submit(
    *,
    owner: AbstractBaseUser,
    kind: str,
    config: dict[str, Any],
    engine_url: str | None = None,
    pinned: bool = False,
    lab: int | None = None,
    prediction: dict[str, Any] | None = None,
) -> BenchJob:
    """``job_create`` for a person at a web page, on the pool of their chosen engine unless ``pinned``:
    refused with ``JobsBusy`` past the per-user limit, and with ``RunWaiting`` while one of theirs waits.

    The count and the create are one transaction holding the owner's row locked
    (PostgreSQL: ``SELECT ... FOR UPDATE``; SQLite ignores that, and its ``BEGIN IMMEDIATE``
    transactions, see settings, already run one at a time), so two submits at once cannot
    both pass the count.
    """
    with transaction.atomic():
        get_user_model().objects.select_for_update().get(pk=owner.pk)
        wait_s = busy_retry_after_s(owner=owner)
        if wait_s is not None:
            raise JobsBusy(wait_s)
        waiting = BenchJob.objects.filter(owner_id=owner.pk, status=BenchJob.Status.QUEUED).order_by("pk").first()
        if waiting is not None:
            found = pools.place(waiting)
            starts = found.starts_in_s if found is not None else None
            raise RunWaiting(waiting, RETRY_GUESS_S if starts is None else max(5, round(starts)))
        return job_create(
            owner=owner,
            kind=kind,
            config=config,
            engine_url=engine_url,
            pinned=pinned,
            lab=lab,
            prediction=prediction,
        )


def job_cancel(*, job: BenchJob) -> BenchJob:
    """A queued job ends now; a running one stops after its current request (results kept)."""
    BenchJob.objects.filter(pk=job.pk, status=BenchJob.Status.QUEUED).update(
        status=BenchJob.Status.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    )
    BenchJob.objects.filter(pk=job.pk, status=BenchJob.Status.RUNNING).update(cancel_requested=True)
    job.refresh_from_db()
    return job


def queue_position(job: BenchJob) -> int:
    """1 = the next to start on a free engine of its queue, in the fair order (0 when it is not waiting)."""
    found = pools.place(job)
    return found.position if found is not None else 0


RETRY_GUESS_S = 30  # when no running job of the user's has progress to go by


def busy_retry_after_s(*, owner: AbstractBaseUser) -> int | None:
    """Seconds until ``owner`` may submit again when they have BENCH_MAX_ACTIVE_JOBS_PER_USER
    jobs queued or running, else None.

    The estimate is the soonest end of one of their running jobs, as the queue's expected starts
    reckon it (``pools.Durations.left``), or ``RETRY_GUESS_S`` when none can be told.
    """
    active = list(
        BenchJob.objects.filter(owner_id=owner.pk, status__in=[BenchJob.Status.QUEUED, BenchJob.Status.RUNNING])
    )
    if len(active) < settings.BENCH_MAX_ACTIVE_JOBS_PER_USER:
        return None
    now = timezone.now()
    guesses = [
        pools.Durations((job.pool, job.hardware)).left(job, now)
        for job in active
        if job.status == BenchJob.Status.RUNNING
    ]
    known = [guess for guess in guesses if not math.isinf(guess)]
    return max(5, min(3600, round(min(known)))) if known else RETRY_GUESS_S


def job_execute(*, job_id: int, lease: EngineLease | None = None) -> BenchJob:
    """Run a job to its end in this process; every outcome is saved on the row.

    ``lease`` is the engine lock held for it (the heartbeat renews it). Raises
    JobAlive when another worker is still running the job.
    """
    return JobRun(job_id, lease=lease).run()


IMPORTED_MAX_PER_USER = 100  # imported runs a learner keeps (each is a row of up to MAX_BYTES of results)


def job_import(*, owner: AbstractBaseUser, files: list[tuple[str, bytes]]) -> list[BenchJob]:
    """Other tools' result files (name, content) read (``bench.imports``) and saved as done jobs of ``owner``'s
    that never run: one per run in a file (a GuideLLM sweep holds several), or one for the files of one run
    uploaded together (AIPerf's two).

    Raises ``bench.imports.NotImportable`` with words for the form when no importer can read them, or when
    files uploaded together are not one run's; nothing is saved then.
    """
    runs = imports.registry.read_together(files)
    file_name = ", ".join(name for name, _data in files)
    with transaction.atomic():
        get_user_model().objects.select_for_update().get(pk=owner.pk)  # two uploads at once count one after the other
        kept = BenchJob.objects.filter(owner_id=owner.pk, kind=kinds.imported.KIND.name).count()
        if kept + len(runs) > IMPORTED_MAX_PER_USER:
            raise imports.NotImportable(
                _("가져온 결과는 한 사람에 %(most)d개까지입니다 (지금 %(kept)d개)")
                % {"most": IMPORTED_MAX_PER_USER, "kept": kept}
            )
        return [_imported_job(owner, run, file_name) for run in runs]


def job_delete(*, job: BenchJob) -> None:
    """A job of a kind its owner may delete (resolved by ``bench.access.job_to_delete``), gone."""
    if not job.deletable:  # the resolver refused it already; this keeps a measured run from any other caller
        raise ValueError(f"job {job.pk} of kind {job.kind!r} is not deletable")
    job.delete()


def _imported_job(owner: AbstractBaseUser, found: imports.Imported, file_name: str) -> BenchJob:
    importer = imports.registry.find(found.tool)
    source = dict(found.source)
    if source.get("endpoint"):
        source["endpoint"] = addresses.shown(str(source["endpoint"]))  # never an address's credentials
    results = {
        "model": str(source.get("model") or ""),
        "imported": {
            "tool": found.tool,
            "tool_name": importer.tool if importer is not None else found.tool,
            "file_name": file_name[-200:],
            "source": source,
            "missing": found.missing,
            "notes": list(found.notes),
            "per_request": bool(found.usable),
            "run": found.run,
        },
        "cells": [found.cell()],
    }
    return BenchJob.objects.create(
        owner_id=owner.pk,
        kind=kinds.imported.KIND.name,
        config={},
        engine_url="",
        status=BenchJob.Status.DONE,
        done_requests=len(found.samples),
        total_requests=len(found.samples),
        results=results,
        # What the file says of where its numbers came from, in the fields every run has; the rest unknown.
        provenance=provenance.Provenance(
            engine_url=str(source["endpoint"]) if source.get("endpoint") else None,
            model=str(source["model"]) if source.get("model") else None,
            read_at=str(source["date"]) if source.get("date") else None,
        ).as_dict(),
        finished_at=timezone.now(),
    )
