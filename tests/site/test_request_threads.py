"""Pages' synchronous work on kept threads (labapp.request_threads), through the real ASGI application."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from channels.testing import HttpCommunicator

from labapp.request_threads import KeptRequestThreads
from tests import aio


async def _get(app: Any, path: str = "/healthz") -> tuple[int, bytes]:
    response = await HttpCommunicator(app, "GET", path, headers=[(b"host", b"localhost")]).get_response(timeout=10)
    return int(response["status"]), bytes(response["body"])


class _Probe:
    """An app that handles a request as Django's handler does (in a ``ThreadSensitiveContext`` of its
    own), doing thread-sensitive work twice and saying on which threads."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.release = asyncio.Event()
        self.hold = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async with ThreadSensitiveContext():
            first = await sync_to_async(threading.get_ident)()
            if self.hold:
                await self.release.wait()
            second = await sync_to_async(threading.get_ident)()
        self.seen.append((first, second))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _thread_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []
    original = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        original(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    return started


@pytest.mark.parametrize("size", [4, 0])
def test_requests_one_after_another_reuse_one_kept_thread_and_start_none(
    size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a pool, five requests after the first start no thread; without (``0``: Django's way),
    each starts two: its executor's thread and the one that shuts the executor down."""
    probe = _Probe()
    app = KeptRequestThreads(probe, size=size)

    async def go() -> list[str]:
        await _get(app)  # with a pool, the kept thread starts here, once
        started = _thread_starts(monkeypatch)
        for _ in range(5):
            assert await _get(app) == (200, b"ok")
        return started

    started = aio.run(go())
    if size:
        assert started == [] and app.threads == 1
        assert len({thread for pair in probe.seen for thread in pair}) == 1  # the same thread throughout
    else:
        assert len(started) >= 2 * 5, started
    assert all(first == second for first, second in probe.seen)


def test_requests_at_once_get_a_thread_each_and_past_the_pool_are_served_as_django_serves_them() -> None:
    probe = _Probe()
    probe.hold = True
    app = KeptRequestThreads(probe, size=2)

    async def go() -> list[tuple[int, bytes]]:
        asks = [asyncio.ensure_future(_get(app)) for _ in range(3)]
        while app.threads < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        probe.release.set()
        return await asyncio.gather(*asks)

    assert aio.run(go()) == [(200, b"ok")] * 3
    assert app.threads == 2  # the third was beyond the pool: a thread of Django's own
    assert len({first for first, _second in probe.seen}) == 3  # never two requests on one thread at once
    assert all(first == second for first, second in probe.seen)


@pytest.mark.django_db(transaction=True)
def test_the_lab_application_serves_pages_through_the_kept_threads(settings: Any) -> None:
    from labapp import asgi

    assert isinstance(asgi.http_app, KeptRequestThreads) and asgi.http_app.size == settings.WEB_REQUEST_THREADS

    async def go() -> list[tuple[int, bytes]]:
        return [await _get(asgi.application, "/healthz") for _ in range(3)]

    assert aio.run(go()) == [(200, b"ok")] * 3
    assert 1 <= asgi.http_app.threads <= 3
