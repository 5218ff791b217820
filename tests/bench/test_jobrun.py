"""A job run's steps (claim, heartbeat, progress, partial, finish, fail) with a scripted measurement.

``bench.kinds.measure`` is replaced by a script that drives the run as its reporter, as a
job kind does: no engine, no HTTP. The same paths against a scripted server and real
workers are in test_bench_faults.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.utils import timezone

from bench import jobrun, kinds, services
from bench.jobrun import JobAlive, JobRun
from bench.models import BenchJob
from bench.reporting import Reporter
from rag.vllm import client as vllm_client

Script = Callable[[Reporter], Awaitable[tuple[dict[str, Any], bool]]]


@pytest.fixture
def engine_url(settings: Any) -> str:
    """The configured engine with its model named: the run asks no server which model it serves."""
    settings.VLLM_MODEL = "scripted-model"
    return vllm_client.base_url()


@pytest.fixture
def pushed(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the run tells the job's pages, in order."""
    messages: list[dict[str, Any]] = []

    async def push(job_id: int, message: dict[str, Any]) -> None:
        messages.append(message)

    monkeypatch.setattr(jobrun, "push", push)
    return messages


def scripted(monkeypatch: pytest.MonkeyPatch, script: Script) -> list[tuple[str, str, str]]:
    """``bench.kinds.measure`` runs ``script(reporter)``; the (kind, base_url, model) of each call."""
    calls: list[tuple[str, str, str]] = []

    async def measure(kind: str, config: Any, *, base_url: str, model: str, reporter: Reporter) -> Any:
        calls.append((kind, base_url, model))
        return await script(reporter)

    monkeypatch.setattr(kinds, "measure", measure)
    return calls


def cell(label: str, *, failed: int = 0, errors: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"label": label, "completed": 1 - min(failed, 1), "failed": failed, "errors": list(errors)}


def new_job(url: str, **fields: Any) -> BenchJob:
    owner = User.objects.create(username=f"runner-{User.objects.count()}")
    config = {"repeats": 1, "seed": 5}
    return BenchJob.objects.create(owner=owner, kind="speed", config=config, engine_url=url, total_requests=4, **fields)


async def row(job_id: int) -> BenchJob:
    return await sync_to_async(BenchJob.objects.get)(pk=job_id)


async def never(reporter: Reporter) -> tuple[dict[str, Any], bool]:
    raise AssertionError("the job was measured")


# --- claim --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_still_beating_in_another_worker_is_refused_and_left_as_it_is(
    engine_url: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.BENCH_STALE_S = 90
    now = timezone.now()
    job = new_job(engine_url, status="running", attempts=1, started_at=now, heartbeat_at=now, done_requests=2)
    calls = scripted(monkeypatch, never)
    with pytest.raises(JobAlive):
        JobRun(job.pk).run()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.done_requests) == ("running", 1, 2) and calls == []


