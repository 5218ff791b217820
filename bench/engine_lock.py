"""One job per engine at a time, across every worker: a Redis lock a running job's heartbeat renews."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.conf import settings

from labapp import addresses

if TYPE_CHECKING:
    from redis.lock import Lock

logger = logging.getLogger(__name__)

ENGINE_LOCK_S = 60  # a killed worker's engine lock frees itself within a minute; a live job's beat renews it


class EngineBusy(RuntimeError):
    """Another job is measuring the same engine; this one waits its turn."""


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
    # One key per engine however its address is spelled (a job's may end with a slash).
    lock = client.lock(f"lab:bench-engine:{engine_url.rstrip('/')}", timeout=hold_s, thread_local=False)
    try:
        acquired = lock.acquire(blocking=False)
    except redis.RedisError as exc:
        raise EngineBusy(addresses.scrubbed(f"{addresses.shown(engine_url)} (Redis: {exc})")) from exc
    if not acquired:
        raise EngineBusy(addresses.shown(engine_url))
    token = bytes(lock.local.token).decode()  # a hex UUID: the same bytes when encoded back
    try:
        yield EngineLease(lock, token)
    finally:
        try:
            lock.release()
        except redis.RedisError:
            pass  # expired meanwhile, taken by another job after that, or Redis is down: it expires on its own
        client.close()
