"""Typed readers for the environment variables the lab understands.

Every variable the project reads is declared once in ``VARIABLES`` so that the
configuration table of docs/operations.md (tests/test_docs.py), the docker compose file
(tests/ops/test_docker_compose.py) and the settings module can be checked against one
list.  A bad value stops
start-up with an ``ImproperlyConfigured`` error that names the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    help: str


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in [
        Variable("LAB_MODE", "local", "`local` (one learner, no sign-in) or `class` (a class server)"),
        Variable("DEBUG", "false", "Django debug pages; never on for a deployment"),
        Variable("SECRET_KEY", "", "required in class mode; local mode keeps one in data/secret_key"),
        Variable("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]", "comma-separated host names"),
        Variable("SECURE_SSL_REDIRECT", "true", "class mode: redirect http to https (false when a proxy does it)"),
        Variable("CSRF_TRUSTED_ORIGINS", "", "comma-separated origins behind a proxy (https://lab.example.org)"),
        Variable(
            "DATABASE_URL",
            "",
            "empty: SQLite at DATA_DIR/lab.sqlite3; or sqlite:///path or postgres://user:pass@host:5432/db",
        ),
        Variable(
            "REDIS_URL", "", "Redis for Celery and the channel layer; empty = embedded redis-server on REDIS_PORT"
        ),
        Variable("CHROMA_URL", "", "Chroma server; empty = embedded `chroma run` on CHROMA_PORT"),
        Variable(
            "VLLM_BASE_URL", "", "OpenAI-compatible vLLM server (without /v1); empty = embedded engine on VLLM_PORT"
        ),
        Variable("VLLM_MODEL", "", "model name served by vLLM; empty = the embedded Gemma 3 270M"),
        Variable(
            "LAB_ROUTER",
            "auto",
            "chat through vllm-router (embedded on LAB_ROUTER_PORT) in front of LAB_ROUTER_ENGINES; "
            "`auto` = on when LAB_ENGINES gives a chat pool",
        ),
        Variable(
            "LAB_ROUTER_URL",
            "",
            "vllm-router run elsewhere (its base URL, with LAB_ROUTER=true); empty = embedded on LAB_ROUTER_PORT",
        ),
        Variable(
            "LAB_ROUTER_ENGINES",
            "",
            "comma-separated engine base URLs the router spreads the chat over; empty = the chat engines of "
            "LAB_ENGINES, else the configured engine",
        ),
        Variable(
            "LAB_ROUTER_POLICY",
            "consistent_hash",
            "router's --policy: consistent_hash (on X-Session-ID), round_robin, cache_aware, power_of_two, random",
        ),
        Variable(
            "LAB_ENGINES",
            "auto",
            "embedded CPU engines `make run` starts, each on its own cores and port from VLLM_PORT; "
            "`auto` = one per 2 cores and per 8 GiB of memory (one on a 2-core machine)",
        ),
        Variable(
            "LAB_CHAT_ENGINES",
            "auto",
            "of LAB_ENGINES, how many only chat (the last ones; the others only measure); "
            "`auto` = 1 when there are two or more, 0 = every engine measures and chats",
        ),
        Variable("VLLM_MAX_MODEL_LEN", "8192", "--max-model-len for the embedded engine"),
        Variable(
            "VLLM_DTYPE",
            "auto",
            "embedded engine's --dtype; `auto` = bfloat16 on GPUs and bf16-capable CPUs, else float32",
        ),
        Variable(
            "VLLM_CPU_THREADS", "all", "embedded CPU engine: `all` binds every core, or a count/range such as 0-1"
        ),
        Variable(
            "VLLM_CPU_NICE",
            "10",
            "embedded CPU engines run at this niceness (0-19), so the web processes go first on shared cores; "
            "0 = as any other process",
        ),
        Variable(
            "EMBEDDING_MODEL", "", "sentence-transformers model path or name; empty = the bundled all-MiniLM-L6-v2"
        ),
        Variable(
            "EMBEDDING_BACKEND",
            "auto",
            "`onnx` (the bundled model, exported at setup), `torch` (sentence-transformers), `auto`: onnx if exported",
        ),
        Variable(
            "CHAT_TIMEOUT_S", "120", "chat: seconds to wait for vLLM (connect, each streamed chunk) before failing"
        ),
        Variable(
            "BENCH_STALE_S", "90", "benchmark jobs: a running job silent this long (its worker lost) is marked failed"
        ),
        Variable(
            "BENCH_ENGINE_DOWN_WAIT_S",
            "180",
            "benchmark jobs: runs wait this long for a measuring engine that does not answer, then fail naming it",
        ),
        Variable(
            "BENCH_WAITING_ASK_S",
            "30",
            "benchmark jobs: while a run of its queue measures, a waiting run's task asks this often "
            "(a run's end starts the next at once; this is the fallback)",
        ),
        Variable(
            "CHAT_MAX_CONCURRENT_PER_USER", "4", "chat: answers one user may have streaming at once, in all their tabs"
        ),
        Variable(
            "CHAT_SLOTS_PER_ENGINE",
            "4",
            "chat admission: answers in flight per engine; one more waits in line (rag.admission says why 4)",
        ),
        Variable("CHAT_LINE_MAX", "30", "chat admission: asks that may wait in line per engine; one more is refused"),
        Variable(
            "CHAT_WAIT_MAX_S",
            "90",
            "chat admission: an ask whose expected wait is longer is refused at once with a retry time",
        ),
        Variable(
            "BENCH_MAX_ACTIVE_JOBS_PER_USER",
            "3",
            "benchmark page: queued + running jobs one user may have; one more is refused until one ends",
        ),
        Variable("DOCUMENTS_MAX_PER_USER", "20", "documents one user may own (all collections); one more is refused"),
        Variable("DOCUMENTS_MAX_MB_PER_USER", "50", "documents: total MB of uploads one user may own"),
        Variable("PDF_MAX_PAGES", "200", "documents: a PDF with more pages fails with the reason (read by the worker)"),
        Variable("PDF_TIMEOUT_S", "60", "documents: seconds the worker may spend reading one PDF's text"),
        Variable(
            "DOCUMENT_QUEUED_STALE_S",
            "600",
            "documents: a queued document's task is sent again after this long, and it fails after twice this",
        ),
        Variable(
            "SIGNUPS_PER_ADDRESS_PER_HOUR",
            "400",
            "class sign-up: new accounts one client address may make in an hour (a class behind one NAT shares one)",
        ),
        Variable(
            "JOINS_PER_CLASS_PER_MINUTE",
            "120",
            "classes: new members (sign-ups and joins) one class takes in a minute; one more is told to wait",
        ),
        Variable(
            "ENGINE_PROBE_CACHE_S",
            "10",
            "engines page: seconds one engine's probe result is reused (0 = probe on every load)",
        ),
        Variable("STATUS_CACHE_S", "5", "status page: seconds its probe results are reused (0 = probe on every hit)"),
        Variable("WEB_HOST", "127.0.0.1", "address Daphne listens on (0.0.0.0 for a class server)"),
        Variable("WEB_PORT", "8000", "port of the Daphne web server"),
        Variable(
            "WEB_REQUEST_THREADS",
            "16",
            "web: threads kept for pages' synchronous work, reused request after request; 0 = Django's default "
            "(two new threads per request)",
        ),
        Variable(
            "WEB_WARM_UP",
            "true",
            "web: load the Korean analyser and the embedding model before serving (on first use they hold the "
            "interpreter's lock for seconds, stalling every socket of the process)",
        ),
        Variable("REDIS_PORT", "6399", "port of the embedded redis-server"),
        Variable("CHROMA_PORT", "8100", "port of the embedded Chroma server"),
        Variable("VLLM_PORT", "8200", "port of the embedded vLLM engine"),
        Variable("LAB_ROUTER_PORT", "8300", "port of the embedded vllm-router"),
        Variable("LAB_ROUTER_METRICS_PORT", "8301", "port of the embedded vllm-router's Prometheus /metrics"),
        Variable("DATA_DIR", "data", "where the embedded stack keeps its files"),
    ]
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str:
    if name not in VARIABLES:
        raise KeyError(f"{name} is not declared in labapp.env.VARIABLES")
    return os.environ.get(name, VARIABLES[name].default).strip()


def is_set(name: str) -> bool:
    return bool(os.environ.get(name, "").strip())


def env_str(name: str) -> str:
    return _raw(name)


def env_bool(name: str) -> bool:
    value = _raw(name).lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean: use true or false")


def env_int(name: str, *, minimum: int = 0, maximum: int = 2**31) -> int:
    value = _raw(name)
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a whole number") from None
    if not minimum <= number <= maximum:
        raise ImproperlyConfigured(f"{name}={number} is outside {minimum}..{maximum}")
    return number


def env_int_or_auto(name: str, auto: Callable[[], int], *, minimum: int = 0, maximum: int = 2**31) -> int:
    """A whole number, or ``auto``: what ``auto()`` makes of this machine."""
    if _raw(name).lower() == "auto":
        return auto()
    return env_int(name, minimum=minimum, maximum=maximum)


def env_list(name: str) -> list[str]:
    return [item.strip() for item in _raw(name).split(",") if item.strip()]


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    value = _raw(name).lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}")
    return value


def env_url(name: str, *, schemes: tuple[str, ...]) -> str:
    """A URL with one of ``schemes`` and a host; a trailing slash is dropped."""
    return _url(name, _raw(name), schemes)


def env_urls(name: str, *, schemes: tuple[str, ...]) -> list[str]:
    """A comma-separated list of such URLs (``env_url``), each checked."""
    return [_url(name, value, schemes) for value in env_list(name)]


def _url(name: str, value: str, schemes: tuple[str, ...]) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a valid URL: {exc}") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a valid URL: expected {' or '.join(s + '://host' for s in schemes)}"
        )
    return value.rstrip("/")
