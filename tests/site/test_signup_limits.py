"""The sign-up limits count where every web process counts together (``labapp.classes.throttle``).

The same sliding-log behaviour is checked on both stores: this process's cache (the unit tier)
and a real Redis (integration). Against Redis, two independent clients, each with its own
connections and nothing of the other's in memory (as two web processes would be), share one
count, and a race of many takes through several clients lets exactly the limit through: the
check-and-count is one step in Redis, not under a lock of one process. With Redis named but
unreachable, sign-up keeps working, counted in the process, with a warning naming Redis.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from labapp.classes import services, throttle
from tests.settings import free_port

PASSWORD = "a-long-enough-passphrase"  # noqa: S105 - test accounts
A = throttle.Limit("test-a", "TEST_LIMIT_A", "TEST_WINDOW_A")
B = throttle.Limit("test-b", "TEST_LIMIT_B", "TEST_WINDOW_B")

Take = Callable[..., tuple[throttle.Limit, int] | None]


@pytest.fixture
def limits(settings: Any, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A limits of 3 a minute, B of 2 an hour, and a scripted clock (returned: move it by hand)."""
    settings.TEST_LIMIT_A, settings.TEST_WINDOW_A = 3, 60
    settings.TEST_LIMIT_B, settings.TEST_WINDOW_B = 2, 3600
    now = [1_000_000.0]
    monkeypatch.setattr(throttle, "clock", lambda: now[0])
    cache.clear()
    return now


def _takes(settings: Any, url: str) -> Iterator[Take]:
    """``throttle.take`` counting in Redis at ``url``, each time through a new client (a process of
    its own, as far as Redis can tell), or in this process's cache (``url`` empty)."""
    settings.SIGNUP_LIMITS_REDIS_URL = url
    while True:
        for log in throttle._shared.values():
            log.client.close()
        throttle._shared.clear()
        yield throttle.take


def _sliding_log_behaves(takes: Iterator[Take], now: list[float]) -> None:
    who = uuid.uuid4().hex  # a Redis shared with other tests of the run: keys of this test's own
    for _n in range(3):
        assert next(takes)((A, who)) is None
    now[0] += 10
    assert next(takes)((A, who)) == (A, 50)  # the oldest of the three leaves the window in 50 s
    assert next(takes)((A, f"{who}-other")) is None  # per key
    # Two slots in one step: B has room, A does not: nothing counted in B either.
    assert next(takes)((B, who), (A, who)) == (A, 50)
    assert next(takes)((B, who)) is None
    assert next(takes)((B, who)) is None
    assert next(takes)((B, who), (A, f"{who}-third")) == (B, 3600)
    assert next(takes)((A, f"{who}-third")) is None  # the refused step above took nothing from it
    now[0] += 50
    assert next(takes)((A, who)) is None  # the window slid past the first events


def test_the_local_log_counts_checks_and_slides(settings: Any, limits: list[float]) -> None:
    _sliding_log_behaves(_takes(settings, ""), limits)


def test_the_redis_log_counts_checks_and_slides_across_clients(
    redis_server: str, settings: Any, limits: list[float]
) -> None:
    _sliding_log_behaves(_takes(settings, redis_server), limits)
    assert throttle._shared  # it was Redis that counted


def test_two_processes_share_one_count_in_redis(redis_server: str, limits: list[float]) -> None:
    one, two = throttle.RedisLog(redis_server), throttle.RedisLog(redis_server)
    assert one.client.connection_pool is not two.client.connection_pool
    who, now = uuid.uuid4().hex, limits[0]
    assert one.run([(A, who)], now, check=True, add=True) is None
    assert two.run([(A, who)], now, check=True, add=True) is None
    assert one.run([(A, who)], now, check=True, add=True) is None
    assert two.run([(A, who)], now, check=True, add=True) == (0, 60.0)  # the third was the other's
    assert one.run([(A, who)], now, check=True, add=True) == (0, 60.0)


def test_a_race_of_takes_through_many_clients_lets_exactly_the_limit_through(
    redis_server: str, settings: Any, limits: list[float]
) -> None:
    settings.TEST_LIMIT_A = 25
    who, taken, start = uuid.uuid4().hex, [], threading.Barrier(8)

    def hammer() -> None:
        log = throttle.RedisLog(redis_server)
        start.wait()
        for _n in range(20):
            taken.append(log.run([(A, who)], limits[0], check=True, add=True) is None)

    threads = [threading.Thread(target=hammer) for _n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 160 and taken.count(True) == 25


def test_sign_ups_through_the_site_count_in_redis(
    redis_server: str, settings: Any, db: None, limits: list[float]
) -> None:
    settings.LAB_MODE = "class"
    settings.SIGNUP_LIMITS_REDIS_URL = redis_server
    settings.JOINS_PER_CLASS_PER_MINUTE = 2
    room = services.classroom_create(name="레디스반", instructor=User.objects.create_user("inst-redis"))
    keys = [throttle.JOINS_PER_CLASS.key(str(room.pk))] + [
        throttle.SIGNUPS_PER_ADDRESS.key(f"10.9.0.{n}") for n in (0, 1, 9)
    ]
    redis.Redis.from_url(redis_server).delete(*keys)  # ids repeat from one test database to the next
    for n in range(2):
        assert _signup(f"10.9.0.{n}", room.join_code, f"r{n}").status_code == 302
    cache.clear()  # nothing of the count is in this process: it is all in Redis
    elsewhere = throttle.RedisLog(redis_server)  # another web process asks about the same class
    assert elsewhere.run([(throttle.JOINS_PER_CLASS, str(room.pk))], limits[0], check=True, add=False) == (0, 60.0)
    refused = _signup("10.9.0.9", room.join_code, "r9")
    assert refused.status_code == 429 and not User.objects.filter(username="r9").exists()
    redis.Redis.from_url(redis_server).delete(*keys)


def test_with_redis_unreachable_sign_up_works_counted_in_the_process_and_redis_is_named(
    settings: Any, db: None, limits: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    settings.LAB_MODE = "class"
    settings.SIGNUP_LIMITS_REDIS_URL = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"  # nothing listens there
    settings.JOINS_PER_CLASS_PER_MINUTE = 2
    room = services.classroom_create(name="끊긴반", instructor=User.objects.create_user("inst-down"))
    with caplog.at_level(logging.WARNING, logger="labapp.classes.throttle"):
        for n in range(2):
            assert _signup(f"10.8.0.{n}", room.join_code, f"d{n}").status_code == 302
        assert _signup("10.8.0.9", room.join_code, "d9").status_code == 429  # still bounded, in this process
    warnings = [r.getMessage() for r in caplog.records if r.name == "labapp.classes.throttle"]
    assert warnings and all("Redis at redis://127.0.0.1:" in w and "unreachable" in w for w in warnings)
    assert PASSWORD not in caplog.text


def _signup(address: str, code: str, username: str) -> Any:
    form = {"join_code": code, "username": username, "email": "", "password1": PASSWORD, "password2": PASSWORD}
    return Client(REMOTE_ADDR=address).post("/accounts/signup/", form)