@pytest.mark.django_db
def test_a_finished_job_is_not_claimed_and_an_exhausted_one_fails_without_measuring(
    engine_url: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.BENCH_STALE_S = 90
    calls = scripted(monkeypatch, never)
    done = new_job(engine_url, status="done", attempts=1, results={"cells": []})
    assert JobRun(done.pk).claim() is False
    assert BenchJob.objects.get(pk=done.pk).results == {"cells": []}

    old = timezone.now() - timedelta(seconds=200)
    lost = new_job(engine_url, status="running", attempts=2, started_at=old, heartbeat_at=old)
    failed = JobRun(lost.pk).run()
    assert failed.status == "failed" and failed.attempts == 2 and failed.finished_at is not None
    assert "2번 시작되었고" in failed.error and "(시도 2/2)" in failed.error and calls == []


@pytest.mark.django_db
def test_a_lost_workers_job_is_claimed_again_from_nothing_with_the_restart_note(
    engine_url: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.BENCH_STALE_S = 90
    old = timezone.now() - timedelta(seconds=200)
    job = new_job(engine_url, status="running", attempts=1, started_at=old, heartbeat_at=old, done_requests=3)
    BenchJob.objects.filter(pk=job.pk).update(results={"cells": [cell("old")]})
    run = JobRun(job.pk)
    assert run.claim() is True and run.attempt == 2
    job.refresh_from_db()
    assert (job.status, job.attempts, job.done_requests, job.results) == ("running", 2, 0, {})
    assert "시도 1의 워커가" in job.error and "(시도 2/2)" in job.error
    assert job.started_at is not None and job.started_at > old


# --- a run to its end -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_reports_progress_on_the_row_and_ends_done(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    seen: list[tuple[int, str]] = []

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        for done in range(1, 5):
            assert await reporter.progress(done, 4, f"cell {done}")
            now = await row(job.pk)
            seen.append((now.done_requests, now.current_cell))
        return {"cells": [cell(f"cell {n}") for n in range(1, 5)]}, False

    calls = scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert calls == [("speed", engine_url, "scripted-model")]
    assert seen == [(1, "cell 1"), (2, "cell 2"), (3, "cell 3"), (4, "cell 4")]
    assert (ended.status, ended.error, ended.done_requests, ended.current_cell) == ("done", "", 4, "")
    assert len(ended.results["cells"]) == 4 and ended.finished_at is not None and ended.attempts == 1
    assert pushed[0] == {"status": "running", "done": 1, "total": 4, "cell": "cell 1"}
    assert pushed[-1] == {"status": "done"}


@pytest.mark.django_db
def test_a_run_whose_row_was_lost_stops_and_leaves_the_row_as_the_reaper_left_it(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    answers: list[bool] = []

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        answers.append(await reporter.progress(1, 4, "a"))
        reaped = BenchJob.objects.filter(pk=job.pk)
        await sync_to_async(reaped.update)(status="failed", error="lost", finished_at=timezone.now())
        answers.append(await reporter.progress(2, 4, "b"))
        return {"cells": [cell("a"), cell("b")]}, True

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert answers == [True, False]  # the second report tells the kind to stop
    assert (ended.status, ended.error, ended.done_requests, ended.results) == ("failed", "lost", 1, {})
    assert [m["status"] for m in pushed] == ["running"]  # nothing after the row was lost


@pytest.mark.django_db
def test_a_cancel_stops_the_run_after_the_current_request_keeping_its_results(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    answers: list[bool] = []

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        cells = []
        for done in range(1, 5):
            cells.append(cell(f"cell {done}"))
            if done == 2:  # the learner presses Cancel while the second request runs
                ended = await sync_to_async(services.job_cancel)(job=await row(job.pk))
                assert ended.status == "running" and ended.cancel_requested
            answers.append(await reporter.progress(done, 4, f"cell {done}"))
            if not answers[-1]:
                return {"cells": cells, "cancelled": True}, True
        return {"cells": cells}, False

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert answers == [True, False]
    assert (ended.status, ended.error, ended.done_requests) == ("cancelled", "", 2)
    assert [c["label"] for c in ended.results["cells"]] == ["cell 1", "cell 2"]
    assert pushed[-1] == {"status": "cancelled"}


@pytest.mark.django_db
def test_finished_cells_are_saved_on_the_row_while_the_run_goes_on(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    mid_run: list[dict[str, Any]] = []

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        assert await reporter.progress(1, 4, "a")
        await reporter.partial({"cells": [cell("a")], "partial": True})
        mid_run.append((await row(job.pk)).results)
        assert await reporter.progress(4, 4, "b")
        return {"cells": [cell("a"), cell("b")]}, False

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert mid_run == [{"cells": [cell("a")], "partial": True}]
    assert ended.status == "done" and ended.results == {"cells": [cell("a"), cell("b")]}


@pytest.mark.django_db
def test_an_error_carrying_partial_results_fails_the_job_with_its_reason_and_keeps_them(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    kept = {"cells": [cell("a")], "cancelled": False}

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        assert await reporter.progress(1, 4, "a")
        exc = ConnectionError("the engine went away")
        exc.partial_results = kept  # type: ignore[attr-defined]
        raise exc

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert (ended.status, ended.error) == ("failed", "작업이 오류로 멈췄습니다: ConnectionError: the engine went away")
    assert ended.results == kept and ended.done_requests == 1 and ended.finished_at is not None
    assert ended.current_cell == "" and pushed[-1] == {"status": "failed"}


@pytest.mark.django_db
def test_failed_requests_fail_the_job_with_their_count_and_reasons_keeping_the_results(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    cells = [
        cell("a"),
        cell("b", failed=2, errors=("HTTP 500: boom", "timeout")),
        cell("c", failed=1, errors=("timeout",)),
    ]

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        return {"cells": cells}, False

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert ended.status == "failed" and ended.results == {"cells": cells}
    assert ended.error == "요청 3개가 실패했습니다: HTTP 500: boom; timeout"


@pytest.mark.django_db
def test_past_the_time_limit_the_run_stops_after_the_request_and_fails_keeping_its_results(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobrun, "JOB_TIME_LIMIT_S", -1)  # every report comes past it
    job = new_job(engine_url)
    answers: list[bool] = []

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        answers.append(await reporter.progress(1, 4, "a"))
        return {"cells": [cell("a")], "cancelled": True}, True

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk)
    assert answers == [False] and ended.status == "failed" and ended.results["cells"] == [cell("a")]
    assert ended.error.startswith("시간 제한(-1초)에 걸려 요청 4개 중 1개를 마치고 멈췄습니다"), ended.error


class CountingLease:
    def __init__(self) -> None:
        self.renewals = 0

    def renew(self) -> bool:
        self.renewals += 1
        return True


@pytest.mark.django_db
def test_the_heartbeat_beats_and_renews_the_lease_while_a_request_is_slow(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobrun, "HEARTBEAT_S", 0.01)
    job = new_job(engine_url)
    lease = CountingLease()
    beats: list[Any] = []

    async def script(reporter: Reporter) -> tuple[dict[str, Any], bool]:
        async with asyncio.timeout(30):  # one request, slow to answer: no progress report meanwhile
            while lease.renewals < 3 or len(set(beats)) < 2:
                await asyncio.sleep(0.01)
                beats.append((await row(job.pk)).heartbeat_at)
        return {"cells": [cell("slow")]}, False

    scripted(monkeypatch, script)
    ended = services.job_execute(job_id=job.pk, lease=lease)  # type: ignore[arg-type]
    assert ended.status == "done" and lease.renewals >= 3
    assert beats == sorted(beats) and ended.started_at is not None and ended.heartbeat_at is not None
    assert ended.heartbeat_at > ended.started_at


@pytest.mark.django_db
def test_a_saved_config_that_no_longer_parses_fails_the_job_at_once_naming_the_field(
    engine_url: str, pushed: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job(engine_url)
    BenchJob.objects.filter(pk=job.pk).update(config={"repeats": "many", "seed": 5})
    calls = scripted(monkeypatch, never)
    ended = services.job_execute(job_id=job.pk)
    assert ended.status == "failed" and calls == []
    assert ended.error.startswith("작업이 오류로 멈췄습니다: ConfigError: repeats:"), ended.error
    assert ended.finished_at is not None and pushed[-1] == {"status": "failed"}


@pytest.mark.django_db
def test_our_job_errors_are_worded_in_each_readers_language() -> None:
    """A failed job's error is stored with its message id: a Korean worker's words are not what
    an English reader sees (the site's language is still what logs and exports keep)."""
    from django.test import Client
    from django.utils import translation

    from labapp import said

    owner = User.objects.create(username="reader")
    with translation.override("en"):  # whatever the worker's language, ``error`` keeps the site's
        made = said.gettext("요청 %(count)d개가 실패했습니다: %(reasons)s") % {"count": 3, "reasons": "HTTP 500: boom"}
    fields = BenchJob.error_fields(made)
    job = BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://e", status="failed", **fields)
    assert job.error == "요청 3개가 실패했습니다: HTTP 500: boom"
    with translation.override("en"):
        assert job.error_shown == "3 request(s) failed: HTTP 500: boom"
    assert job.error_shown == job.error  # Korean by default
    client = Client()
    client.force_login(owner)
    client.cookies["django_language"] = "en"
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert "3 request(s) failed: HTTP 500: boom" in page and "실패했습니다" not in page
    # An error that is not one of ours (an exception's text) is shown as written.
    job.error, job.error_text = "RuntimeError: engine went away", {}
    assert job.error_shown == "RuntimeError: engine went away"


@pytest.mark.django_db
def test_the_data_migration_turns_older_job_errors_into_the_one_kept_form_and_back() -> None:
    from importlib import import_module

    from django.apps import apps
    from django.utils import translation

    migration = import_module("bench.migrations.0009_job_error_in_said_form")
    owner = User.objects.create(username="older")
    old = {"msgid": "요청 %(count)d개가 실패했습니다: %(reasons)s", "params": {"count": 3, "reasons": "HTTP 500"}}
    job = BenchJob.objects.create(
        owner=owner, kind="speed", engine_url="http://e", status="failed", error="요청 3개가 실패했습니다: HTTP 500",
        error_text=old,
    )  # fmt: skip
    plain = BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://e", status="failed", error="x")
    migration.forwards(apps, None)
    job.refresh_from_db()
    assert job.error_text == {"said": [[old["msgid"], old["params"]]]}
    with translation.override("en"):
        assert job.error_shown == "3 request(s) failed: HTTP 500"
    migration.backwards(apps, None)
    job.refresh_from_db()
    plain.refresh_from_db()
    assert job.error_text == old and plain.error_text == {}


@pytest.mark.django_db
def test_a_lab_page_puts_a_lost_workers_run_back_in_its_queue(engine_url: str, settings: Any) -> None:
    """A class watches its lab pages, not /bench/: a learner's run whose worker was killed must not stay
    "running" (and hold every run behind it on that engine) until someone opens a job page. Found by the
    rehearsal's worker fault (labapp/ops/rehearsal/faults.py): 10 of 24 runs waited to the time limit."""
    from django.test import Client

    settings.BENCH_STALE_S = 90
    old = timezone.now() - timedelta(seconds=200)
    job = new_job(engine_url, status="running", attempts=1, started_at=old, heartbeat_at=old, lab=1)
    client = Client()
    client.force_login(job.owner)
    assert client.get("/labs/1/").status_code == 200
    job.refresh_from_db()
    assert job.status == "queued"
