"""Where a run's numbers came from (issue 30, item 3): the engine, its settings and the code, read once
from the engine itself when the run starts and saved on the job (``BenchJob.provenance``).

Read, not assumed: ``/version`` (vLLM's version), ``/v1/models`` (the model and its
``max_model_len``), ``/metrics`` (the ``vllm:cache_config_info`` gauge, a constant 1 whose labels
are the engine's cache settings: prefix caching, the KV cache's dtype, the block size; parsed with
``prometheus_client``'s text parser, as ``rag.vllm.server_metrics`` reads the counters), and, on an
engine in development mode (``VLLM_SERVER_DEV_MODE=1``, as ``make run`` starts it),
``/server_info?config_format=json``: the model's dtype, chunked prefill, the tensor and data
parallel sizes and the CPU or GPU the engine runs on. ``/workers`` answers only on vllm-router:
then a router stood in front of the engines, and its answer lists them. The router's policy is read
from the router too, from its Prometheus ``/metrics`` (the label of
``vllm_router_policy_decisions_total``, present once it has routed a request: reading ``/version``
through it is one), when this project started the router and so knows that address
(``rag.vllm.router.launched``); otherwise it comes from the command line this process started it
with, or from settings, and ``router_policy_from`` says which. vllm-router says nothing of its
version: the version recorded is the one installed beside the binary this project starts, and only
for a router it started. A field nothing reported stays None, shown as "unknown" (``shown_rows``),
never guessed; an endpoint that fails is named in ``unread``, and the reading itself never raises,
so it never fails a run.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import re
import subprocess
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy, pgettext_lazy
from prometheus_client.parser import text_string_to_metric_families

from labapp import addresses
from rag.vllm import client as vllm_client
from rag.vllm import router as vllm_router
from rag.vllm.router import ROUTER_BINARY

ROOT = Path(__file__).resolve().parent.parent
CACHE_INFO = "vllm:cache_config_info"
# The engine's own fields (what a router in front of it cannot say).
ENGINE_FIELDS = (
    "model", "vllm_version", "dtype", "kv_cache_dtype", "max_model_len", "block_size", "prefix_caching",
    "chunked_prefill", "tensor_parallel_size", "data_parallel_size", "device",
)  # fmt: skip
POLICY_DECISIONS = "vllm_router_policy_decisions_total"  # vllm-router's Prometheus: one per request routed
QUICK_S = 10.0  # each of /version, /v1/models, /metrics and /workers
ROUTER_S = 5.0  # the router's Prometheus /metrics: on loopback, it answers at once
SERVER_INFO_S = 30.0  # /server_info collects the engine's environment on its first call (seconds on 2 cores)
UNKNOWN = gettext_lazy("알 수 없음")


@dataclass(frozen=True)
class Provenance:
    """A run's origin; every field None when nothing reported it."""

    engine_url: str | None = None
    model: str | None = None
    vllm_version: str | None = None
    dtype: str | None = None  # the model's weights and activations (--dtype)
    kv_cache_dtype: str | None = None  # "auto": the model's dtype
    max_model_len: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    router: str | None = None  # "vllm-router 0.1.17" when one answered the run's requests; "": none did
    router_policy: str | None = None
    router_policy_from: str | None = None  # POLICY_SOURCES: how the policy was known
    router_workers: list[dict[str, Any]] | None = None  # the router's engines: {"url", "healthy"}, as it lists them
    hardware: str | None = None  # the engine's hardware label (bench.models.Engine.hardware)
    device: str | None = None  # the CPU's or GPU's own name, as the engine's machine reports it
    project_version: str | None = None
    read_at: str | None = None
    unread: list[str] = field(default_factory=list)  # endpoints that did not answer, and why

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any] | None) -> Provenance:
        """A saved reading back (unknown keys ignored, so an older or newer row still reads)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (saved or {}).items() if k in names})


# --- parsing what the engine says ------------------------------------------------------------------


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text == "true" else False if text == "false" else None


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text[:200] if text and text.lower() not in ("none", "null") else None


def cache_info(metrics_text: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (engine 0's, when there are several); {} without it."""
    kept = "\n".join(line for line in metrics_text.splitlines() if line.startswith(CACHE_INFO + "{"))
    for family in text_string_to_metric_families(kept + "\n" if kept else ""):
        samples = sorted(family.samples, key=lambda s: s.labels.get("engine", ""))
        if samples:
            return dict(samples[0].labels)
    return {}


