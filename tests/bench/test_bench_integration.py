"""The load generator and the fidelity comparison against the real engine."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from bench import runner
from bench.metrics import summarize
from tests import aio

pytestmark = pytest.mark.integration


def test_the_runner_measures_the_real_engine_at_a_fixed_concurrency(engine: str) -> None:
    from rag.vllm import client as vllm_client

    model = vllm_client.model_name()
    specs = [runner.RequestSpec(prompt=f"run {i}: " + "token " * 60, max_tokens=8) for i in range(4)]
    result = aio.run(runner.run(specs, base_url=engine, model=model, shape=runner.LoadShape(concurrency=2)))
    summary = summarize(result.records, duration=result.duration, peak_in_flight=result.max_concurrent)
    assert summary["completed"] == 4 and summary["failed"] == 0, [r.error for r in result.records]
    assert summary["total_output_tokens"] == 32  # ignore_eos: exactly max_tokens each
    assert 0 < summary["median_ttft_ms"] < summary["median_e2el_ms"]
    assert summary["median_tpot_ms"] > 0 and result.max_concurrent == 2
    assert all(r.prefill_time_server is not None for r in result.records)


def test_bench_fidelity_runs_vllm_bench_serve_and_our_runner_on_the_same_workload(engine: str) -> None:
    out = StringIO()
    call_command(
        "bench_fidelity", num_prompts=4, input_len=64, output_len=8, concurrency=2, rounds=2, json=True, stdout=out
    )
    report = json.loads(out.getvalue())
    assert [r["first"] for r in report["rounds"]] == ["vllm", "ours"]  # who goes first alternates
    assert report["vllm"]["client_cpu_s"] > 0 and report["ours"]["client_cpu_s"] > 0
    assert report["vllm"]["completed"] == report["ours"]["completed"] == 4
    assert report["prompt_tokens"]["vllm"] == report["prompt_tokens"]["ours"] == 64
    for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput"):
        assert report["vllm"][key] > 0 and report["ours"][key] > 0
        assert 0.3 < report["ours"][key] / report["vllm"][key] < 3  # a sanity band, not a speed claim


@pytest.mark.django_db
def test_a_length_sweep_job_on_the_real_engine_fits_rising_lines(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from django.contrib.auth.models import User

    from bench import kinds, services
    from bench.kinds.sweep import SweepConfig
    from bench.models import BenchJob

    small = SweepConfig(input_lengths=(64, 512, 1024), fixed_output=8, output_lengths=(8, 48), fixed_input=64)
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: small)
    owner = User.objects.create(username="sweeper")
    job = BenchJob.objects.create(owner=owner, kind="sweep", config={"repeats": 1, "seed": 11}, engine_url=engine)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    fits = done.results["fits"]
    assert fits["ttft_vs_input"]["slope"] > 0  # a longer prompt takes longer to prefill
    assert fits["decode_vs_output"]["slope"] > 0  # each output token costs about one TPOT
    assert fits["prefill_speed"] > 0 and fits["tpot_ms"] > 0
    assert all(c["median_cached_tokens"] == 0 for c in done.results["cells"])  # unique prompts: no cache hits
    # Where the numbers came from, read from the real engine when the run started (bench.provenance).
    from labapp.ops.stack.components import engine_dtype, has_nvidia_gpu
    from rag.vllm import client as vllm_client

    origin = done.provenance
    assert origin["vllm_version"] == vllm_client.engine_info(url=engine).version != "?"
    assert origin["prefix_caching"] is True and origin["max_model_len"] and origin["block_size"]
    assert origin["router"] == "" and origin["router_workers"] is None  # asked directly: no router answered
    if settings.VLLM_EMBEDDED:  # the harness's engine runs in development mode: /server_info answers
        assert origin["dtype"] == engine_dtype(has_nvidia_gpu())  # as the harness started it (--dtype)
        assert origin["chunked_prefill"] is not None and origin["tensor_parallel_size"] == 1 and origin["device"]


@pytest.mark.django_db
def test_a_load_sweep_job_on_the_real_engine_runs_requests_side_by_side(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.models import User

    from bench import kinds, services
    from bench.kinds.load import LoadConfig
    from bench.models import BenchJob

    small = LoadConfig(concurrencies=(1, 4), input_tokens=64, output_tokens=8, slo_ttft_ms=60_000)
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: small)
    owner = User.objects.create(username="load-real")
    job = BenchJob.objects.create(owner=owner, kind="load", config={"repeats": 1, "seed": 12}, engine_url=engine)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    one, four = done.results["cells"]
    assert one["completed"] == four["completed"] == 8
    assert one["peak_in_flight"] == 1 and four["peak_in_flight"] == 4
    # The sanity checks on the real engine: λ·W near the concurrency asked, vLLM's own counts beside it.
    for cell, level in ((one, 1), (four, 4)):
        little = cell["sanity"]["little"]
        assert little["target"] == level and abs(little["error_vs_target_pct"]) < 35, little
        assert cell["sanity"]["preemptions"] == 0  # 8 short requests fit the KV cache
    assert four["max_concurrent_requests"] >= 4 and four["max_output_tokens_per_s"] > 0
    assert done.results["sanity"]["preemptions"] == 0
    assert four["server"]["peak_running"] >= 2  # the engine itself saw requests batched together
    # Not asserted: more requests per second at 4 than at 1. With 8 short requests a cell on two shared
    # cores it held in most runs and not in one CI run (5.09 against 5.26 req/s): a speed, which
    # belongs in a benchmark's printed ratio, not in a test.
