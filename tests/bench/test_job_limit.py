"""The per-user active-jobs limit holds when one person submits twice at the same moment."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections

from bench import services, tasks
from bench.models import BenchJob

# How long a submit that has counted waits for the other one to count too. With the limit
# atomic the other one cannot count (it waits on the lock), so this is how long the good
# path pauses; it is not an assertion about speed.
OTHER_COUNTS_S = 1.5


@pytest.fixture
def file_database(transactional_db: None, tmp_path: Path) -> Iterator[Callable[[], None]]:
    """This test's database copied to a file, as a class server's SQLite is, and a switch to it.

    The shared in-memory test database fails a second writer at once ("database table is
    locked"); a file database makes it wait for the first one's transaction (the busy
    timeout in settings), as the site does. Call the switch in every thread that uses it.
    On PostgreSQL (the CI's second run) every thread's connection already is the site's kind.
    """
    if connection.vendor != "sqlite":
        yield lambda: None
        return
    path = tmp_path / "lab.sqlite3"
    connection.ensure_connection()
    copy = sqlite3.connect(path)
    connection.connection.backup(copy)
    copy.close()
    original = connections["default"]
    settings_dict = {**original.settings_dict, "NAME": str(path)}

    def use_file() -> None:
        connections["default"] = original.__class__(settings_dict, alias="default")

    use_file()
    try:
        yield use_file
    finally:
        connections["default"].close()
        connections["default"] = original


@pytest.mark.django_db(transaction=True)
def test_two_submits_at_once_with_a_limit_of_one_make_exactly_one_job(
    file_database: Callable[[], None], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.BENCH_MAX_ACTIVE_JOBS_PER_USER = 1
    owner = User.objects.create_user("twice")
    monkeypatch.setattr(tasks.job_run, "delay", lambda job_id: None)  # no broker: the row is what counts
    both_counted = threading.Barrier(2, timeout=OTHER_COUNTS_S)
    counted = services.busy_retry_after_s

    def count_then_pause(**kwargs: Any) -> int | None:
        # The race window made wide: each submit has counted before either creates.
        wait_s = counted(**kwargs)
        try:
            both_counted.wait()
        except threading.BrokenBarrierError:
            pass  # the other submit is held until this one is done: what an atomic limit does
        return wait_s

    monkeypatch.setattr(services, "busy_retry_after_s", count_then_pause)
    outcomes: list[str] = []

    def submit() -> None:
        file_database()
        try:
            services.job_submit(owner=owner, kind="speed", config={"repeats": 1})
            outcomes.append("made")
        except services.JobsBusy:
            outcomes.append("busy")
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["busy", "made"]
    assert BenchJob.objects.filter(owner=owner).count() == 1