def from_metrics(metrics_text: str) -> dict[str, Any]:
    """Provenance fields from ``/metrics``."""
    labels = cache_info(metrics_text)
    return {
        "prefix_caching": _flag(labels.get("enable_prefix_caching")),
        "kv_cache_dtype": _text(labels.get("cache_dtype")),
        "block_size": _whole(labels.get("block_size")),
    }


_CPU_NAME = re.compile(r"^Model name:\s*(.+)$", re.MULTILINE)


def device_name(system_env: dict[str, Any]) -> str | None:
    """The GPU's name(s) when the engine has one, else its CPU's (lscpu's "Model name")."""
    gpus = _text(system_env.get("nvidia_gpu_models"))
    if gpus and "could not collect" not in gpus.lower():
        names = sorted({line.split(":", 1)[-1].strip() for line in gpus.splitlines() if line.strip()})
        return ", ".join(names)[:200]
    found = _CPU_NAME.search(str(system_env.get("cpu_info") or ""))
    return found.group(1).strip()[:200] if found else None


def _part(body: Any, key: str) -> dict[str, Any]:
    """``body[key]`` when it is an object (``body`` itself for ""), else {}."""
    found = body.get(key) if key and isinstance(body, dict) else body
    return found if isinstance(found, dict) else {}


def from_server_info(body: Any) -> dict[str, Any]:
    """Provenance fields from ``/server_info?config_format=json`` (vLLM's development mode)."""
    info = _part(body, "")
    config = _part(info, "vllm_config")
    model, cache = _part(config, "model_config"), _part(config, "cache_config")
    scheduler, parallel = _part(config, "scheduler_config"), _part(config, "parallel_config")
    system = _part(info, "system_env")
    return {
        "dtype": (_text(model.get("dtype")) or "").removeprefix("torch.") or None,
        "max_model_len": _whole(model.get("max_model_len")),
        "prefix_caching": _flag(cache.get("enable_prefix_caching")),
        "kv_cache_dtype": _text(cache.get("cache_dtype")),
        "block_size": _whole(cache.get("block_size")),
        "chunked_prefill": _flag(scheduler.get("enable_chunked_prefill")),
        "tensor_parallel_size": _whole(parallel.get("tensor_parallel_size")),
        "data_parallel_size": _whole(parallel.get("data_parallel_size")),
        "device": device_name(system),
    }


def from_models(body: Any, model: str) -> dict[str, Any]:
    """The served model's ``max_model_len`` from ``/v1/models`` (the card named ``model``, else the first)."""
    cards = body.get("data") if isinstance(body, dict) else None
    cards = [c for c in cards if isinstance(c, dict)] if isinstance(cards, list) else []
    card = next((c for c in cards if c.get("id") == model), cards[0] if cards else {})
    return {"model": _text(card.get("id")) or model or None, "max_model_len": _whole(card.get("max_model_len"))}


def from_version(body: Any) -> dict[str, Any]:
    return {"vllm_version": _text(body.get("version")) if isinstance(body, dict) else None}


# --- parsing what vllm-router says ------------------------------------------------------------------

# How a run's routing policy was known, the router's own word first.
POLICY_SOURCES = ("router", "command", "settings")


def from_router_workers(body: Any) -> list[dict[str, Any]] | None:
    """vllm-router's ``/workers``: each engine's address (without credentials) and its health as the
    router judges it; None when the body is not vllm-router's."""
    listed = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(listed, list):
        return None
    return [
        {"url": addresses.shown(str(w.get("url", "?")))[:200], "healthy": w.get("is_healthy") is True}
        for w in listed
        if isinstance(w, dict)
    ]


def router_policy(metrics_text: str) -> str | None:
    """The policy (policies, in prefill/decode mode) vllm-router's Prometheus ``/metrics`` names on
    its routing decisions; None before its first decision (the metric is absent until then)."""
    kept = "\n".join(line for line in metrics_text.splitlines() if line.startswith(POLICY_DECISIONS + "{"))
    names = {
        sample.labels["policy"]
        for family in text_string_to_metric_families(kept + "\n" if kept else "")
        for sample in family.samples
        if sample.name == POLICY_DECISIONS and sample.labels.get("policy")
    }
    return ", ".join(sorted(names))[:200] if names else None


# --- this project and the router -------------------------------------------------------------------


