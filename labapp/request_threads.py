"""Kept threads for the pages' synchronous work, instead of two new threads per request.

Django's ASGI handler runs each request in asgiref's ``ThreadSensitiveContext``: the
request's synchronous code (middleware, views, the ORM) gets a single-thread executor of its
own, whose thread is started on first use, and on the way out one more thread is started to
shut that executor down. ``Thread.start`` waits on the event loop's thread until the new
thread runs. On two cores with the engine busy, that wait is long: profiled under
`make load` (py-spy, 30 s, every thread including idle ones), the web process's event loop
spent 14 % of its wall time in those two ``Thread.start`` calls, and every chat token and
websocket frame queued behind them.

``KeptRequestThreads`` wraps the HTTP application: each request takes a single-thread executor
from a pool of ``size`` kept ones and enters asgiref's ``ThreadSensitiveContext(executor=…)``,
so Django's own context finds one already set and starts nothing. A request beyond ``size`` at
once is handled as Django handles it (threads of its own). Executors hold one thread each
and run one call at a time, as Django's per-request ones do; a thread is reused only by one
request after another, never by two at once.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext


class KeptRequestThreads:
    def __init__(self, app: Any, size: int) -> None:
        self.app = app
        self.size = size
        self._idle: list[ThreadPoolExecutor] = []
        self._made = 0
        self._lock = threading.Lock()

    def _take(self) -> ThreadPoolExecutor | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self._made >= self.size:
                return None
            self._made += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def _give_back(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            self._idle.append(executor)

    @property
    def threads(self) -> int:
        """Executors made so far (each holds one thread once used)."""
        return self._made

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        executor = self._take() if scope.get("type") == "http" else None
        if executor is None:
            await self.app(scope, receive, send)
            return
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            self._give_back(executor)
