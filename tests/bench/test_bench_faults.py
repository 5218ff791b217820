"""Benchmark jobs under faults: an engine that errors or vanishes mid-run, time limits, lost workers, Redis restarts.

The unit tests run job_execute (a bench.jobrun.JobRun) in this process against the scripted server. The
integration tests start their own redis-server (the embedded component's command
on a free port) and their own Celery worker processes on it, on the run's file
database (``shared_database``), and then kill the worker or restart Redis mid-job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from bench import jobrun, kinds, reaper, services, tasks
from bench.engine_lock import ENGINE_LOCK_S, EngineBusy, engine_lock
from bench.kinds.cells import cell_summary
from bench.kinds.speed import SpeedConfig
from bench.models import BenchJob
from bench.reporting import Reporter
from labapp.ops import scripted
from labapp.ops.stack import components
from labapp.ops.stack.__main__ import stop_tree
from tests.settings import free_port

SMALL = SpeedConfig(repeats=1, shapes=((20, 4), (60, 4), (20, 8)), check=(40, 6), seed=5)


@pytest.fixture
def small_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job is SMALL: four requests, one per cell."""
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)


def hook_progress(monkeypatch: pytest.MonkeyPatch, hook: Callable[[int], Any]) -> None:
    """Call ``hook(done)`` (sync or async) at each progress report of the measurement, before the job sees it."""
    real = kinds.measure

    class Hooked:
        def __init__(self, reporter: Reporter) -> None:
            self.reporter = reporter

        async def progress(self, done: int, total: int, cell: str) -> bool:
            outcome = hook(done)
            if hasattr(outcome, "__await__"):
                await outcome
            return bool(await self.reporter.progress(done, total, cell))

        async def partial(self, results: dict[str, Any]) -> None:
            await self.reporter.partial(results)

    async def measure(kind: str, config: Any, *, reporter: Reporter, **kwargs: Any) -> Any:
        return await real(kind, config, reporter=Hooked(reporter), **kwargs)

    monkeypatch.setattr(kinds, "measure", measure)


def new_job(owner: User, url: str, **fields: Any) -> BenchJob:
    config = {"repeats": 1, "seed": 5}
    return BenchJob.objects.create(owner=owner, kind="speed", config=config, engine_url=url, **fields)


# --- the engine errors or goes away mid-run -------------------------------------------------


