"""The engines a run can use: the configured one plus those admins and instructors register
(who may: ``labapp.access.may_register_engine``)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from django.utils.translation import gettext as _

from bench.models import Engine
from rag.vllm import client as vllm_client

SESSION_KEY = "engine_url"


@dataclass(frozen=True)
class Choice:
    url: str
    name: str
    hardware: str = ""
    model: str = ""
    configured: bool = False


def choices() -> list[Choice]:
    default = Choice(vllm_client.base_url(), _("기본 엔진"), configured=True)
    rows = [Choice(e.base_url, e.name, e.hardware, e.model) for e in Engine.objects.all()]
    return [default] + [c for c in rows if c.url != default.url]


def chosen_url(session: Any) -> str:
    """The learner's pick (kept in their session) while it is still registered, else the configured engine."""
    wanted = session.get(SESSION_KEY) if session is not None else None
    urls = {c.url for c in choices()}
    return wanted if wanted in urls else vllm_client.base_url()


def name_of(url: str) -> str:
    return next((c.name for c in choices() if c.url == url), url)


class EngineError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def engine_add(*, user: Any, name: str, base_url: str, model: str = "", hardware: str = "") -> Engine:
    name, base_url = name.strip(), base_url.strip().rstrip("/")
    if not name:
        raise EngineError("name", _("이름을 적어 주세요."))
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise EngineError("base_url", _("http:// 또는 https:// 로 시작하는 주소여야 합니다 (예: http://gpu-box:8000)."))
    if Engine.objects.filter(name=name).exists():
        raise EngineError("name", _("같은 이름의 엔진이 이미 있습니다."))
    if base_url == vllm_client.base_url().rstrip("/") or Engine.objects.filter(base_url=base_url).exists():
        raise EngineError("base_url", _("이 주소의 엔진은 이미 있습니다."))
    return Engine.objects.create(
        name=name, base_url=base_url, model=model.strip(), hardware=hardware.strip(), added_by_id=user.pk
    )


def probe(choice: Choice, timeout: float = 2.0) -> dict[str, Any]:
    """Up or down, with the model, max model length, version and round trip, or the error."""
    started = time.perf_counter()
    try:
        info = vllm_client.engine_info(timeout=timeout, url=choice.url, wanted=choice.model or None)
    except vllm_client.EngineUnavailable as exc:
        return {"ok": False, "error": str(exc), "ms": round((time.perf_counter() - started) * 1000)}
    return {
        "ok": True,
        "model": info.model,
        "max_model_len": info.max_model_len,
        "version": info.version,
        "ms": round((time.perf_counter() - started) * 1000),
    }


def probe_all(items: list[Choice]) -> list[tuple[Choice, dict[str, Any]]]:
    """Every engine probed at once (a dead one costs its timeout, not the sum of all)."""
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(items)))) as pool:
        return list(zip(items, pool.map(probe, items), strict=True))
