"""Engine pools with real parts: the harness's Redis and Celery worker (two slots, as `make run` starts it)
and two scripted engines in one pool. Two learners' runs go to the pool, run at the same time, one on each
engine, and each job records the engine that measured it."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import translation

from bench import pools, services, tasks
from bench.models import BenchJob, Engine
from bench.outages import Outages
from labapp.ops import scripted
from tests import harness

pytestmark = pytest.mark.integration


def wait_for(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting until {what}")


def test_two_learners_runs_measure_at_once_on_the_two_engines_of_their_pool_and_record_which(
    redis_server: str, celery_worker: harness.Service, shared_database: None
) -> None:
    tag = uuid.uuid4().hex[:8]
    scripts = [scripted.Script(delay_s=0.3), scripted.Script(delay_s=0.3)]  # 1.2 s a request: about 6 s a job
    with scripted.serve(scripts[0]) as first_url, scripted.serve(scripts[1]) as second_url:
        engines = [
            Engine.objects.create(
                name=f"pair-{tag}-{n}", base_url=url, pool=f"pair-{tag}", hardware="scripted", role="measure"
            )
            for n, url in enumerate((first_url, second_url))
        ]
        owners = [User.objects.create_user(username=f"pair-{tag}-{who}") for who in ("ana", "ben")]
        try:
            # Both picked the first engine; neither run is pinned to it.
            made = [
                services.job_submit(owner=owner, kind="speed", config={"repeats": 1}, engine_url=first_url)
                for owner in owners
            ]
            assert {(j.pool, j.hardware, j.pinned) for j in made} == {(f"pair-{tag}", "scripted", False)}

            def ended() -> bool:
                return not BenchJob.objects.filter(pk__in=[j.pk for j in made], status__in=["queued", "running"])

            wait_for(ended, "both runs end", timeout=90)
            jobs = list(BenchJob.objects.filter(pk__in=[j.pk for j in made]).order_by("pk"))
            assert [j.status for j in jobs] == ["done", "done"], ([j.error for j in jobs], celery_worker.log_tail())
            assert sorted(j.engine_url for j in jobs) == sorted([first_url, second_url])  # one on each
            assert all(j.attempts == 1 and j.done_requests == j.total_requests for j in jobs)
            first, second = jobs
            assert first.started_at and second.started_at and first.finished_at and second.finished_at
            # At the same time: each started before the other ended.
            assert max(first.started_at, second.started_at) < min(first.finished_at, second.finished_at)
            both = (first.finished_at - first.started_at) + (second.finished_at - second.started_at)
            span = max(first.finished_at, second.finished_at) - min(first.started_at, second.started_at)
            print(f"\ntwo runs on two engines: {both.total_seconds():.1f} s of runs in {span.total_seconds():.1f} s")
            assert all(script.requests for script in scripts)  # each engine measured one
            for job, owner in zip(jobs, owners, strict=True):
                client = Client()
                client.force_login(owner)
                engine = next(e for e in engines if e.base_url == job.engine_url)
                page = client.get(f"/bench/{job.pk}/").content.decode()
                assert "측정한 엔진" in page and engine.name in page
        finally:
            for owner in owners:
                owner.delete()
            for engine in engines:
                engine.delete()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_run_whose_only_engine_is_down_waits_saying_so_then_runs_on_it_once_it_answers(
    redis_server: str, celery_worker: harness.Service, shared_database: None
) -> None:
    """bench.outages: the worker's dispatch asks the free engine's health; one that does not answer is passed
    over, its run waits in the queue (its page says why) instead of failing at once, and runs when it is back."""
    tag, port = uuid.uuid4().hex[:8], _free_port()
    url = f"http://127.0.0.1:{port}"
    engine = Engine.objects.create(
        name=f"down-{tag}", base_url=url, pool=f"down-{tag}", hardware="scripted", role="measure"
    )
    owner = User.objects.create_user(username=f"down-{tag}")
    server = scripted.ThreadedServer(scripted.Script(delay_s=0.01))
    try:
        job = services.job_submit(owner=owner, kind="speed", config={"repeats": 1}, engine_url=url)
        wait_for(lambda: url in Outages().down_since([url]), "the worker finds the engine down", timeout=30)
        time.sleep(2 * tasks.WAIT_S)  # the task asked again meanwhile: the run still waits
        job.refresh_from_db()
        assert job.status == BenchJob.Status.QUEUED and job.error == "", (job.error, celery_worker.log_tail())
        client = Client()
        client.force_login(owner)
        page = client.get(f"/bench/{job.pk}/").content.decode()
        assert "측정 엔진이 응답하지 않아 돌아오기를 기다리는 중" in page, page
        client.cookies["django_language"] = "en"
        english = client.get(f"/bench/{job.pk}/").content.decode()
        assert "Waiting for the measuring engine to answer again" in english, english

        server.start(port)  # the engine is back at its address

        def ended() -> bool:
            job.refresh_from_db()
            return job.status not in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING)

        wait_for(ended, "the run starts on the engine once it answers, and ends", timeout=60)
        assert job.status == BenchJob.Status.DONE and job.engine_url == url, (job.error, celery_worker.log_tail())
        assert Outages().down_since([url]) == {}  # answered: the mark is cleared
    finally:
        server.stop()
        owner.delete()
        engine.delete()


def test_runs_fail_naming_the_engine_once_every_engine_of_their_queue_has_been_down_long_enough(
    redis_server: str, shared_database: None, settings: Any
) -> None:
    tag, port = uuid.uuid4().hex[:8], _free_port()
    url = f"http://127.0.0.1:{port}"
    queue = (f"gone-{tag}", "scripted")
    engine = Engine.objects.create(name=f"gone-{tag}", base_url=url, pool=queue[0], hardware=queue[1], role="measure")
    owner = User.objects.create_user(username=f"gone-{tag}")
    try:
        job = BenchJob.objects.create(
            owner=owner, kind="speed", config={"repeats": 1}, engine_url=url, pool=queue[0], hardware=queue[1]
        )
        assert pools.run_next(queue) is None  # down: passed over, the run waits
        assert BenchJob.objects.get(pk=job.pk).status == BenchJob.Status.QUEUED
        place = pools.place(BenchJob.objects.get(pk=job.pk))
        assert place is not None and place.engine_down_s is not None and place.gives_up_in_s is not None
        settings.BENCH_ENGINE_DOWN_WAIT_S = 0
        assert pools.run_next(queue) is None
        job.refresh_from_db()
        assert job.status == BenchJob.Status.FAILED and f"127.0.0.1:{port}" in job.error, job.error
        assert job.error.startswith("측정 엔진(")
        with translation.override("en"):
            assert job.error_shown.startswith("The measuring engine ("), job.error_text
    finally:
        owner.delete()
        engine.delete()
