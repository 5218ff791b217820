"""Every job kind, small, through the real Celery worker against the real engine, with its charts."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import services
from bench.models import BenchJob
from tests import harness

pytestmark = pytest.mark.integration

# Small settings: each kind takes a few seconds on two CPU cores (the speed probe's fixed
# shapes run through the worker in the browser test).
SMALL = {
    "sweep": {"input_lengths": "32, 256", "output_lengths": "4, 12", "fixed_output": "4", "fixed_input": "32"},
    "load": {
        "mode": "rate", "rates": "4, 8", "workload": "shared_prefix", "prefixes": "1", "prefix_tokens": "300",
        "input_tokens": "16", "output_tokens": "4", "slo_ttft_ms": "60000", "slo_tpot_ms": "10000",
    },
    "retrieval": {"questions": "1", "top_ks": "1, 4", "chunk_sizes": "200, 1000", "max_tokens": "4"},
    "prefix": {"contexts": "1", "top_k": "4", "chunk_size": "500", "max_tokens": "4"},
    "short": {"questions": "1", "normal_tokens": "40", "caps": "6, 12, 24", "top_k": "1", "chunk_size": "200"},
}  # fmt: skip


def _figure(page: str, data_id: str) -> dict[str, object]:
    marker = f'id="{data_id}" type="application/json">'
    assert marker in page, f"no {data_id} on the page"
    return dict(json.loads(page.split(marker)[1].split("</script>")[0]))


def test_each_job_kind_runs_on_the_worker_and_draws_its_charts(
    engine: str, chapter_indexed: None, celery_worker: harness.Service, shared_database: None
) -> None:
    owner, _ = User.objects.get_or_create(username="labs-integration")
    made = {kind: services.job_create(owner=owner, kind=kind, config=config) for kind, config in SMALL.items()}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = {kind: BenchJob.objects.get(pk=job.pk) for kind, job in made.items()}
        if all(not job.active for job in states.values()):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"jobs still active: {[(k, j.status, j.current_cell) for k, j in states.items()]}")
    failed = {kind: job.error for kind, job in states.items() if job.status != BenchJob.Status.DONE}
    assert not failed, (failed, celery_worker.log_tail())
    client = Client()
    client.force_login(owner)
    for kind, job in states.items():
        assert job.done_requests == job.total_requests > 0, kind
        page = client.get(f"/bench/{job.pk}/").content.decode()
        chart = _figure(page, "job-chart-data")
        assert chart["data"], kind
        timeline = _figure(page, "job-timeline-data")
        traces = timeline["data"]
        assert isinstance(traces, list) and len([t for t in traces if t["type"] == "bar"]) == 4, kind
        # The real engine's /metrics, sampled while the job ran, under the requests on one time axis.
        running = next(t for t in traces if t["name"] == "실행 중인 요청")
        steps = next(t for t in traces if t["name"] == "엔진 스텝당 토큰")
        assert running["xaxis"] != traces[0]["xaxis"] and steps["x"], kind
        if kind == "load":  # 16 requests over about 3 s: the 200 ms samples see them running
            assert max(running["y"]) >= 1 and any(v for v in steps["y"] if v), running

    load = states["load"].results
    assert [c["request_rate"] for c in load["cells"]] == [4.0, 8.0]
    assert all(c["completed"] == 8 for c in load["cells"])
    for cell in load["cells"]:  # at a request rate: the saturation check and the rate achieved
        assert cell["sanity"]["rising"]["saturated"] in (True, False) and cell["sanity"]["achieved_share"] > 0
        assert cell["sanity"]["little"]["lambda_w"] > 0
    # One shared opening per level: after its first request the engine reuses its full cached blocks.
    assert any(r["cached_tokens"] >= 128 for c in load["cells"] for r in c["requests"])

    retrieval = {(c["chunk_size"], c["top_k"]): c for c in states["retrieval"].results["cells"]}
    assert retrieval[(1000, 4)]["median_context_tokens"] > retrieval[(200, 1)]["median_context_tokens"] > 0
    assert retrieval[(1000, 4)]["median_prompt_tokens"] > retrieval[(200, 1)]["median_prompt_tokens"]
    assert all(c["median_cached_tokens"] == 0 for c in retrieval.values())  # a unique first line each

    prefix = states["prefix"].results
    cells = {c["cell"]: c for c in prefix["cells"]}
    assert prefix["cache_reset"] == "ok"  # the embedded engine runs with VLLM_SERVER_DEV_MODE
    assert cells["cold"]["median_cached_tokens"] == 0
    assert cells["warm"]["hit_rate"] > 0.8  # the same prompt again: nearly all of it from the cache
    seen = {
        name: (c["median_prompt_tokens"], c["median_cached_tokens"], c["median_ttft_ms"]) for name, c in cells.items()
    }
    # Another question over the same chunks reuses at most what the exact repeat did (with Gemma 3's
    # sliding-window layers vLLM sometimes misses it entirely); the reversed chunks no more than that.
    assert cells["other_question"]["median_cached_tokens"] <= cells["warm"]["median_cached_tokens"], seen
    assert cells["reordered"]["median_cached_tokens"] <= cells["other_question"]["median_cached_tokens"], seen

    short = {c["cell"]: c for c in states["short"].results["cells"]}
    assert short["cap_6"]["median_output_tokens"] <= 6 and short["cap_24"]["median_output_tokens"] <= 24
    assert short["normal"]["max_tokens"] == 40

    sweep = states["sweep"].results["fits"]
    assert sweep["ttft_vs_input"]["slope"] > 0 and sweep["decode_vs_output"]["slope"] > 0

    compare = client.get("/bench/compare/", {"ids": [states["retrieval"].pk, states["retrieval"].pk]})
    assert compare.status_code == 400  # one job is not a comparison
    export = client.get(f"/bench/{states['load'].pk}/export.json").json()
    assert export["benchmarks"][0]["completed"] == 8 and export["benchmarks"][0]["request_rate"] == 4.0
