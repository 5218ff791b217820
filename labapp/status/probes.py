"""Probe every component of the lab and report each one green or red.

Each probe runs in its own thread with a deadline, so a dead or hanging
component turns red with its error instead of stalling the page. The results are
kept STATUS_CACHE_S seconds in Django's cache: however many visitors reload the
page, the engine, the worker and the embedding model are asked once in that time.
Any URL in a detail or an error is shown without its credentials.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

StrOrPromise = str | Promise


@dataclass
class ComponentStatus:
    key: str
    label: str
    ok: bool
    round_trip_ms: float | None = None
    details: dict[str, str] = field(default_factory=dict)
    error: str = ""


Probe = Callable[[], dict[str, str]]


def probe_database() -> dict[str, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return {
            "engine": connection.vendor,
            "server": str(connection.display_name),
            "name": str(connection.settings_dict["NAME"]),
        }
    finally:
        connection.close()  # probes run in short-lived threads: do not leak a connection each


def _redis_ping(url: str) -> dict[str, str]:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
        return {"url": url, "version": str(client.info("server").get("redis_version", "?"))}
    finally:
        client.close()


def probe_redis() -> dict[str, str]:
    return _redis_ping(settings.REDIS_URL)


def probe_chroma() -> dict[str, str]:
    from rag import vectorstore

    info = vectorstore.info()
    return {"url": settings.CHROMA_URL, "version": info.version}


def probe_vllm() -> dict[str, str]:
    from rag.vllm import client as vllm_client

    # One deadline over its three requests, inside the probe's own (this runs in a pool thread: no loop).
    info = asyncio.run(vllm_client.probe(vllm_client.base_url(), wanted=settings.VLLM_MODEL or None, timeout=5.0))
    return {
        "url": info.base_url,
        "model": info.model,
        "max_model_len": str(info.max_model_len),
        "version": info.version,
    }


def probe_celery() -> dict[str, str]:
    from labapp.celery import app

    try:
        _redis_ping(settings.CELERY_BROKER_URL)  # fail fast: a control ping to a dead broker retries
    except Exception as exc:
        raise RuntimeError(f"the broker ({settings.CELERY_BROKER_URL}) is unreachable: {exc}") from exc
    # A connection of its own: the app's pooled one may be a dead socket from before a Redis
    # restart ("Connection closed by server"), which would call a live worker down.
    with app.connection_for_write() as connection:
        replies = app.control.ping(timeout=1.5, limit=1, connection=connection)  # the first worker to answer
    if not replies:
        raise RuntimeError(f"no Celery worker answered a ping within 1.5 s (broker {settings.REDIS_URL})")
    names = sorted(name for reply in replies for name in reply)
    return {"workers": ", ".join(names), "queues": "default, bench"}


def probe_embeddings() -> dict[str, str]:
    from rag import embeddings

    vector = embeddings.embed(["상태 확인"])[0]
    return {"model": embeddings.model_label(), "dimensions": str(len(vector))}


@dataclass(frozen=True)
class ComponentProbe:
    key: str
    label: StrOrPromise
    call: Probe
    deadline_s: float
    # One-time work (imports, loading a model) done before the timed call, so the
    # round trip shown is the component's, not this process's start-up.
    warmup: Callable[[], object] | None = None
    # CPU-bound probes run after the others, so they do not inflate their round trips.
    cpu_bound: bool = False


def _warm_chroma() -> object:
    from rag import vectorstore

    return vectorstore.client()


def _warm_embeddings() -> object:
    from rag import embeddings

    return embeddings.get_model()


PROBES: list[ComponentProbe] = [
    ComponentProbe("database", _("데이터베이스"), probe_database, 5.0),
    ComponentProbe("redis", "Redis", probe_redis, 5.0),
    ComponentProbe("chroma", "Chroma", probe_chroma, 5.0, _warm_chroma),
    ComponentProbe("vllm", "vLLM", probe_vllm, 6.0),
    ComponentProbe("celery", _("Celery 워커"), probe_celery, 6.0),
    ComponentProbe("embeddings", _("임베딩 모델"), probe_embeddings, 5.0, _warm_embeddings, cpu_bound=True),
]
WARMUP_DEADLINE_S = 60.0  # the first embedding model load takes several seconds


def _timed(probe: Probe) -> tuple[dict[str, str], float]:
    started = time.perf_counter()
    details = probe()
    return details, (time.perf_counter() - started) * 1000


def _run_all(pool: ThreadPoolExecutor, calls: dict[str, tuple[Callable[[], Any], float]]) -> dict[str, Any]:
    """Run calls concurrently; each result is its value or the exception it ended with."""
    futures = {key: (pool.submit(call), deadline) for key, (call, deadline) in calls.items()}
    started = time.monotonic()
    results: dict[str, Any] = {}
    for key, (future, deadline) in futures.items():
        try:
            results[key] = future.result(timeout=max(0.1, deadline - (time.monotonic() - started)))
        except FutureTimeout:
            results[key] = TimeoutError(f"no answer within {deadline:g} s")
        except Exception as exc:  # a probe's failure is the component's status, not the page's
            results[key] = exc
    return results


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"


_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s]*@")


def without_credentials(text: str) -> str:
    """``text`` with every URL's ``user:password@`` taken out (``redis://:secret@host`` -> ``redis://host``)."""
    return _CREDENTIALS.sub(r"\g<scheme>", text)


