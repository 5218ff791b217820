"""Engine pools with real parts: the harness's Redis and Celery worker (two slots, as `make run` starts it)
and two scripted engines in one pool. Two learners' runs go to the pool, run at the same time, one on each
engine, and each job records the engine that measured it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import services
from bench.models import BenchJob, Engine
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
