"""Probe every component of the lab and report each one green or red.

Each probe runs in its own thread with a deadline, so a dead or hanging
component turns red with its error instead of stalling the page. The results are
kept STATUS_CACHE_S seconds in Django's cache: however many visitors reload the
page, the engine, the worker and the embedding model are asked once in that time.
Any URL in a detail or an error is shown without its credentials (``labapp.addresses``). A component that is down is
described in words (``failures``), never by its exception, which goes to the server log; one that the
stack supervisor started and that has not answered yet reads "starting", with the time left
(``labapp.starts``).
"""

from __future__ import annotations

import asyncio
import logging
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
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from labapp import addresses, starts
from labapp.status import failures

StrOrPromise = str | Promise
log = logging.getLogger(__name__)


class State:
    OK = "ok"
    STARTING = "starting"  # started by the supervisor, not answering yet
    DOWN = "down"


@dataclass
class ComponentStatus:
    key: str
    label: str
    ok: bool
    round_trip_ms: float | None = None
    details: dict[str, str] = field(default_factory=dict)
    error: str = ""  # the exception, for admins' /status.json and the log only; pages show ``words``
    state: str = State.OK
    reason: str = ""  # why it is down: a key of ``failures.REASONS``
    ends_at: float | None = None  # starting: when (wall clock) its start is expected to be over
    noun: str = ""  # what "… 시작 중" names (the engine, not "vLLM")
    expected_s: float | None = None  # starting: the start-up time expected …
    from_starts: int = 0  # … as the median of this many recorded starts (0: the stated default)
    engine: int = 0  # an engine of the layout: its number (``labapp.status.engines`` adds its role and queue)
    role: dict[str, Any] | None = None  # that engine's role, pool and queue, read per request (``engines.rows``)

    @property
    def words(self) -> str:
        """Why it is down, in the reader's language ("" when it is up)."""
        return failures.words(self.reason) if self.state == State.DOWN else ""

    @property
    def labelled_details(self) -> list[tuple[str, str]]:
        """The details under their names in the reader's language (an unknown key as it is)."""
        return [(str(DETAIL_LABELS.get(key, key)), value) for key, value in self.details.items()]

    @property
    def remaining_s(self) -> int | None:
        """Starting: whole seconds left of its expected start-up (0 once past it)."""
        return None if self.ends_at is None else max(0, round(self.ends_at - time.time()))


Probe = Callable[[], dict[str, str]]

# The details' names as a reader sees them; the keys stay as they are in /status.json (for scripts).
DETAIL_LABELS = {
    "engine": _("종류"),
    "server": _("서버"),
    "name": _("이름"),
    "url": _("주소"),
    "version": _("버전"),
    "model": _("모델"),
    "max_model_len": _("최대 길이(토큰)"),
    "policy": _("라우팅 정책"),
    "engines": _("정상 엔진 수"),
    "healthy": _("정상 엔진 주소"),
    "unhealthy": _("응답 없는 엔진 주소"),
    "bundled": _("패키지에 포함된 모델, 실행 방식"),
    "workers": _("워커"),
    "queues": _("대기열"),
    "dimensions": _("차원"),
}


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


def probe_engine(url: str) -> dict[str, str]:
    """Another engine of the layout (LAB_ENGINES), as ``probe_vllm`` asks the first."""
    from rag.vllm import client as vllm_client

    info = asyncio.run(vllm_client.probe(url, wanted=settings.VLLM_MODEL or None, timeout=5.0))
    found = {"url": info.base_url, "model": info.model, "max_model_len": str(info.max_model_len)}
    return found | {"version": info.version}


def probe_router() -> dict[str, str]:
    from rag.vllm import router

    pool = router.workers(timeout=4.0)
    healthy = sum(w.healthy for w in pool)
    if not healthy:
        raise router.NoHealthyEngine(f"vllm-router at {router.url()}: none of its {len(pool)} engines is healthy")
    return {
        "url": router.url(),
        "policy": str(settings.LAB_ROUTER_POLICY),
        "engines": f"{healthy}/{len(pool)}",
        "healthy": ", ".join(w.url for w in pool if w.healthy),
    } | ({"unhealthy": ", ".join(w.url for w in pool if not w.healthy)} if healthy < len(pool) else {})


def probe_celery() -> dict[str, str]:
    from labapp.celery import app

    try:
        _redis_ping(settings.CELERY_BROKER_URL)  # fail fast: a control ping to a dead broker retries
    except Exception as exc:
        raise failures.BrokerUnreachable(f"the broker ({settings.CELERY_BROKER_URL}) is unreachable: {exc}") from exc
    # A connection of its own: the app's pooled one may be a dead socket from before a Redis
    # restart ("Connection closed by server"), which would call a live worker down.
    with app.connection_for_write() as connection:
        replies = app.control.ping(timeout=1.5, limit=1, connection=connection)  # the first worker to answer
    if not replies:
        raise failures.NoWorker(f"no Celery worker answered a ping within 1.5 s (broker {settings.REDIS_URL})")
    names = sorted(name for reply in replies for name in reply)
    return {"workers": ", ".join(names), "queues": "default, bench"}


def probe_embeddings() -> dict[str, str]:
    from rag import embeddings

    vector = embeddings.embed(["상태 확인"])[0]
    # Plain values, no translated words: the details are cached for STATUS_CACHE_S whoever asked.
    bundled = embeddings.is_bundled_model()
    model = embeddings.BUNDLED_NAME if bundled else settings.EMBEDDING_MODEL
    return {"model": model} | ({"bundled": embeddings.backend()} if bundled else {}) | {"dimensions": str(len(vector))}


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
    stack_name: str = ""  # the supervisor's name for it (``labapp.starts``); "" when it does not start it
    noun: StrOrPromise = ""  # what its start is called ("엔진 시작 중"); "" for its label
    where: Callable[[], str] | None = None  # the address it was asked at, shown beside a failure's words
    configured: Callable[[], bool] = lambda: True  # False: not part of this lab (no row at all)
    engine: int = 0  # an engine of the layout (labapp.engine_layout): its number