CACHE_KEY, DOWN_KEY = "status:components", "status:down"
_probing = threading.Lock()  # a reload storm waits for the check under way instead of starting its own


def check_all() -> list[ComponentStatus]:
    """Every component's state, probed at most once per STATUS_CACHE_S seconds (per cache)."""
    found: list[ComponentStatus] | None = cache.get(CACHE_KEY)
    if found is None:
        with _probing:
            found = cache.get(CACHE_KEY)
            if found is None:
                found = _probe_all()
                if settings.STATUS_CACHE_S > 0:
                    cache.set(CACHE_KEY, found, settings.STATUS_CACHE_S)
    labels = {probe.key: probe.label for probe in PROBES}  # in the language of this request
    return [replace(c, label=str(labels.get(c.key, c.label))) for c in found]


def _probe_all() -> list[ComponentStatus]:
    pool = ThreadPoolExecutor(max_workers=len(PROBES), thread_name_prefix="status")
    try:
        warm = _run_all(pool, {p.key: (p.warmup, WARMUP_DEADLINE_S) for p in PROBES if p.warmup})
        ready = [p for p in PROBES if not isinstance(warm.get(p.key), BaseException)]
        timed: dict[str, Any] = {}
        for cpu_bound in (False, True):
            batch = [p for p in ready if p.cpu_bound is cpu_bound]
            timed |= _run_all(pool, {p.key: (partial(_timed, p.call), p.deadline_s) for p in batch})
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    results: list[ComponentStatus] = []
    for probe in PROBES:
        outcome = timed[probe.key] if probe.key in timed else warm[probe.key]
        if isinstance(outcome, BaseException):
            error = without_credentials(_describe(outcome))
            results.append(ComponentStatus(probe.key, str(probe.label), False, error=error))
        else:
            details, ms = outcome
            shown = {name: without_credentials(value) for name, value in details.items()}
            results.append(ComponentStatus(probe.key, str(probe.label), True, round(ms, 1), shown))
    cache.set(DOWN_KEY, [s.key for s in results if not s.ok], 60)
    return results


def down_components() -> list[str] | None:
    """Labels of the components found down by the last check (None: not checked yet)."""
    value = cache.get(DOWN_KEY)
    if value is None:
        return None
    labels = {probe.key: probe.label for probe in PROBES}
    return [str(labels.get(key, key)) for key in value]
