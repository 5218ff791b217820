"""The engines a run can use: the configured one plus those admins and instructors register
(who may: ``labapp.access.may_register_engine``), each in a pool with a role (which engine runs
which job, and where the chat goes: ``bench.pools``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from bench.models import DEFAULT_POOL, Engine
from labapp import addresses, said
from labapp import engine_layout as layout
from rag.vllm import client as vllm_client

SESSION_KEY = "engine_url"


CONFIGURED = "default"  # the configured engine's key on the engines page (it has no row, so no id)


@dataclass(frozen=True)
class Choice:
    url: str  # may carry credentials: shown only through labapp.addresses, posted never
    name: str
    hardware: str = ""
    model: str = ""
    configured: bool = False
    id: int | None = None  # the registered engine's row
    pool: str = DEFAULT_POOL
    role: str = Engine.Role.BOTH
    number: int = 1  # a configured engine's number in the layout (labapp.engine_layout), 1: VLLM_BASE_URL

    @property
    def measures(self) -> bool:
        """Lab runs and benchmark jobs may run on it."""
        return self.role in (Engine.Role.MEASURE, Engine.Role.BOTH)

    @property
    def chats(self) -> bool:
        """The chat may answer on it."""
        return self.role in (Engine.Role.CHAT, Engine.Role.BOTH)

    @property
    def role_label(self) -> str:
        return str(Engine.Role(self.role).label)

    @property
    def key(self) -> str:
        """What the page posts to pick this engine: its id, or CONFIGURED (CONFIGURED-2, … for the layout's
        other engines); never its address."""
        if self.id is not None:
            return str(self.id)
        return CONFIGURED if self.number == 1 else f"{CONFIGURED}-{self.number}"


def configured() -> list[Choice]:
    """The configured engines: VLLM_BASE_URL and the other engines `make run` starts (LAB_ENGINES), each
    with its role in the layout (``labapp.engine_layout``)."""
    return [
        Choice(
            spec.url,
            # Kept as keys where they are saved (an answer's engine): said again in each reader's language.
            said.gettext("기본 엔진") if spec.number == 1 else said.gettext("엔진 %(n)d") % {"n": spec.number},
            configured=True,
            role=spec.role,
            number=spec.number,
        )
        for spec in layout.current().engines
    ]


def choices() -> list[Choice]:
    """The configured engines (the first is VLLM_BASE_URL's), then the registered ones."""
    known = configured()
    urls = {c.url.rstrip("/") for c in known}
    rows = [
        Choice(e.base_url, e.name, e.hardware, e.model, id=e.pk, pool=e.pool, role=e.role) for e in Engine.objects.all()
    ]
    return known + [c for c in rows if c.url.rstrip("/") not in urls]


def chosen_url(session: Any, options: list[Choice] | None = None) -> str:
    """The learner's pick (kept in their session) while it is still registered (among ``options``,
    default: ``choices()``), else the configured engine."""
    wanted = session.get(SESSION_KEY) if session is not None else None
    urls = {c.url for c in (choices() if options is None else options)}
    return wanted if wanted in urls else vllm_client.base_url()


def member(url: str, options: list[Choice] | None = None) -> Choice | None:
    """The engine at ``url`` among ``options`` (default: ``choices()``), a trailing slash aside, or None."""
    bare = url.rstrip("/")
    return next((c for c in (choices() if options is None else options) if c.url.rstrip("/") == bare), None)


def name_of(url: str, options: list[Choice] | None = None) -> str:
    """The engine's name (among ``options``, default: ``choices()``), or (for one no longer registered)
    its address as a reader may see it."""
    found = member(url, options)
    return found.name if found is not None else addresses.shown(url)


class EngineError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


NOT_A_WEB_ADDRESS = gettext_lazy("http:// 또는 https:// 로 시작하는 주소여야 합니다 (예: http://gpu-box:8000).")


def is_web_address(url: str) -> bool:
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - a port out of range raises here
    except ValueError:  # "http://[bad" and the like
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.hostname)


POOL_MAX = 50