@pytest.mark.django_db
def test_an_engine_answering_500_mid_run_fails_the_job_with_the_reason_and_keeps_the_finished_requests(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, url = scripted_engine
    script.error_message = "CUDA error: an illegal memory access"

    def break_after_two(done: int) -> None:
        if done == 2:
            script.status = 500

    hook_progress(monkeypatch, break_after_two)
    job = services.job_execute(job_id=new_job(User.objects.create(username="e500"), url).pk)
    assert job.status == BenchJob.Status.FAILED and job.finished_at is not None
    assert "요청 2개가 실패했습니다" in job.error and "HTTP 500: CUDA error: an illegal memory access" in job.error
    cells = job.results["cells"]
    assert [(c["completed"], c["failed"]) for c in cells] == [(1, 0), (1, 0), (0, 1), (0, 1)]
    kept = [r for c in cells for r in c["requests"]]
    assert [r["success"] for r in kept] == [True, True, False, False]
    assert all(r["error"].startswith("HTTP 500") for r in kept[2:])  # the failure is counted per request
    assert job.results["prefill_speed"] is not None and job.done_requests == 4


@pytest.mark.django_db
def test_an_engine_that_goes_away_mid_run_fails_the_job_naming_the_connection_error(
    small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = scripted.Script(delay_s=0.001)
    server = scripted.ThreadedServer(script)
    url = server.start()

    def vanish_after_two(done: int) -> None:
        if done == 2:
            server.stop()

    hook_progress(monkeypatch, vanish_after_two)
    job = services.job_execute(job_id=new_job(User.objects.create(username="gone"), url).pk)
    assert job.status == BenchJob.Status.FAILED and job.finished_at is not None
    assert "Connect" in job.error or "connect" in job.error, job.error
    assert job.done_requests >= 2  # progress up to the failure stays on the row
    # The cells measured before the engine went away are kept on the failed job.
    kept = [c for c in job.results["cells"] if c["completed"]]
    assert kept and sum(c["completed"] for c in kept) >= 2, job.results


@pytest.mark.django_db
def test_results_an_error_carries_are_kept_on_the_failed_job(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract for a measurement that raises part-way: ``exc.partial_results`` is saved as the results."""
    _, url = scripted_engine
    partial = {"cells": [cell_summary([], input_tokens=20, output_tokens=4)], "cancelled": False}

    async def measure(kind: str, config: Any, **kwargs: Any) -> Any:
        exc = RuntimeError("engine went away")
        exc.partial_results = partial  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(kinds, "measure", measure)
    job = services.job_execute(job_id=new_job(User.objects.create(username="partial"), url).pk)
    assert (
        job.status == BenchJob.Status.FAILED and job.error == "작업이 오류로 멈췄습니다: RuntimeError: engine went away"
    )
    assert job.results == partial


# --- time limits and the heartbeat ------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_past_its_time_limit_stops_after_the_current_request_and_fails_keeping_what_it_measured(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    _, url = scripted_engine
    monkeypatch.setattr(jobrun, "JOB_TIME_LIMIT_S", 1)

    async def slow_after_two(done: int) -> None:
        if done == 2:
            await asyncio.sleep(1.2)  # past the limit

    hook_progress(monkeypatch, slow_after_two)
    job = services.job_execute(job_id=new_job(User.objects.create(username="slowpoke"), url).pk)
    assert job.status == BenchJob.Status.FAILED, job.error
    assert job.error.startswith("시간 제한(1초)에 걸려 요청 4개 중 2개를 마치고 멈췄습니다")
    assert [c["completed"] for c in job.results["cells"]] == [1, 1]


@pytest.mark.django_db
def test_a_request_hung_past_the_limit_is_cut_off_and_fails_the_job(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, url = scripted_engine
    script.stall_s = 3
    monkeypatch.setattr(jobrun, "JOB_TIME_LIMIT_S", 0.2)
    monkeypatch.setattr(jobrun, "HARD_LIMIT_GRACE_S", 0.3)
    started = time.monotonic()
    job = services.job_execute(job_id=new_job(User.objects.create(username="hung"), url).pk)
    assert time.monotonic() - started < 2.5
    assert job.status == BenchJob.Status.FAILED and "시간 제한(0.2초)이 지나도록 끝나지 않았습니다" in job.error


@dataclass
class CountingLease:
    renewals: int = 0
    beats: list[Any] = field(default_factory=list)
    job_id: int = 0

    def renew(self) -> bool:
        self.renewals += 1
        self.beats.append(BenchJob.objects.get(pk=self.job_id).heartbeat_at)
        if self.renewals % 2:
            raise redis.ConnectionError("Redis restarting")  # a failed renewal must not end the job
        return True


@pytest.mark.django_db
def test_the_heartbeat_beats_between_progress_reports_and_renews_the_engine_lock(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, url = scripted_engine
    script.delay_s = 0.05  # four pieces a request: 0.2 s each
    monkeypatch.setattr(jobrun, "HEARTBEAT_S", 0.05)
    job = new_job(User.objects.create(username="beat"), url)
    lease = CountingLease(job_id=job.pk)
    done = services.job_execute(job_id=job.pk, lease=lease)  # type: ignore[arg-type]
    assert done.status == BenchJob.Status.DONE, done.error
    assert lease.renewals >= 6  # about one a request takes four beats
    assert lease.beats == sorted(lease.beats) and len(set(lease.beats)) >= 4  # the row's heartbeat moved
    assert done.started_at is not None and done.heartbeat_at is not None and done.heartbeat_at > done.started_at


def test_the_heartbeat_is_at_most_a_third_of_the_stale_limit(settings: Any) -> None:
    settings.BENCH_STALE_S = 90
    assert jobrun.heartbeat_interval() == 10
    settings.BENCH_STALE_S = 3
    assert jobrun.heartbeat_interval() == 1


# --- lost workers: the reaper, redeliveries, the attempts cap ------------------------------------


@pytest.mark.django_db
def test_the_reaper_requeues_a_silent_running_job_fails_one_on_its_last_attempt_and_leaves_live_and_queued_ones(
    settings: Any,
) -> None:
    settings.BENCH_STALE_S = 90
    owner = User.objects.create(username="reaped")
    old = timezone.now() - timedelta(seconds=200)
    kept = {"cells": [cell_summary([], input_tokens=20, output_tokens=4)]}
    stale = new_job(owner, "http://e", status="running", attempts=1, started_at=old, heartbeat_at=old, results=kept)
    last = new_job(
        owner, "http://e", status="running", attempts=2, started_at=old, heartbeat_at=old, results=kept,
        done_requests=3, total_requests=8,
    )  # fmt: skip
    never_beat = new_job(owner, "http://e", status="running", attempts=1, started_at=old)
    fresh = new_job(owner, "http://e", status="running", attempts=1, started_at=old, heartbeat_at=timezone.now())
    queued = new_job(owner, "http://e")
    BenchJob.objects.filter(pk=queued.pk).update(created_at=old)

    sent: list[int] = []
    assert reaper.jobs_reap_stale(send=sent.append) == 3
    assert sorted(sent) == sorted([stale.pk, never_beat.pk])  # back in their queue, each sent again
    stale.refresh_from_db()
    assert stale.status == BenchJob.Status.QUEUED and stale.attempts == 1 and stale.finished_at is None
    assert BenchJob.objects.get(pk=never_beat.pk).status == BenchJob.Status.QUEUED
    last.refresh_from_db()
    assert last.status == BenchJob.Status.FAILED and last.finished_at is not None
    assert "실행하던 워커가 작업 도중 사라졌습니다 (시도 2/2)" in last.error
    assert "요청 8개 중 3개를 마친 뒤" in last.error and last.error.endswith("다시 실행하세요.")
    assert last.results == kept  # whatever the row had stays
    assert BenchJob.objects.get(pk=fresh.pk).status == BenchJob.Status.RUNNING
    assert BenchJob.objects.get(pk=queued.pk).status == BenchJob.Status.QUEUED
    assert reaper.jobs_reap_stale() == 0


@pytest.mark.django_db
def test_the_job_pages_and_a_new_job_reap_stale_jobs_first(
    settings: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    settings.BENCH_STALE_S = 90
    sent: list[int] = []
    monkeypatch.setattr(tasks.job_run, "delay", sent.append)  # no broker: what is sent is what counts
    owner = User.objects.create(username="pages")
    old = timezone.now() - timedelta(seconds=200)
    client = Client()
    client.force_login(owner)
    for page in ("/bench/", "detail", "create"):
        job = new_job(owner, "http://e", status="running", attempts=1, started_at=old, heartbeat_at=old)
        with django_capture_on_commit_callbacks(execute=True):  # sent once the requeue is committed
            if page == "create":
                services.job_create(owner=owner, kind="speed", config={"repeats": 1})
            else:
                assert client.get(page if page.startswith("/") else f"/bench/{job.pk}/").status_code == 200
        job.refresh_from_db()
        assert job.status == BenchJob.Status.QUEUED and job.pk in sent, page


@pytest.mark.django_db
def test_a_redelivered_task_leaves_a_finished_job_as_it_is_without_taking_the_engine_lock(settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # no Redis: the task must not need it
    owner = User.objects.create(username="redelivered")
    for status in (BenchJob.Status.FAILED, BenchJob.Status.DONE, BenchJob.Status.CANCELLED):
        job = new_job(owner, "http://e", status=status, attempts=1, error="the reason", results={"cells": []})
        assert tasks.job_run(job.pk) == str(status)
        assert services.job_execute(job_id=job.pk).status == status
        job.refresh_from_db()
        assert (job.status, job.attempts, job.error, job.results) == (status, 1, "the reason", {"cells": []})


@pytest.mark.django_db
def test_a_job_still_beating_elsewhere_is_not_started_twice(settings: Any) -> None:
    settings.BENCH_STALE_S = 90
    owner = User.objects.create(username="twice")
    now = timezone.now()
    job = new_job(owner, "http://e", status="running", attempts=1, started_at=now, heartbeat_at=now)
    with pytest.raises(jobrun.JobAlive):  # the task retries, and later finds it finished
        services.job_execute(job_id=job.pk)
    assert BenchJob.objects.get(pk=job.pk).attempts == 1


@pytest.mark.django_db
def test_a_lost_workers_job_starts_over_once_then_a_further_delivery_fails_it(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, settings: Any
) -> None:
    _, url = scripted_engine
    settings.BENCH_STALE_S = 90
    owner = User.objects.create(username="attempts")
    old = timezone.now() - timedelta(seconds=200)
    half = {"cells": [cell_summary([], input_tokens=20, output_tokens=4)]}
    job = new_job(owner, url, status="running", attempts=1, started_at=old, heartbeat_at=old, results=half)

    again = services.job_execute(job_id=job.pk)  # the second delivery: starts over
    assert again.status == BenchJob.Status.DONE and again.attempts == 2, again.error
    assert len(again.results["cells"]) == 4 and again.error == ""  # one set of results, the new one

    lost_twice = new_job(owner, url, status="running", attempts=2, started_at=old, heartbeat_at=old, results=half)
    failed = services.job_execute(job_id=lost_twice.pk)  # the third delivery
    assert failed.status == BenchJob.Status.FAILED and failed.attempts == 2 and failed.finished_at is not None
    assert "2번 시작되었고 매번 워커가 사라졌습니다" in failed.error and "다시 실행하세요" in failed.error
    assert failed.results == half


@pytest.mark.django_db
def test_a_run_whose_job_was_reaped_meanwhile_stops_and_leaves_the_row_as_the_reaper_left_it(
    scripted_engine: tuple[scripted.Script, str], small_jobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, url = scripted_engine
    job = new_job(User.objects.create(username="zombie"), url)

    async def reaped_at_two(done: int) -> None:
        if done == 2:  # as jobs_reap_stale does when the beat was missed for too long
            reaped = BenchJob.objects.filter(pk=job.pk)
            await sync_to_async(reaped.update)(status="failed", error="lost", finished_at=timezone.now())

    hook_progress(monkeypatch, reaped_at_two)
    ended = services.job_execute(job_id=job.pk)
    assert (ended.status, ended.error, ended.done_requests) == ("failed", "lost", 1)
    assert ended.results["partial"] is True and len(ended.results["cells"]) == 1  # saved before the reap
    assert len(script.requests) == 3  # the warm-up and two requests: it stopped there


# --- real processes: our own Redis and Celery workers --------------------------------------------


@dataclass
class Process:
    command: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.command, env=os.environ | self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            stop_tree(self.popen, grace_s=10)

    def kill(self) -> None:
        assert self.popen is not None
        os.killpg(self.popen.pid, signal.SIGKILL)  # the worker and its pool child, mid-job
        self.popen.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Stack:
    url: str
    server: Process
    engine_url: str
    tmp: Path
    workers: list[Process] = field(default_factory=list)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def start_redis(self) -> None:
        self.server.start()
        wait_for(lambda: bool(self.client().ping()), "redis-server answers", errors=(redis.RedisError,))

    def start_worker(self, **env: str) -> Process:
        number = len(self.workers) + 1
        worker = Process(
            [str(components.VENV_BIN / "python"), "-m", "celery", "-A", "labapp", "worker", "-Q", "bench",
             "--concurrency", "1", "-l", "info", "-n", f"faults-{number}-{uuid.uuid4().hex[:6]}@%h",
             "--without-mingle", "--without-gossip"],
            self.tmp / f"worker-{number}.log",
            {"REDIS_URL": self.url, "BENCH_STALE_S": "3", **env},
        ).start()  # fmt: skip
        self.workers.append(worker)
        return worker

    def dispatch(self, job_id: int) -> None:
        """What job_create's ``delay`` does, onto this stack's broker."""
        with tasks.job_run.app.connection_for_write(self.url) as connection:
            tasks.job_run.apply_async((job_id,), connection=connection, ignore_result=True)

    def redeliver_unacked(self) -> int:
        """What a worker does once the visibility timeout has passed: unacked messages go back on the queue."""
        client = self.client()
        waiting = int(client.hlen("unacked"))
        with tasks.job_run.app.connection_for_write(self.url, transport_options={"visibility_timeout": 0}) as conn:
            conn.default_channel.qos.restore_visible(num=100, interval=1)
        return waiting

    def drained(self) -> bool:
        client = self.client()
        return int(client.llen("bench")) == 0 and int(client.hlen("unacked")) == 0


def wait_for(
    check: Callable[[], bool], what: str, *, timeout: float = 30, errors: tuple[type[Exception], ...] = ()
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except errors:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


@pytest.fixture
def stack(settings: Any, tmp_path: Path, shared_database: None) -> Iterator[Stack]:
    """Our own redis-server (the embedded component's command, on a free port) and a slow scripted engine."""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    settings.DATA_DIR = str(tmp_path)
    settings.BENCH_STALE_S = 3
    component = components.redis()
    script = scripted.Script(delay_s=0.3)  # 1.2 s a request: the job takes about six seconds
    with scripted.serve(script) as engine_url:
        own = Stack(settings.REDIS_URL, Process(component.command, tmp_path / "redis.log"), engine_url, tmp_path)
        own.start_redis()
        try:
            yield own
        finally:
            for worker in own.workers:
                worker.stop()
            own.server.stop()


@pytest.fixture
def owner(shared_database: None, settings: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[User]:
    settings.VLLM_BASE_URL = stack.engine_url
    settings.VLLM_MODEL = ""
    monkeypatch.setattr(tasks.job_run, "delay", stack.dispatch)
    user = User.objects.create_user(username=f"faults-{uuid.uuid4().hex[:8]}")
    yield user
    user.delete()


def start_job(stack: Stack, owner: User) -> BenchJob:
    worker = stack.workers[-1]
    wait_for(lambda: bool(stack.client().exists("_kombu.binding.bench")), "the worker listens on the bench queue")
    job = services.job_create(owner=owner, kind="speed", config={"repeats": 1})
    assert job.total_requests == 4

    def mid_job() -> bool:
        job.refresh_from_db()
        assert job.status in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING), (job.error, worker.text()[-3000:])
        return job.status == BenchJob.Status.RUNNING and job.done_requests >= 1

    wait_for(mid_job, "the job is running")
    return job


def results_summary(job: BenchJob) -> list[tuple[int, int]]:
    return [(c["completed"], c["failed"]) for c in job.results.get("cells", [])]


@pytest.mark.integration
def test_a_worker_killed_mid_job_is_delivered_again_to_another_and_finishes_exactly_once(
    stack: Stack, owner: User
) -> None:
    """kill -9 of the worker and its pool child mid-job: its task stays unacknowledged (acks_late); with no
    page opened, the next worker's own timer (``bench.tasks.ReapLostJobs``) puts the job back in its queue
    and sends it again, that worker starts it over, and the lost worker's own delivery, given back by the
    broker later, finds it finished."""
    first = stack.start_worker()
    job = start_job(stack, owner)
    first.kill()
    assert int(stack.client().hlen("unacked")) == 1  # acks_late: the task is not lost with its worker
    # The killed worker's engine lock still guards the engine; it expires within ENGINE_LOCK_S, sooner here.
    assert stack.client().delete(f"lab:bench-engine:{stack.engine_url}") == 1
    second = stack.start_worker()

    def finished() -> bool:
        job.refresh_from_db()
        return job.status not in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING)

    wait_for(finished, "the next worker's timer finds the job lost and runs it again", timeout=40)
    assert job.status == BenchJob.Status.DONE, (job.error, second.text()[-3000:])
    assert job.attempts == 2 and job.error == ""  # started over (the note while it ran), then done
    assert job.done_requests == 4 and results_summary(job) == [(1, 0)] * 4  # one set of results, the new one
    ended = (job.finished_at, job.results)

    # acks_late: the second worker acknowledges its delivery after the task returns, a moment after the row
    # says done; until then two messages are unacknowledged (one CI run read 2 here).
    wait_for(lambda: int(stack.client().hlen("unacked")) == 1, "the second worker acknowledges its own delivery")
    assert stack.redeliver_unacked() == 1  # the lost worker's message, once its visibility timeout passed
    wait_for(stack.drained, "the redelivered task is consumed and acknowledged")
    wait_for(lambda: second.text().count("succeeded") >= 2, "the second worker reports both deliveries")
    job.refresh_from_db()
    assert job.status == BenchJob.Status.DONE and job.attempts == 2 and (job.finished_at, job.results) == ended
    assert BenchJob.objects.filter(owner=owner).count() == 1


@pytest.mark.integration
def test_redis_restarted_mid_job_the_job_still_ends_done_with_one_set_of_results(stack: Stack, owner: User) -> None:
    workers = [stack.start_worker(), stack.start_worker()]

    def logs() -> str:
        return "".join(worker.text() for worker in workers)

    job = start_job(stack, owner)
    stack.dispatch(job.pk)  # a second delivery while it runs, as a broker hiccup can make: the idle worker gets it
    wait_for(lambda: "retry: Retry in 3s" in logs(), "the duplicate waits for the running job (EngineBusy)")
    stack.server.stop()  # SIGTERM: it saves its data as it goes, like a restart of the embedded one
    time.sleep(1.5)  # a heartbeat or two fails meanwhile
    stack.start_redis()

    def finished() -> bool:
        job.refresh_from_db()
        return job.status not in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING)

    wait_for(finished, "the job finishes", timeout=40)
    assert job.status == BenchJob.Status.DONE, (job.error, logs()[-3000:])
    assert job.attempts == 1 and job.done_requests == 4 and job.error == ""
    assert results_summary(job) == [(1, 0)] * 4
    ended = (job.finished_at, job.results)

    # The idle worker holding the duplicate (a countdown retry) dies on the restart here: kombu 5.7's channel
    # close after a lost connection raises AttributeError ('NoneType' object has no attribute 'hostname').
    # Its message stays unacknowledged in Redis until the visibility timeout, which this stands in for.
    stack.redeliver_unacked()
    wait_for(stack.drained, "every delivery is consumed and acknowledged")
    assert "could not renew the engine lock" in logs()  # the heartbeat met the outage and went on
    job.refresh_from_db()
    assert job.status == BenchJob.Status.DONE and job.attempts == 1 and (job.finished_at, job.results) == ended
    assert BenchJob.objects.filter(owner=owner).count() == 1
    assert not stack.client().exists(f"lab:bench-engine:{stack.engine_url}")  # the engine lock was released


@pytest.mark.integration
def test_the_engine_lease_renews_takes_back_a_lost_lock_and_never_raises(stack: Stack) -> None:
    client = stack.client()
    key = "lab:bench-engine:http://lease"
    with engine_lock("http://lease") as lease:
        assert 55 < client.pttl(key) / 1000 <= ENGINE_LOCK_S  # short: a killed worker's expires soon
        with pytest.raises(EngineBusy), engine_lock("http://lease"):
            pass
        client.pexpire(key, 5000)
        assert lease.renew() and client.pttl(key) > 55_000
        client.delete(key)  # Redis restarted without its data
        assert lease.renew() and client.get(key) == lease.token.encode()
        client.set(key, "another job")
        assert lease.renew() is False and client.get(key) == b"another job"
        client.set(key, lease.token)
        stack.server.stop()
        assert lease.renew() is False  # Redis down: the job goes on
        stack.start_redis()
        assert lease.renew()
    assert not client.exists(key)
    stack.server.stop()
    with pytest.raises(EngineBusy):  # Redis down: the task retries later
        with engine_lock("http://lease"):
            pass


@pytest.mark.integration
def test_a_worker_killed_mid_run_in_a_pool_loses_no_waiting_run_and_runs_none_twice(
    stack: Stack, owner: User, settings: Any
) -> None:
    from bench.models import Engine

    # The scripted engine is a registered one in a pool of its own, for this process and the worker alike
    # (which has its own configured engine): not this process's configured engine.
    settings.VLLM_BASE_URL = "http://127.0.0.1:9"
    tag = uuid.uuid4().hex[:8]
    engine = Engine.objects.create(
        name=f"faults-{tag}", base_url=stack.engine_url, pool=f"faults-{tag}", hardware="scripted", role="measure"
    )
    other = User.objects.create_user(username=f"faults-other-{tag}")
    try:
        first = stack.start_worker()
        wait_for(lambda: bool(stack.client().exists("_kombu.binding.bench")), "the worker listens on the bench queue")
        ana, ben = (  # one engine in the pool: Ana's run goes first (neither was served), Ben's waits
            services.job_submit(owner=who, kind="speed", config={"repeats": 1}, engine_url=stack.engine_url)
            for who in (owner, other)
        )
        assert not ana.pinned and not ben.pinned

        def ana_mid_run() -> bool:
            ana.refresh_from_db()
            assert ana.status in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING), (ana.error, first.text()[-3000:])
            return ana.status == BenchJob.Status.RUNNING and ana.done_requests >= 1

        wait_for(ana_mid_run, "Ana's run is measuring")
        first.kill()
        assert int(stack.client().hlen("unacked")) >= 1  # acks_late: the tasks are not lost with their worker

        # The killed worker's engine lock still guards the engine; it expires within ENGINE_LOCK_S, sooner here.
        assert stack.client().delete(f"lab:bench-engine:{stack.engine_url}") == 1
        second = stack.start_worker()

        def put_back() -> bool:
            # By this process or by the new worker's own reaping timer (every second here), whichever comes first.
            if services.jobs_reap_stale() == 1:
                return True
            ana.refresh_from_db()
            return ana.status != BenchJob.Status.RUNNING or ana.attempts == 2

        wait_for(put_back, "the lost worker's run goes back to the queue", timeout=15)
        stack.redeliver_unacked()

        def both_done() -> bool:
            ana.refresh_from_db()
            ben.refresh_from_db()
            return all(j.status not in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING) for j in (ana, ben))

        wait_for(both_done, "both runs end on the next worker", timeout=60)
        wait_for(stack.drained, "every delivery is consumed and acknowledged")
        assert ben.status == BenchJob.Status.DONE, (ben.error, second.text()[-3000:])
        assert ben.attempts == 1 and ben.engine_url == stack.engine_url and results_summary(ben) == [(1, 0)] * 4
        assert ana.status == BenchJob.Status.DONE and ana.attempts == 2, (ana.error, second.text()[-3000:])
        assert results_summary(ana) == [(1, 0)] * 4
        assert ben.started_at and ana.started_at and ben.started_at < ana.started_at  # never served: Ben first
    finally:
        other.delete()
        engine.delete()


