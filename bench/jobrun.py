"""One delivery of a benchmark job run to its end: claim, measure (heartbeat, progress, partial), finish or fail.

Every outcome is saved on the job's row, and only while the row is still this run's
(running, at this run's attempt): a run whose job was reaped as lost meanwhile
(``bench.reaper``) leaves the row as the reaper left it. A running job stops after its
current request when cancelled or past ``JOB_TIME_LIMIT_S`` (results kept); a request
that hangs past that is cut off ``HARD_LIMIT_GRACE_S`` later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from bench import kinds, provenance, reaper
from bench.engine_lock import EngineBusy, EngineLease
from bench.models import BenchJob
from labapp import said
from labapp.said import gettext as _  # a job's error is saved and said again in each reader's language
from rag.vllm import client as vllm_client

logger = logging.getLogger(__name__)

FINISHED = (BenchJob.Status.DONE, BenchJob.Status.FAILED, BenchJob.Status.CANCELLED)
HEARTBEAT_S = 10.0  # at most; a third of BENCH_STALE_S when that is shorter
JOB_TIME_LIMIT_S = 3600  # after this a job stops after its current request (results kept) and fails
HARD_LIMIT_GRACE_S = 120  # then, if a request hangs, the measurement is cut off


class JobAlive(EngineBusy):
    """The job is running in another worker that still beats: this delivery waits (and then finds it finished)."""


def heartbeat_interval() -> float:
    return min(HEARTBEAT_S, settings.BENCH_STALE_S / 3)


async def push(job_id: int, message: dict[str, Any]) -> None:
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


class JobRun:
    """One delivery of job ``job_id``; ``run()`` takes it to its end. Implements ``bench.reporting.Reporter``.

    Threads and loops: ``run`` is called in a worker's (synchronous) thread, where
    ``claim``, ``finish`` and ``fail`` use the ORM directly. In between, ``measure`` runs
    inside ``async_to_sync``, on an event loop in another thread; ``progress``,
    ``partial``, ``heartbeat`` and ``push`` run on that loop, and their database writes
    (``_save_progress``, ``beat``, the partial results) go through ``sync_to_async``,
    which runs them back on the calling thread (idle meanwhile), one at a time, on its
    database connection. The attributes below are set by ``claim``, changed while it
    measures only by the loop or a write the loop is awaiting (``lost``), and read by
    ``finish`` and ``fail`` after the loop has ended: no two threads use them at once.
    ``finish`` and ``fail`` push their last message through a short ``async_to_sync``.
    """

    def __init__(self, job_id: int, *, lease: EngineLease | None = None, engine_url: str | None = None) -> None:
        self.job_id = job_id
        self.lease = lease  # the engine lock held for the job: the heartbeat renews it
        self.engine_on = engine_url  # the engine chosen for it (bench.pools), saved as the one that measured
        self.attempt = 0  # this run's attempt, once claimed
        self.kind = ""
        self.engine_url = ""
        self.hardware = ""  # the hardware label of the job's queue (its engine's)
        self.raw_config: dict[str, Any] = {}  # as saved on the row
        self.config: Any = None  # the kind's typed config, read from raw_config when measuring starts
        self.done = 0  # requests done of total, as last reported
        self.total = 0
        self.lost = False  # the row stopped being this run's (reaped as lost): the run stops
        self.timed_out = False  # stopped at JOB_TIME_LIMIT_S after a request
        self.deadline = 0.0  # the loop's clock at JOB_TIME_LIMIT_S
        self.limit: asyncio.Timeout | None = None  # the hard cut-off, once measuring

    @property
    def mine(self) -> QuerySet[BenchJob]:
        """The row, while it is still this run's."""
        return BenchJob.objects.filter(pk=self.job_id, status=BenchJob.Status.RUNNING, attempts=self.attempt)

    def run(self) -> BenchJob:
        """Claim the job and measure it to its end; the row as it is afterwards."""
        if self.claim():
            self.carry()
        return BenchJob.objects.get(pk=self.job_id)

    def carry(self) -> None:
        """Measure the claimed job to its end: finished, cancelled or failed, saved on the row."""
        try:
            # Read here, not in claim: a saved config that no longer parses fails the job at once.
            self.config = kinds.config_for(self.kind, self.raw_config)
            results, cancelled = async_to_sync(self.measure)()
        except Exception as exc:
            self.fail(exc)
        else:
            self.finish(results, cancelled)

    def claim(self) -> bool:
        """Take the job for this run: True when it is now this run's to measure.

        A finished job is left as it is (a redelivered task does nothing); one whose worker
        still beats raises JobAlive; one started MAX_ATTEMPTS times already fails; else a
        conditional UPDATE claims it, starting over from nothing, unless another delivery did first.
        """
        job = BenchJob.objects.get(pk=self.job_id)
        if job.status in FINISHED:
            return False
        if job.status == BenchJob.Status.RUNNING and reaper.alive(job):
            raise JobAlive(f"job {job.pk} is running in another worker")
        most = reaper.MAX_ATTEMPTS
        if job.attempts >= most:
            BenchJob.objects.filter(pk=job.pk, status=job.status, attempts=job.attempts).update(
                status=BenchJob.Status.FAILED,
                **BenchJob.error_fields(
                    _(
                        "작업이 %(attempts)d번 시작되었고 매번 워커가 사라졌습니다 (시도 %(attempt)d/%(most)d). "
                        "다시 시작되지 않습니다: 다시 실행하세요."
                    )
                    % {"attempts": job.attempts, "attempt": job.attempts, "most": most}
                ),
                finished_at=timezone.now(),
                current_cell="",
            )
            return False
        self.attempt = job.attempts + 1
        restarted = ""  # the first start says nothing; a start over says why
        if job.attempts:
            restarted = _(
                "시도 %(lost)d의 워커가 작업 도중 사라져 처음부터 다시 시작했습니다 (시도 %(attempt)d/%(most)d)."
            ) % {"lost": job.attempts, "attempt": self.attempt, "most": most}
        now = timezone.now()
        engine_url = self.engine_on or job.engine_url
        claimed = BenchJob.objects.filter(pk=job.pk, status=job.status, attempts=job.attempts).update(
            status=BenchJob.Status.RUNNING,
            engine_url=engine_url,
            started_at=now,
            heartbeat_at=now,
            finished_at=None,
            attempts=self.attempt,
            done_requests=0,
            results={},  # a redelivered job starts over: exactly one set of results
            provenance={},  # read again when it measures (record_provenance)
            **BenchJob.error_fields(restarted),
        )
        if not claimed:
            return False  # another delivery claimed it first
        self.kind, self.engine_url, self.total = job.kind, engine_url, job.total_requests
        self.hardware = job.hardware
        self.raw_config = dict(job.config)
        return True

    async def measure(self) -> tuple[dict[str, Any], bool]:
        """The kind's measurement, reporting to this run, under the time limits, with the heartbeat beating."""
        self.deadline = asyncio.get_running_loop().time() + JOB_TIME_LIMIT_S
        stop = asyncio.Event()
        beating = asyncio.create_task(self.heartbeat(stop))
        try:
            async with asyncio.timeout(JOB_TIME_LIMIT_S + HARD_LIMIT_GRACE_S) as self.limit:
                model = await vllm_client.engine_model(self.engine_url)
                await self.record_provenance(model)
                return await kinds.measure(self.kind, self.config, base_url=self.engine_url, model=model, reporter=self)
        finally:
            stop.set()
            await beating  # ends at once: no database write is left running behind the job

    async def record_provenance(self, model: str) -> None:
        """Where the numbers come from, read from the engine now and saved on the row; never fails the run."""
        try:
            spec = kinds.get(self.kind)
            policy = spec.router_policies(self.config) if spec.router_policies is not None else None
            behind = await sync_to_async(spec.router_engines)(self.engine_url) if spec.router_engines else None
            found = await provenance.read(
                self.engine_url, model=model, hardware=self.hardware, router_policy=policy, router_engines=behind
            )
            await sync_to_async(self.mine.update)(provenance=found.as_dict())
        except Exception:  # a run's numbers are still its numbers without their provenance
            logger.exception("bench: job %s could not save its provenance", self.job_id)

    async def heartbeat(self, stop: asyncio.Event) -> None:
        """Beat every ``heartbeat_interval()`` until ``stop``, also while a request is slow to answer."""
        interval = heartbeat_interval()
        while True:
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
                return
            except TimeoutError:
                pass
            try:
                await sync_to_async(self.beat)()
            except Exception:  # a missed beat is not a reason to end the job
                logger.exception("bench: job %s missed a heartbeat", self.job_id)

    def beat(self) -> None:
        """The row's heartbeat now (while it is this run's), and the engine lock's expiry pushed back."""
        self.mine.update(heartbeat_at=timezone.now())
        if self.lease is not None:
            self.lease.renew()

    async def progress(self, done: int, total: int, cell: str) -> bool:
        """Saved on the row and pushed to its pages; False (stop after this request) when cancelled,
        past the time limit, or when the row is no longer this run's."""
        self.done, self.total = done, total
        keep_going = await sync_to_async(self._save_progress)(done, total, cell)
        if self.lost:
            return False
        if asyncio.get_running_loop().time() > self.deadline:
            self.timed_out = True  # stops after this request; what was measured is kept
            keep_going = False
        await self.push({"status": "running", "done": done, "total": total, "cell": cell})
        return keep_going

    def _save_progress(self, done: int, total: int, cell: str) -> bool:
        now = timezone.now()
        if not self.mine.update(done_requests=done, total_requests=total, current_cell=cell, heartbeat_at=now):
            self.lost = True  # the row is no longer this run's (reaped as lost): stop measuring
            return False
        return not self.mine.filter(cancel_requested=True).exists()

    async def partial(self, results: dict[str, Any]) -> None:
        """Finished cells onto the row while the job runs (pages draw them before the end)."""
        await sync_to_async(self.mine.update)(results=results)

    def finish(self, results: dict[str, Any], cancelled: bool) -> None:
        """Done, cancelled, or failed (stopped at the time limit, or with failed requests); results kept."""
        failed = [c for c in results["cells"] if c["failed"]]
        status = BenchJob.Status.CANCELLED if cancelled else BenchJob.Status.DONE
        error = ""
        if self.timed_out:
            status = BenchJob.Status.FAILED
            error = _(
                "시간 제한(%(limit)s초)에 걸려 요청 %(total)d개 중 %(done)d개를 마치고 멈췄습니다. "
                "마친 요청의 결과는 남겨 두었습니다."
            ) % {"limit": JOB_TIME_LIMIT_S, "done": self.done, "total": self.total}
        elif failed and not cancelled:
            status = BenchJob.Status.FAILED
            count = sum(c["failed"] for c in failed)
            reasons = "; ".join(sorted({e for c in failed for e in c["errors"]}))[:1800]
            error = _("요청 %(count)d개가 실패했습니다: %(reasons)s") % {"count": count, "reasons": reasons}
        saved = BenchJob.error_fields(error)
        # Only while the row is still this run's: a run reaped as lost meanwhile leaves the row as the reaper left it.
        if self.mine.update(status=status, results=results, **saved, finished_at=timezone.now(), current_cell=""):
            async_to_sync(self.push)({"status": str(status)})

    def fail(self, exc: Exception) -> None:
        """Failed with the exception's reason, keeping the ``partial_results`` it carries (what was measured)."""
        if isinstance(exc, TimeoutError) and self.limit is not None and self.limit.expired():
            error = _("멈췄습니다: 요청 하나가 작업의 시간 제한(%(limit)s초)이 지나도록 끝나지 않았습니다.") % {
                "limit": JOB_TIME_LIMIT_S
            }
        else:  # the exception's own words (in English unless it is one of ours), as every log has them
            error = _("작업이 오류로 멈췄습니다: %(why)s") % {"why": said.exception(exc)}
        fields: dict[str, Any] = {"status": BenchJob.Status.FAILED, **BenchJob.error_fields(error)}
        partial = getattr(exc, "partial_results", None)
        if isinstance(partial, dict):
            fields["results"] = partial
        if self.mine.update(**fields, finished_at=timezone.now(), current_cell=""):
            async_to_sync(self.push)({"status": str(BenchJob.Status.FAILED)})

    async def push(self, message: dict[str, Any]) -> None:
        await push(self.job_id, message)