def engine_add(
    *,
    user: Any,
    name: str,
    base_url: str,
    model: str = "",
    hardware: str = "",
    pool: str = "",
    role: str = Engine.Role.BOTH,
) -> Engine:
    name, base_url, pool = name.strip(), base_url.strip().rstrip("/"), pool.strip() or DEFAULT_POOL
    if not name:
        raise EngineError("name", _("이름을 적어 주세요."))
    if len(pool) > POOL_MAX:
        raise EngineError("pool", _("풀 이름은 %(n)d자까지입니다.") % {"n": POOL_MAX})
    if role not in Engine.Role.values:
        raise EngineError("role", _("역할은 측정, 채팅, 측정과 채팅 중 하나입니다."))
    if not is_web_address(base_url):
        raise EngineError("base_url", str(NOT_A_WEB_ADDRESS))
    if Engine.objects.filter(name=name).exists():
        raise EngineError("name", _("같은 이름의 엔진이 이미 있습니다."))
    if layout.current().by_url(base_url) is not None or Engine.objects.filter(base_url=base_url).exists():
        raise EngineError("base_url", _("이 주소의 엔진은 이미 있습니다."))
    return Engine.objects.create(
        name=name,
        base_url=base_url,
        model=model.strip(),
        hardware=hardware.strip(),
        pool=pool,
        role=role,
        added_by_id=user.pk,
    )


PROBE_TIMEOUT_S = 2.0  # one probe in all: an engine that answers later is down for the page

# What a learner reads for a failed probe: a short reason, never the error's own text (which
# would make a registered address a port scanner).
REASONS = {
    "unreachable": gettext_noop("연결할 수 없습니다"),
    "timeout": gettext_noop("시간 초과"),
    "http_status": gettext_noop("오류로 응답했습니다"),
    "not_openai": gettext_noop("응답 형식이 OpenAI 호환이 아닙니다"),
    "no_model": gettext_noop("제공하는 모델이 없습니다"),
    "model_missing": gettext_noop("등록한 모델을 제공하지 않습니다"),
}


@dataclass(frozen=True)
class Probe:
    """One engine's state: up with its model, max length, version and round trip, or down with why.

    ``reason`` is for everyone, in the reader's language (``why`` keeps it as ``labapp.said`` does,
    so a result kept in the cache reads right in either language); ``detail`` (an HTTP status, a
    content type, an exception's class name) is for those who may register engines.
    """

    ok: bool
    ms: int
    model: str = ""
    max_model_len: int | None = None
    version: str = ""
    why: dict[str, Any] = field(default_factory=dict)
    detail: str = ""

    @property
    def reason(self) -> str:
        return said.shown("", self.why)


async def probe(choice: Choice, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    started = time.perf_counter()
    try:
        info = await vllm_client.probe(choice.url, wanted=choice.model or None, timeout=timeout)
    except vllm_client.EngineUnavailable as exc:
        ms = round((time.perf_counter() - started) * 1000)
        return Probe(False, ms, why=said.kept(said.gettext(REASONS[exc.reason])).form, detail=exc.detail)
    ms = round((time.perf_counter() - started) * 1000)
    return Probe(True, ms, info.model, info.max_model_len, info.version)


async def probe_all(items: list[Choice], timeout: float = PROBE_TIMEOUT_S) -> list[tuple[Choice, Probe]]:
    """Every engine probed at once: the page waits for the slowest, at most ``timeout``."""
    found = await asyncio.gather(*(probe(item, timeout) for item in items))
    return list(zip(items, found, strict=True))


_probing = threading.Lock()  # a reload storm waits for the probes under way instead of sending its own


def _cache_key(choice: Choice) -> str:
    # Hashed: an address may carry credentials, and cache keys are not the place for them.
    return "engine-probe:" + hashlib.sha256(f"{choice.url}\n{choice.model}".encode()).hexdigest()


def probed(items: list[Choice]) -> list[tuple[Choice, Probe]]:
    """Every engine's state for the engines page: a result is reused for ENGINE_PROBE_CACHE_S seconds
    (per engine, in Django's cache), so however often the page is reloaded an engine gets at most one
    probe per that time from this process; the engines with no fresh result are probed at once."""
    found = cache.get_many([_cache_key(c) for c in items])
    if len(found) < len(items):
        with _probing if settings.ENGINE_PROBE_CACHE_S > 0 else contextlib.nullcontext():
            found = cache.get_many([_cache_key(c) for c in items])
            missing = [c for c in items if _cache_key(c) not in found]
            fresh = {_cache_key(c): p for c, p in async_to_sync(probe_all)(missing)} if missing else {}
            if fresh and settings.ENGINE_PROBE_CACHE_S > 0:
                cache.set_many(fresh, settings.ENGINE_PROBE_CACHE_S)
            found |= fresh
    return [(c, found[_cache_key(c)]) for c in items]


def chatting_in_pool(url: str) -> list[tuple[str, str]]:
    """(URL, name) of the engines of ``url``'s pool that chat (role chat or both): what vllm-router may
    spread a conversation over (``bench.kinds.router_policy``)."""
    options = choices()
    found = member(url, options)
    pool = found.pool if found is not None else DEFAULT_POOL
    return [(c.url, c.name) for c in options if c.chats and c.pool == pool]