@functools.cache
def project_version() -> str | None:
    """This project's version: it has no installed package, so the short commit, read once per process."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],  # git from PATH
            capture_output=True, text=True, timeout=5, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return _text(done.stdout) if done.returncode == 0 else None


@functools.cache
def router_version() -> str:
    """ "vllm-router" and the version installed beside its binary (``.venv-router``)."""
    for site in sorted(ROUTER_BINARY.parent.parent.glob("lib/python*/site-packages")):
        for dist in importlib.metadata.distributions(path=[str(site)]):
            if dist.metadata["Name"] in ("vllm-router", "vllm_router"):
                return f"vllm-router {dist.version}"
    return "vllm-router"


# --- reading ---------------------------------------------------------------------------------------


async def _get(
    http: httpx.AsyncClient, path: str, unread: list[str], *, json: bool = True, timeout: float = QUICK_S
) -> Any:
    """The endpoint's body (parsed JSON or text), or None with why noted in ``unread``."""
    try:
        response = await http.get(path, timeout=timeout)
        if response.status_code != 200:
            unread.append(f"{path}: HTTP {response.status_code}")
            return None
        return response.json() if json else response.text
    except (httpx.HTTPError, ValueError) as exc:
        unread.append(f"{path}: {vllm_client.explain(exc)}"[:200])
        return None