def _warm_chroma() -> object:
    from rag import vectorstore

    return vectorstore.client()


def _warm_embeddings() -> object:
    from rag import embeddings

    return embeddings.get_model()


PROBES: list[ComponentProbe] = [
    ComponentProbe("database", _("데이터베이스"), probe_database, 5.0),
    ComponentProbe("redis", "Redis", probe_redis, 5.0, stack_name="redis", where=lambda: settings.REDIS_URL),
    ComponentProbe(
        "chroma", "Chroma", probe_chroma, 5.0, _warm_chroma, stack_name="chroma", where=lambda: settings.CHROMA_URL
    ),
    ComponentProbe(
        "vllm",
        "vLLM",
        probe_vllm,
        6.0,
        stack_name="engine",
        noun=_("엔진"),
        where=lambda: settings.VLLM_BASE_URL,
        engine=1,
    ),
    ComponentProbe(
        "router",
        _("vLLM 라우터"),
        probe_router,
        6.0,
        stack_name="router",
        noun=_("라우터"),
        where=lambda: settings.ROUTER_URL,
        configured=lambda: bool(settings.LAB_ROUTER),
    ),
    ComponentProbe(
        "celery", _("Celery 워커"), probe_celery, 6.0, stack_name="worker", where=lambda: settings.CELERY_BROKER_URL
    ),
    ComponentProbe("embeddings", _("임베딩 모델"), probe_embeddings, 5.0, _warm_embeddings, cpu_bound=True),
]
WARMUP_DEADLINE_S = 60.0  # the first embedding model load takes several seconds


def engine_label(number: int) -> StrOrPromise:
    return format_lazy(_("vLLM 엔진 {number}"), number=number)


def all_probes() -> list[ComponentProbe]:
    """PROBES, with a row for each other engine of the layout (LAB_ENGINES) after the first engine's; with
    several engines the first's row is named by its number as well."""
    from labapp import engine_layout as layout

    specs = layout.current().engines
    if len(specs) == 1:
        return list(PROBES)
    others = [
        ComponentProbe(
            f"vllm-{spec.number}",
            engine_label(spec.number),
            partial(probe_engine, spec.url),
            6.0,
            stack_name=spec.name,
            noun=_("엔진"),
            where=lambda url=spec.url: url,  # type: ignore[misc]
            engine=spec.number,
        )
        for spec in specs[1:]
    ]
    found: list[ComponentProbe] = []
    for probe in PROBES:
        found += [replace(probe, label=engine_label(1)), *others] if probe.key == "vllm" else [probe]
    return found


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
    probes = {probe.key: probe for probe in all_probes()}  # labels in the language of this request
    return [_in_language(c, probes.get(c.key)) for c in found]


def _in_language(found: ComponentStatus, probe: ComponentProbe | None) -> ComponentStatus:
    if probe is None:
        return found
    return replace(found, label=str(probe.label), noun=str(probe.noun or probe.label))


def _failed(probe: ComponentProbe, exc: BaseException) -> ComponentStatus:
    """A probe that did not answer: starting when the supervisor started it and it has not answered yet,
    else down, for a reason in words; the exception goes to the log (and admins' JSON)."""
    error = addresses.scrubbed(_describe(exc))
    where = {"url": addresses.scrubbed(str(probe.where()))} if probe.where is not None else {}
    start = starts.read(probe.stack_name) if probe.stack_name else None
    if start is not None and start.starting():
        found = ComponentStatus(probe.key, str(probe.label), False, details=where, error=error, state=State.STARTING)
        return replace(found, ends_at=start.ends_at(), expected_s=start.expected_s, from_starts=len(start.durations))
    log.warning("status: %s is down: %s", probe.key, error)
    down = ComponentStatus(probe.key, str(probe.label), False, details=where, error=error, state=State.DOWN)
    return replace(down, reason=failures.reason(exc))


def _probe_all() -> list[ComponentStatus]:
    probes = [p for p in all_probes() if p.configured()]
    pool = ThreadPoolExecutor(max_workers=len(probes), thread_name_prefix="status")
    try:
        warm = _run_all(pool, {p.key: (p.warmup, WARMUP_DEADLINE_S) for p in probes if p.warmup})
        ready = [p for p in probes if not isinstance(warm.get(p.key), BaseException)]
        timed: dict[str, Any] = {}
        for cpu_bound in (False, True):
            batch = [p for p in ready if p.cpu_bound is cpu_bound]
            timed |= _run_all(pool, {p.key: (partial(_timed, p.call), p.deadline_s) for p in batch})
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    results: list[ComponentStatus] = []
    for probe in probes:
        outcome = timed[probe.key] if probe.key in timed else warm[probe.key]
        if isinstance(outcome, BaseException):
            found = _failed(probe, outcome)
        else:
            details, ms = outcome
            shown = {name: addresses.scrubbed(value) for name, value in details.items()}
            found = ComponentStatus(probe.key, str(probe.label), True, round(ms, 1), shown)
        results.append(replace(found, engine=probe.engine))
    cache.set(DOWN_KEY, [s for s in results if not s.ok], 60)
    return results


def not_ok() -> list[ComponentStatus] | None:
    """The components found down or starting by the last check, in this request's language (None: not
    checked yet)."""
    value = cache.get(DOWN_KEY)
    if value is None:
        return None
    probes = {probe.key: probe for probe in all_probes()}
    return [_in_language(c, probes.get(c.key)) for c in value if isinstance(c, ComponentStatus)]
