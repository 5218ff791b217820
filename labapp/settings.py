"""One settings module for every environment; values come from labapp.env."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.retry import Retry  # the layer's connections are asyncio ones: the sync Retry would not await them
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from labapp import engine_layout as layout
from labapp.env import env_bool, env_choice, env_int, env_int_or_auto, env_list, env_str, env_url, env_urls, is_set

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = (BASE_DIR / env_str("DATA_DIR")).resolve()

LAB_MODE = env_choice("LAB_MODE", ("local", "class"))
DEBUG = env_bool("DEBUG")


def _secret_key() -> str:
    if is_set("SECRET_KEY"):
        key = env_str("SECRET_KEY")
        if len(key) < 32:
            raise ImproperlyConfigured("SECRET_KEY is too short: use at least 32 random characters")
        return key
    if LAB_MODE == "class":
        raise ImproperlyConfigured("SECRET_KEY must be set when LAB_MODE=class")
    # Local mode: one learner on their own machine; keep a generated key in data/.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "csp",
    "axes",
    "labapp",
    "rag",
    "bench",
    "labapp.ops",
    "lti_tool",  # django-lti: LMS registrations, deployments, keys, launches
    "lti",
]

# The layers that set security headers come first: a response made by a layer (the 413 below, a
# bad Host's 400, CSRF's 403, a static file) passes out only through the layers listed before it,
# so every response carries them (tests/site/test_security_headers.py walks each way).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "labapp.middleware.KoreanFirstMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "labapp.session_ends.ActingRequestMiddleware",  # a session-ending event keeps the session that acted
    "labapp.middleware.RequestSizeLimitMiddleware",
    "labapp.accounts.LocalLearnerMiddleware",
    "labapp.accounts.PasswordChangeRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks: turns a locked-out sign-in into its page
]

ROOT_URLCONF = "labapp.urls"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
ASGI_APPLICATION = "labapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict[str, object]:
    # Unset: SQLite beside the stack's other files, so a second stack (another DATA_DIR) has its own.
    url = env_str("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'lab.sqlite3'}"
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        # A relative SQLite path is relative to the checkout, not the current directory.
        url = f"sqlite:///{(BASE_DIR / url.removeprefix('sqlite:///')).resolve()}"
    try:
        config = dict(dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True))
    except Exception as exc:  # the parser raises several types for one problem: a bad URL
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} is not a database URL: {exc}") from None
    engine = str(config.get("ENGINE", ""))
    if engine not in ("django.db.backends.sqlite3", "django.db.backends.postgresql"):
        raise ImproperlyConfigured(f"DATABASE_URL={url!r}: only sqlite:/// and postgres:// are supported")
    if engine.endswith("sqlite3"):
        Path(str(config["NAME"])).parent.mkdir(parents=True, exist_ok=True)
        # Connections are kept (as for PostgreSQL): opening one costs ~1 ms on SQLite with the
        # pragmas below, paid on every database hop of a chat ask otherwise (its "checked" step
        # 3.8 -> 3.0 ms, python manage.py chat_overhead --top-k 0, two AVX2 cores, 2026-12-02).
        # Write-ahead log: pages and searches read while an answer's row is written (no reader waits
        # for a writer), and a commit is one append: saving a chat answer's row took 5.0 ms with the
        # default rollback journal, 1.6 ms so (python manage.py chat_overhead, its "saved" step).
        # synchronous=NORMAL can lose the last commits on a power cut, never corrupt the file; a
        # class server keeps its data in PostgreSQL (DATABASE_URL).
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Embedded services listen on loopback ports; a URL in the environment means "use that one".
REDIS_EMBEDDED = not is_set("REDIS_URL")
REDIS_URL = (
    f"redis://127.0.0.1:{env_int('REDIS_PORT', minimum=1, maximum=65535)}/0"
    if REDIS_EMBEDDED
    else env_url("REDIS_URL", schemes=("redis", "rediss"))
)
CHROMA_EMBEDDED = not is_set("CHROMA_URL")
CHROMA_URL = (
    f"http://127.0.0.1:{env_int('CHROMA_PORT', minimum=1, maximum=65535)}"
    if CHROMA_EMBEDDED
    else env_url("CHROMA_URL", schemes=("http", "https"))
)
VLLM_EMBEDDED = not is_set("VLLM_BASE_URL")
VLLM_BASE_URL = (
    f"http://127.0.0.1:{env_int('VLLM_PORT', minimum=1, maximum=65535)}"
    if VLLM_EMBEDDED
    else env_url("VLLM_BASE_URL", schemes=("http", "https")).removesuffix("/v1")
)
# Empty: the embedded engine's model, or whatever the external server lists first.
VLLM_MODEL = env_str("VLLM_MODEL")
VLLM_CPU_THREADS = env_str("VLLM_CPU_THREADS")
VLLM_CPU_NICE = env_int("VLLM_CPU_NICE", minimum=0, maximum=19)
# The embedded engines: how many, and how many of them only chat (labapp.engine_layout, the one
# place that knows their ports, cores and roles; ``layout.current()`` reads these back).
LAB_ENGINES = env_int_or_auto("LAB_ENGINES", layout.machine_count, minimum=1, maximum=64)
LAB_CHAT_ENGINES = env_int_or_auto("LAB_CHAT_ENGINES", lambda: layout.default_chat(LAB_ENGINES), minimum=0, maximum=63)
try:
    _LAYOUT = layout.build(
        first_url=VLLM_BASE_URL,
        embedded=VLLM_EMBEDDED,
        count=LAB_ENGINES,
        chat=LAB_CHAT_ENGINES,
        threads=VLLM_CPU_THREADS,
    )
except layout.LayoutError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# The chat through vllm-router (labapp.ops.stack.components.router) in front of a pool of engines; the
# labs and benchmarks keep measuring VLLM_BASE_URL (or a registered engine) directly. auto: on when the
# layout has a chat pool (engines that only chat), in front of it.
LAB_ROUTER = _LAYOUT.wants_router if env_str("LAB_ROUTER").lower() == "auto" else env_bool("LAB_ROUTER")
LAB_ROUTER_POLICY = env_choice(
    "LAB_ROUTER_POLICY", ("consistent_hash", "round_robin", "cache_aware", "power_of_two", "random")
)
LAB_ROUTER_PORT = env_int("LAB_ROUTER_PORT", minimum=1, maximum=65535)
LAB_ROUTER_METRICS_PORT = env_int("LAB_ROUTER_METRICS_PORT", minimum=1, maximum=65535)
# Each engine's base URL (without /v1, as VLLM_BASE_URL); none listed: the layout's chat pool, else the
# configured engine alone.
LAB_ROUTER_ENGINES = [u.removesuffix("/v1") for u in env_urls("LAB_ROUTER_ENGINES", schemes=("http", "https"))]
LAB_ROUTER_ENGINES = LAB_ROUTER_ENGINES or _LAYOUT.router_engines
# The chat's, when LAB_ROUTER is on: the embedded router (started by `make run`), or one run elsewhere
# (docker/compose.yaml's router service), whose engines are then its own command line's business.
ROUTER_EMBEDDED = not is_set("LAB_ROUTER_URL")
ROUTER_URL = (
    f"http://127.0.0.1:{LAB_ROUTER_PORT}" if ROUTER_EMBEDDED else env_url("LAB_ROUTER_URL", schemes=("http", "https"))
)
VLLM_MAX_MODEL_LEN = env_int("VLLM_MAX_MODEL_LEN", minimum=256, maximum=1_048_576)
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL")
EMBEDDING_BACKEND = env_choice("EMBEDDING_BACKEND", ("auto", "onnx", "torch"))
CHAT_TIMEOUT_S = env_int("CHAT_TIMEOUT_S", minimum=1, maximum=3600)
BENCH_STALE_S = env_int("BENCH_STALE_S", minimum=3, maximum=86400)
BENCH_ENGINE_DOWN_WAIT_S = env_int("BENCH_ENGINE_DOWN_WAIT_S", minimum=0, maximum=86400)
BENCH_WAITING_ASK_S = env_int("BENCH_WAITING_ASK_S", minimum=1, maximum=3600)
CHAT_MAX_CONCURRENT_PER_USER = env_int("CHAT_MAX_CONCURRENT_PER_USER", minimum=1, maximum=1000)
# Chat admission (rag.admission): answers in flight per engine, the line behind them, the longest wait
# offered; counted in the stack's Redis, shared by every web process ("" : in each process).
CHAT_SLOTS_PER_ENGINE = env_int("CHAT_SLOTS_PER_ENGINE", minimum=1, maximum=4096)
CHAT_LINE_MAX = env_int("CHAT_LINE_MAX", minimum=0, maximum=100_000)
CHAT_WAIT_MAX_S = env_int("CHAT_WAIT_MAX_S", minimum=1, maximum=3600)
CHAT_ADMISSION_REDIS_URL = REDIS_URL
BENCH_MAX_ACTIVE_JOBS_PER_USER = env_int("BENCH_MAX_ACTIVE_JOBS_PER_USER", minimum=1, maximum=1000)
DOCUMENTS_MAX_PER_USER = env_int("DOCUMENTS_MAX_PER_USER", minimum=1, maximum=10_000)
DOCUMENTS_MAX_MB_PER_USER = env_int("DOCUMENTS_MAX_MB_PER_USER", minimum=1, maximum=100_000)
PDF_MAX_PAGES = env_int("PDF_MAX_PAGES", minimum=1, maximum=100_000)
PDF_TIMEOUT_S = env_int("PDF_TIMEOUT_S", minimum=1, maximum=3600)
DOCUMENT_QUEUED_STALE_S = env_int("DOCUMENT_QUEUED_STALE_S", minimum=10, maximum=86400)
# Lab number -> settings laid over that lab's run button (labapp.labs.catalog.Lab.run_config); a
# settings module may shorten the runs, e.g. to each lab's minimum settings (tests/settings.py).
LAB_RUN_SETTINGS: dict[int, dict[str, object]] = {}
# The largest file anyone uploads is a 5 MB document (rag.documents.MAX_BYTES); a request declaring a
# longer body is refused with 413 before it is parsed (labapp.middleware.RequestSizeLimitMiddleware). The
# slack is room for the form's other fields and the multipart headers.
REQUEST_MAX_BYTES = 5 * 1024 * 1024 + 64 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # a body's fields other than files (the lab's forms post a few KB)
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # a larger uploaded file is spooled to a temporary file
ENGINE_PROBE_CACHE_S = env_int("ENGINE_PROBE_CACHE_S", minimum=0, maximum=3600)  # bench.engines
STATUS_CACHE_S = env_int("STATUS_CACHE_S", minimum=0, maximum=3600)
WEB_HOST = env_str("WEB_HOST")
WEB_PORT = env_int("WEB_PORT", minimum=1, maximum=65535)
WEB_REQUEST_THREADS = env_int("WEB_REQUEST_THREADS", minimum=0, maximum=1000)  # labapp.request_threads
WEB_WARM_UP = env_bool("WEB_WARM_UP")  # labapp.asgi: the retrieval models loaded before the web process serves
VLLM_DTYPE = env_choice("VLLM_DTYPE", ("auto", "bfloat16", "float16", "float32"))

# channels_redis waits for a socket's next message with BZPOPMIN, 5 s at a time on the Redis server.
# redis-py 8 gives every connection a 5 s read timeout by default, which races that wait, and the
# client's timeout wins: a consumer with no message for 5 s got "Timeout reading from …" instead
# of waiting on, Channels closed its socket with 1011 (the status page's ping and the job progress
# sockets), and the chat's sign-out watch logged "retrying" (redis-py issue 4091, channels_redis
# issue 422). Reads on the layer's connections may take the blocking wait plus a margin; a dead
# Redis still ends them (its socket closes), and one that hangs is noticed after LAYER_READ_TIMEOUT_S.
LAYER_BLOCKING_WAIT_S = 5  # channels_redis.core.RedisChannelLayer.brpop_timeout
LAYER_READ_TIMEOUT_S = LAYER_BLOCKING_WAIT_S + 10
# A pool made from a URL gives its connections no retry, so after Redis restarted the first command on
# each pooled connection failed ("Connection lost") and Channels closed that socket with 1011 (the first
# /ws/ping/ after a restart, in CI). Retried once, at once: a dead connection is dropped and the command
# sent on a new one; a Redis that is down fails the retry as fast (a backoff would slow every progress
# message of a job measuring meanwhile).
LAYER_RETRY = {"retry": Retry(NoBackoff(), 1), "retry_on_error": [RedisConnectionError]}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": LAYER_READ_TIMEOUT_S, **LAYER_RETRY}]},
    }
}

# Every chat and job-progress socket re-reads its session this often while it receives nothing
# (labapp.sockets.SessionSocket): a close event lost on the way leaves an idle socket open at most
# this long. Two primary-key reads per open socket per period.
SOCKET_SESSION_RECHECK_S = 30.0

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {"bench.tasks.*": {"queue": "bench"}}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 2 * 3600}
CELERY_RESULT_EXPIRES = 3600

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # LTI's login state, nonces and launches (lti/launches.py): one launch's login initiation and its
    # form post may reach two web processes (docker/compose.yaml's nginx spreads them), so they live
    # in the stack's Redis, shared by every process.
    "lti": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": "lti"},
}

# Sign-in throttling (django-axes): 5 wrong passwords for one username from one address lock
# that pair out for 15 minutes (the page says so, in Korean: registration/locked_out.html);
# a right password before that clears the count. Wrong join codes at sign-up are counted
# apart (labapp.classes.throttle): 20 from one address within 15 minutes stop sign-ups from it.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "labapp.accounts.locked_out"
JOIN_CODE_FAILURE_LIMIT = 20
JOIN_CODE_FAILURE_WINDOW_S = 15 * 60
# Where the sign-up limits count, shared by every web process (labapp.classes.throttle): the
# stack's Redis. "" counts in each process's cache (the unit tests: no Redis runs there).
SIGNUP_LIMITS_REDIS_URL = REDIS_URL
# Sign-up and joining rates (labapp.classes.throttle, which says why these defaults): new accounts
# per address per hour, new members per class per minute.
SIGNUPS_PER_ADDRESS_PER_HOUR = env_int("SIGNUPS_PER_ADDRESS_PER_HOUR", minimum=1, maximum=100_000)
SIGNUP_ADDRESS_WINDOW_S = 3600
JOINS_PER_CLASS_PER_MINUTE = env_int("JOINS_PER_CLASS_PER_MINUTE", minimum=1, maximum=100_000)
CLASS_JOIN_WINDOW_S = 60

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "ko"
LANGUAGES = [("ko", "한국어"), ("en", "English")]  # each named in its own language
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "Asia/Seoul"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# plotly.js is vendored (labapp/static/vendor/plotly-cartesian/, the version the installed plotly
# package writes figures for): charts work without any network.
STATICFILES_DIRS = [BASE_DIR / "labapp" / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
VERSIONED_STATIC = re.compile(r"/vendor/[^/]+/[^/]+-\d+\.\d+\.\d+\.min\.js$")


def _immutable(path: str, url: str) -> bool:
    """A vendored file whose name carries its version never changes: cached for good, loaded once."""
    return bool(VERSIONED_STATIC.search(url))


WHITENOISE_IMMUTABLE_FILE_TEST = _immutable

# Content-Security-Policy on every page (django-csp), in every mode. Scripts come only from
# our own static files: no template has an inline script or event handler (json_script
# blocks are data, never run; tests/test_csp.py keeps it so).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        # plotly.js adds <style> elements while it draws (and sets style attributes on some
        # traces), as htmx does for its indicator rule; without 'unsafe-inline' Chromium blocks
        # them and the charts lose their hover and toolbar styling. Styles only: scripts stay strict.
        "style-src": [SELF, UNSAFE_INLINE],
        # 'self' also matches ws: and wss: on this host and port (CSP Level 3, "Does url match
        # expression in origin": 'self'), which is where the chat, job and status sockets go.
        "connect-src": [SELF],
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Deployment hardening applies whenever the site is a class server.
if LAB_MODE == "class" and not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT")
    SECURE_HSTS_SECONDS = 3600
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    # Joining the browsers' HSTS preload list is the operator's call for their own domain.
    SILENCED_SYSTEM_CHECKS = ["security.W021"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"httpx": {"level": "WARNING"}, "chromadb": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