def _merged(*parts: dict[str, Any]) -> dict[str, Any]:
    """Later parts fill only what earlier ones left None."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if out.get(key) is None:
                out[key] = value
    return out


async def _read_engine(url: str, model: str, unread: list[str]) -> tuple[dict[str, Any], Any]:
    """The engine's fields as the server at ``url`` answers, and its ``/workers`` body (vllm-router's)."""
    asked: list[str] = []  # why /workers did not answer, if it did not
    async with vllm_client.connect(url, timeout=QUICK_S) as http:
        version, models, metrics, server, workers = await asyncio.gather(
            _get(http, "/version", unread),
            _get(http, "/v1/models", unread),
            _get(http, "/metrics", unread, json=False),
            _get(http, "/server_info?config_format=json", unread, timeout=SERVER_INFO_S),
            _get(http, "/workers", asked),  # only vllm-router answers it: an engine's 404 is no failure
        )
    found = _merged(
        from_version(version),
        from_server_info(server),  # the engine's resolved config first, /metrics and /v1/models fill in
        from_metrics(metrics) if isinstance(metrics, str) else {},
        from_models(models, model),
    )
    listed = from_router_workers(workers)
    if listed is not None:
        found["router"], found["router_workers"] = "vllm-router", listed
    elif all(": HTTP " in why for why in asked):
        found["router"] = ""  # the server answered, and not as vllm-router: no router in front of it
    return found, workers


async def _fill_from_an_engine_behind(workers: Any, found: dict[str, Any], model: str, unread: list[str]) -> None:
    """What did not come through the router, from the first healthy engine it lists, asked directly:
    vllm-router 0.1.17 passes ``/server_info`` on without its query, so vLLM answers its config as
    text (dtype, chunked prefill and the parallel sizes unread through it)."""
    missing = [key for key in ENGINE_FIELDS if found.get(key) is None]
    listed = workers.get("workers") if isinstance(workers, dict) else None
    healthy = [
        str(w["url"]) for w in listed or [] if isinstance(w, dict) and w.get("is_healthy") is True and w.get("url")
    ]
    if not missing or not healthy:
        return
    failed: list[str] = []
    direct, _ = await _read_engine(healthy[0], model, failed)
    unread.extend(f"{addresses.shown(healthy[0])} {why}" for why in failed)
    for key in missing:
        found[key] = direct.get(key)


async def said_policy(url: str, unread: list[str] | None = None) -> str | None:
    """The policy the router at ``url`` names on its Prometheus (``router_policy``), when this project
    started it (``rag.vllm.router.launched``) and it has routed a request; else None."""
    launch = vllm_router.launched(url)
    if launch is None:
        return None
    failed: list[str] = []
    async with vllm_client.connect(launch.metrics_url, timeout=ROUTER_S) as http:
        text = await _get(http, "/metrics", failed, json=False, timeout=ROUTER_S)
    if unread is not None:
        unread.extend(f"vllm-router Prometheus {why}" for why in failed)  # not the engine's /metrics
    return router_policy(text) if isinstance(text, str) else None


async def _read_router(url: str, unread: list[str]) -> dict[str, Any]:
    """What the router at ``url`` says of itself beyond ``/workers``, read after the engine's endpoints
    went through it (``/version`` made it decide once, so its policy is on its metrics), and what this
    project knows of it when it started it: its policy from its Prometheus, else from its command line,
    and the version installed beside the binary started. Nothing more for a router run elsewhere."""
    launch = vllm_router.launched(url)
    if launch is None:
        return {}
    found: dict[str, Any] = {"router": router_version()}
    policy = await said_policy(url, unread)
    if policy:
        found |= {"router_policy": policy, "router_policy_from": "router"}
    elif launch.policy:
        found |= {"router_policy": launch.policy, "router_policy_from": "command"}
    return found


async def _read_all(url: str, model: str, unread: list[str]) -> dict[str, Any]:
    async with asyncio.timeout(SERVER_INFO_S + 5):  # each request has its own time-out; this bounds the rest
        found, workers = await _read_engine(url, model, unread)
    if not found.get("router"):
        return found
    try:  # what the engine said through the router stays, whatever happens past this point
        async with asyncio.timeout(ROUTER_S + 1):
            found |= await _read_router(url, unread)
    except TimeoutError:
        unread.append(f"vllm-router Prometheus: no answer in {ROUTER_S + 1:.0f} s")
    try:
        async with asyncio.timeout(SERVER_INFO_S + 5):
            await _fill_from_an_engine_behind(workers, found, model, unread)
    except TimeoutError:
        unread.append(f"an engine behind the router: no answer in {SERVER_INFO_S + 5:.0f} s")
    return found


async def read(
    url: str,
    *,
    model: str = "",
    hardware: str = "",
    router_policy: str | None = None,
    router_engines: list[str] | None = None,
) -> Provenance:
    """The engine at ``url`` as it is now, and the router in front of it when one answers there;
    ``router_policy`` when the run itself starts vllm-router with that policy (``bench.router_run``),
    so its requests go through one, in front of ``router_engines``. Never raises (an outright failure
    leaves every engine field unknown, with the reason in ``unread``)."""
    unread: list[str] = []
    try:
        found = await _read_all(url, model, unread)
    except Exception as exc:  # reading where numbers came from must never fail the run
        unread.append(f"{type(exc).__name__}: {exc}"[:200])
        found = {"model": model or None}
    if router_policy is not None and not found.get("router"):
        found |= {"router": router_version(), "router_policy": router_policy, "router_policy_from": "command"}
        if router_engines:  # the engines its routers will be started in front of; no router has judged them yet
            found["router_workers"] = [{"url": addresses.shown(u)[:200], "healthy": None} for u in router_engines]
    if found.get("router") and not found.get("router_policy") and _is_the_chats_router(url):
        found |= {"router_policy": str(settings.LAB_ROUTER_POLICY), "router_policy_from": "settings"}
    return Provenance(
        engine_url=addresses.shown(url),
        hardware=hardware or None,
        project_version=project_version(),
        read_at=timezone.now().isoformat(timespec="seconds"),
        unread=[addresses.scrubbed(u) for u in unread],
        **found,
    )


def _is_the_chats_router(url: str) -> bool:
    return url.rstrip("/") == str(settings.ROUTER_URL).rstrip("/")


# --- showing -------------------------------------------------------------------------------------------

LABELS: tuple[tuple[str, Any], ...] = (
    ("model", gettext_lazy("모델")),
    ("vllm_version", gettext_lazy("vLLM 버전")),
    ("dtype", gettext_lazy("데이터 타입(dtype)")),
    ("kv_cache_dtype", gettext_lazy("KV 캐시 데이터 타입")),
    ("max_model_len", gettext_lazy("최대 모델 길이")),
    ("block_size", gettext_lazy("KV 블록 크기")),
    ("prefix_caching", gettext_lazy("프리픽스 캐싱")),
    ("chunked_prefill", gettext_lazy("청크 프리필")),
    ("tensor_parallel_size", gettext_lazy("텐서 병렬 크기")),
    ("data_parallel_size", gettext_lazy("데이터 병렬 크기")),
    ("router", gettext_lazy("라우터")),
    ("router_policy", gettext_lazy("라우팅 정책")),
    ("router_policy_from", gettext_lazy("라우팅 정책을 알아낸 곳")),
    ("router_workers", gettext_lazy("라우터 뒤의 엔진")),
    ("hardware", gettext_lazy("하드웨어 표시")),
    ("device", gettext_lazy("CPU 또는 GPU")),
    ("engine_url", gettext_lazy("엔진 주소")),
    ("project_version", gettext_lazy("이 프로젝트의 버전")),
    ("read_at", gettext_lazy("읽은 때")),
)


def on_off_none() -> tuple[str, ...]:
    """Our own words for a value, in the reader's language (shown as words, not as the engine's data)."""
    return (
        str(pgettext_lazy("켜짐/꺼짐", "켜짐")),
        str(pgettext_lazy("켜짐/꺼짐", "꺼짐")),
        str(pgettext_lazy("라우터", "없음")),
        str(UNKNOWN),
    )


ROUTER_KEYS = ("router", "router_policy", "router_policy_from", "router_workers")  # "": no router answered
OUR_WORDS = ("router_policy_from", "router_workers")  # shown in our words (with the router's addresses)


def policy_sources() -> dict[str, str]:
    """How the routing policy was known (``POLICY_SOURCES``), in the reader's language."""
    return {
        "router": str(gettext_lazy("라우터가 말함 (Prometheus 지표의 라우팅 결정)")),
        "command": str(gettext_lazy("이 프로젝트가 라우터를 띄운 명령줄 (라우터는 말하지 않음)")),
        "settings": str(gettext_lazy("설정 LAB_ROUTER_POLICY (라우터는 말하지 않음)")),
    }


