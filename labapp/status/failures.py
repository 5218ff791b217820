"""Why a component is down, in the reader's words: no page shows an exception's class or text.

A probe's exception is sorted here into a failure a reader can act on (not running, no
answer in time, answered with an error, the wrong model, no worker, …); the exception
itself goes to the server log (and, for admins, to ``/status.json``), not to a page.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from django.db import DatabaseError
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class BrokerUnreachable(RuntimeError):
    """The Celery broker did not answer, so no worker could be asked."""


class NoWorker(RuntimeError):
    """The broker answered but no Celery worker replied to a ping."""


# Every failure a probe can end with, by a stable code (kept in the status cache, which serves readers
# of both languages), and its words.
REASONS: dict[str, Promise] = {
    "not_running": _("연결하지 못했습니다: 꺼져 있거나 설정한 주소가 틀렸습니다."),
    "timeout": _("정해진 시간 안에 답하지 않았습니다. 과부하이거나 멈춰 있을 수 있습니다."),
    "http_status": _("연결은 됐지만 오류 상태로 답했습니다. 엔진이 아직 모델을 올리는 중이거나 고장 났습니다."),
    "not_openai": _("그 주소의 서버가 OpenAI 호환 API로 답하지 않습니다: vLLM이 아닌 것 같습니다."),
    "no_model": _("엔진이 모델을 하나도 올리지 않았습니다."),
    "model_missing": _("엔진이 설정한 모델(VLLM_MODEL)을 올리지 않았습니다."),
    "refused_password": _("비밀번호가 맞지 않아 연결을 거절했습니다."),
    "no_broker": _("메시지 브로커(Redis)에 닿지 못해 워커에게 물어볼 수 없습니다."),
    "no_worker": _("답한 Celery 워커가 없습니다: 워커가 꺼져 있거나 아직 시작 중입니다."),
    "no_engine": _("라우터는 답했지만 뒤의 엔진이 모두 작동하지 않아 채팅을 보낼 곳이 없습니다."),
    "database": _("데이터베이스에 연결하거나 질의하지 못했습니다."),
    "not_installed": _("필요한 설치나 파일이 없어 불러오지 못했습니다. make setup을 다시 실행하세요."),
    "unexpected": _("예상하지 못한 오류로 답하지 못했습니다. 자세한 내용은 서버 로그에 있습니다."),
}
# vLLM's probe sorts its own failures (``rag.vllm.client.EngineUnavailable.reason``).
ENGINE_REASONS = {"unreachable": "not_running"}


def _engine(exc: BaseException) -> str | None:
    from rag.vllm.client import EngineUnavailable

    if not isinstance(exc, EngineUnavailable):
        return None
    return ENGINE_REASONS.get(exc.reason, exc.reason if exc.reason in REASONS else "not_running")


def _redis(exc: BaseException) -> str | None:
    import redis

    if isinstance(exc, redis.AuthenticationError | redis.AuthenticationWrongNumberOfArgsError):
        return "refused_password"
    if isinstance(exc, redis.TimeoutError):
        return "timeout"
    return "not_running" if isinstance(exc, redis.ConnectionError) else None


def _chroma(exc: BaseException) -> str | None:
    from rag.vectorstore import RetrievalUnavailable

    return "not_running" if isinstance(exc, RetrievalUnavailable) else None


def _router(exc: BaseException) -> str | None:
    from rag.vllm.router import NoHealthyEngine

    return "no_engine" if isinstance(exc, NoHealthyEngine) else None


def _by_type(exc: BaseException) -> str | None:
    kinds: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
        (BrokerUnreachable, "no_broker"),
        (NoWorker, "no_worker"),
        (DatabaseError, "database"),
        ((TimeoutError, httpx.TimeoutException), "timeout"),
        ((ConnectionError, httpx.ConnectError), "not_running"),
        ((ImportError, FileNotFoundError), "not_installed"),
    )
    return next((code for kind, code in kinds if isinstance(exc, kind)), None)


SORTERS: tuple[Callable[[BaseException], str | None], ...] = (_engine, _redis, _chroma, _router, _by_type)


def reason(exc: BaseException) -> str:
    """The code of the failure ``exc`` stands for (a key of ``REASONS``)."""
    return next((code for sort in SORTERS if (code := sort(exc)) is not None), "unexpected")


def words(code: str) -> str:
    """A failure's words in the reader's language."""
    return str(REASONS.get(code, REASONS["unexpected"]))