@pytest.mark.integration
def test_a_runs_end_starts_the_next_waiting_run_though_waiting_tasks_would_ask_only_in_ten_minutes(
    stack: Stack, owner: User, settings: Any
) -> None:
    """bench.tasks.hand_on with real workers: three learners' runs on one engine, two workers whose waiting
    tasks ask again only every 600 s. Each run's end sends the next run's task, so all three end in turn,
    and the workers were sent about three tasks a run (its own, one ask while another measured, the hand-on),
    not one every few seconds for as long as it waited."""
    from bench.models import Engine

    settings.VLLM_BASE_URL = "http://127.0.0.1:9"  # the pool's engine is a registered one, as in the test above
    tag = uuid.uuid4().hex[:8]
    engine = Engine.objects.create(
        name=f"hand-{tag}", base_url=stack.engine_url, pool=f"hand-{tag}", hardware="scripted", role="measure"
    )
    others = [User.objects.create_user(username=f"hand-{who}-{tag}") for who in ("ben", "cho")]
    try:
        workers = [stack.start_worker(BENCH_WAITING_ASK_S="600") for _ in range(2)]
        wait_for(lambda: bool(stack.client().exists("_kombu.binding.bench")), "the workers listen on the bench queue")
        jobs = [
            services.job_submit(owner=who, kind="speed", config={"repeats": 1}, engine_url=stack.engine_url)
            for who in (owner, *others)
        ]

        def logs() -> str:
            return "".join(worker.text() for worker in workers)

        def all_ended() -> bool:
            rows = BenchJob.objects.filter(pk__in=[j.pk for j in jobs])
            return not rows.filter(status__in=(BenchJob.Status.QUEUED, BenchJob.Status.RUNNING)).exists()

        wait_for(all_ended, "the three runs end one after another", timeout=120)
        rows = list(BenchJob.objects.filter(pk__in=[j.pk for j in jobs]).order_by("started_at"))
        assert [j.status for j in rows] == ["done"] * 3, ([j.error for j in rows], logs()[-3000:])
        assert all(j.attempts == 1 and j.engine_url == stack.engine_url for j in rows)
        assert "Retry in 600s" in logs()  # a waiting task did ask while another run measured
        received = tasks.deliveries_logged(logs())
        print(f"\nthree runs on one engine: {received} job_run deliveries")  # each is logged "received" once
        assert 3 <= received <= 3 * 3, logs()[-3000:]  # each run's own task at least
    finally:
        for who in others:
            who.delete()
        engine.delete()