def _workers_shown(listed: list[Any]) -> str:
    if not listed:
        return str(pgettext_lazy("라우터", "없음"))
    unhealthy = str(gettext_lazy("비정상"))
    return ", ".join(
        str(w.get("url")) + ("" if w.get("healthy") is not False else f" ({unhealthy})")  # None: not judged
        for w in listed
        if isinstance(w, dict)
    )


def shown_value(key: str, value: Any) -> str:
    """A field as a page says it: on/off for switches, "unknown" for what nothing reported."""
    if key in ROUTER_KEYS and value == "":
        return str(pgettext_lazy("라우터", "없음"))
    if key == "router_policy_from" and value in POLICY_SOURCES:
        return policy_sources()[value]
    if key == "router_workers" and isinstance(value, list):
        return _workers_shown(value)
    if key == "read_at" and isinstance(value, str):
        return value.replace("T", " ").replace("+00:00", " UTC")
    if value is None or value == "":
        return str(UNKNOWN)
    if isinstance(value, bool):
        return str(pgettext_lazy("켜짐/꺼짐", "켜짐") if value else pgettext_lazy("켜짐/꺼짐", "꺼짐"))
    return str(value)


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    value: str
    known: bool

    @property
    def reported(self) -> bool:
        """The value is the engine's own word (a version, a name, a dtype), not one of ours (on, unknown)."""
        return self.known and self.key not in OUR_WORDS and self.value not in (on_off_none())


def _known(key: str, value: Any) -> bool:
    """Whether something reported the field (the router's "" is a finding: none answered)."""
    return value is not None and (value != "" or key in ROUTER_KEYS)


def _normalized(saved: dict[str, Any] | None) -> dict[str, Any]:
    found = Provenance.from_dict(saved).as_dict()
    if found["router"] == "":  # no router, so no policy nor engines behind one: as known as its absence
        found |= {"router_policy": "", "router_policy_from": "", "router_workers": ""}
    return found


def shown_rows(saved: dict[str, Any] | None) -> list[Row]:
    """Every field as a page shows it, in the reader's language."""
    found = _normalized(saved)
    return [Row(key, str(label), shown_value(key, found[key]), _known(key, found[key])) for key, label in LABELS]


def differences(saved: list[dict[str, Any] | None]) -> list[tuple[str, list[Row]]]:
    """(label, each run's row) of the fields whose values differ between the runs (when they were read
    is left out: two runs always differ there)."""
    per_run = [{row.key: row for row in shown_rows(one)} for one in saved]
    return [
        (str(label), [run[key] for run in per_run])
        for key, label in LABELS
        if key != "read_at" and len({run[key].value for run in per_run}) > 1
    ]


def csv_columns() -> list[str]:
    """The exports' provenance columns (stable English names, the dataclass's own)."""
    return [f"provenance_{key}" for key, _label in LABELS]


def csv_values(saved: dict[str, Any] | None) -> dict[str, Any]:
    """A run's provenance as CSV cells: as saved, "unknown" for what nothing reported."""
    found = _normalized(saved)
    out: dict[str, Any] = {}
    for key, _label in LABELS:
        value = found.get(key)
        if isinstance(value, list):  # the router's engines: "URL healthy; URL unhealthy"
            value = "; ".join(
                f"{w.get('url')} {'healthy' if w.get('healthy') else 'unhealthy'}" for w in value if isinstance(w, dict)
            )
        out[f"provenance_{key}"] = (
            "unknown" if value is None else value
        )  # "" for the router and its policy: none answered
    return out
