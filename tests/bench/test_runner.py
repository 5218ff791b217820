"""The load generator against a scripted OpenAI-compatible server (labapp/ops/scripted/)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from bench import exports, runner
from bench.metrics import summarize
from bench.runner import LoadShape, RequestSpec
from labapp.ops import scripted
from tests import aio

VLLM_BENCH_KEYS = (
    "date backend model_id num_prompts request_rate burstiness max_concurrency duration completed failed "
    "total_input_tokens total_output_tokens request_throughput request_goodput output_throughput "
    "total_token_throughput input_lens output_lens ttfts itls latencies generated_texts errors"
).split() + [
    f"{s}_{m}_ms"
    for s in ("mean", "median", "std", "p50", "p90", "p95", "p99")
    for m in ("ttft", "tpot", "itl", "e2el")
]


def test_arrivals_are_all_at_once_or_gamma_gaps_with_the_asked_mean_and_spread() -> None:
    assert runner.arrival_offsets(3, LoadShape()) == [0.0, 0.0, 0.0]
    poisson = runner.arrival_offsets(4000, LoadShape(request_rate=10, burstiness=1.0, seed=7))
    assert poisson == runner.arrival_offsets(4000, LoadShape(request_rate=10, burstiness=1.0, seed=7))
    gaps = [b - a for a, b in itertools.pairwise(poisson)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.1)  # exponential: cv 1
    even = runner.arrival_offsets(4000, LoadShape(request_rate=10, burstiness=4.0, seed=7))
    even_gaps = [b - a for a, b in itertools.pairwise(even)]
    assert statistics.pstdev(even_gaps) / statistics.mean(even_gaps) == pytest.approx(0.5, rel=0.1)  # 1/sqrt(4)


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"concurrency": -2}, {"request_rate": 0}, {"burstiness": 0}])
def test_a_bad_load_shape_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LoadShape(**bad)  # type: ignore[arg-type]


def _run(script: scripted.Script, shape: LoadShape, n: int = 6, warmup: int = 0) -> runner.RunResult:
    with scripted.serve(script) as url:
        specs = [RequestSpec(prompt=f"{i} 프롬프트 " * 20, max_tokens=4) for i in range(n)]
        warm = [RequestSpec(prompt=f"warm {i}", max_tokens=4) for i in range(warmup)]
        return aio.run(runner.run(specs, base_url=url, model="fake-model", shape=shape, warmup=warm))


def test_a_fixed_concurrency_caps_requests_in_flight_and_shows_client_queueing() -> None:
    script = scripted.Script(delay_s=0.05)
    result = _run(script, LoadShape(concurrency=2), n=6, warmup=1)
    assert len(result.warmup) == 1 and len(script.requests) == 7
    assert all(r.success for r in result.records) and result.max_concurrent == 2
    queued = sorted(r.client_queue_time or 0 for r in result.records)
    assert queued[0] < 0.05 and queued[-1] > 0.3  # the last pair waited for two earlier pairs
    assert result.duration >= 3 * 4 * 0.05
    assert all(r["ignore_eos"] is True and r["max_tokens"] == 4 for r in script.requests)


def test_a_request_rate_sends_each_request_no_earlier_than_due() -> None:
    result = _run(scripted.Script(delay_s=0.0), LoadShape(request_rate=20, seed=1), n=8)
    for record in result.records:
        assert record.t_scheduled is not None and record.t_send >= record.t_scheduled
    offsets = runner.arrival_offsets(8, LoadShape(request_rate=20, seed=1))
    assert result.duration >= offsets[-1]


def test_failed_requests_are_recorded_and_the_run_still_ends() -> None:
    result = _run(scripted.Script(status=500, error_message="engine exploded"), LoadShape(concurrency=3), n=4)
    assert [r.success for r in result.records] == [False] * 4
    assert all("engine exploded" in (r.error or "") for r in result.records)
    assert summarize(result.records, duration=result.duration)["failed"] == 4


def test_the_export_has_every_vllm_bench_serve_key_and_a_csv_row_per_request() -> None:
    shape = LoadShape(concurrency=2)
    result = _run(scripted.Script(), shape, n=3)
    summary = summarize(result.records, duration=result.duration, peak_in_flight=result.max_concurrent)
    data = exports.result_json(result, summary, model="fake-model", shape=shape)
    missing = [key for key in VLLM_BENCH_KEYS if key not in data]
    assert not missing, missing
    assert data["request_rate"] == "inf" and data["max_concurrency"] == 2 and data["completed"] == 3
    assert len(data["ttfts"]) == len(data["itls"]) == len(data["generated_texts"]) == 3
    assert data["cached_tokens"] == [16, 16, 16]
    rows = exports.records_csv_rows(result.records)
    assert len(rows) == 3 and set(rows[0]) == set(exports.CSV_COLUMNS)
    assert not math.isnan(rows[0]["ttft_ms"])
