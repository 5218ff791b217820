"""Run aggregates (docs/metrics.md, "Per run (aggregates)") against values computed by hand."""

from __future__ import annotations

import pytest

from bench.metrics import SLO, percentile, summarize
from rag.vllm.records import RequestRecord


def rec(
    ttft: float, gaps: list[float], prompt: int, output: int, *, success: bool = True, queue: float | None = None
) -> RequestRecord:
    """A finished request: sent at 0, first text at ttft, then one chunk per gap."""
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    record = RequestRecord(t_send=0.0, text_chunk_at=times, prompt_tokens=prompt, output_tokens=output)
    record.success = success
    if queue is not None:
        record.t_scheduled = -queue
    return record


def test_percentiles_interpolate_linearly_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) == 0.0


def test_a_run_is_summarized_by_hand_computed_values() -> None:
    # A: ttft 0.1 s, 3 chunks 0.05 s apart, 4 output tokens: e2el 0.25, decode 0.15, tpot 0.05
    # B: ttft 0.3 s, one token: no TPOT, e2el 0.3
    # C: failed
    a = rec(0.1, [0.05, 0.05, 0.05], prompt=100, output=4, queue=0.02)
    b = rec(0.3, [], prompt=50, output=1, queue=0.0)
    c = RequestRecord(t_send=0.0, success=False, error="HTTP 500")
    summary = summarize([a, b, c], duration=2.0, slo=SLO(ttft_ms=200), peak_in_flight=2)
    assert summary["completed"] == 2 and summary["failed"] == 1
    assert summary["total_input_tokens"] == 150 and summary["total_output_tokens"] == 5
    assert summary["request_throughput"] == 1.0
    assert summary["output_throughput"] == 2.5
    assert summary["total_token_throughput"] == 77.5
    assert summary["request_goodput"] == 0.5  # only A meets TTFT <= 200 ms
    assert summary["mean_ttft_ms"] == pytest.approx(200.0)
    assert summary["median_ttft_ms"] == pytest.approx(200.0)
    assert summary["std_ttft_ms"] == pytest.approx(100.0)  # population std, as numpy
    assert summary["p99_ttft_ms"] == pytest.approx(298.0)
    assert summary["mean_tpot_ms"] == pytest.approx(50.0)  # B has no TPOT and is left out
    assert summary["mean_itl_ms"] == pytest.approx(50.0) and summary["p50_itl_ms"] == pytest.approx(50.0)
    assert summary["mean_e2el_ms"] == pytest.approx(275.0)
    assert summary["peak_in_flight"] == 2
    assert summary["mean_client_queue_ms"] == pytest.approx(10.0)


def test_a_single_token_answer_counts_as_tpot_zero_for_goodput() -> None:
    one = rec(0.1, [], prompt=10, output=1)
    assert summarize([one], duration=1.0, slo=SLO(tpot_ms=1))["request_goodput"] == 1.0
    slow = rec(0.1, [0.5], prompt=10, output=2)
    assert summarize([slow], duration=1.0, slo=SLO(tpot_ms=100))["request_goodput"] == 0.0


def test_an_empty_or_all_failed_run_has_zeros_not_errors() -> None:
    for records in ([], [RequestRecord(success=False, error="down")]):
        summary = summarize(records, duration=0.0)
        assert summary["completed"] == 0 and summary["request_throughput"] == 0.0
        assert summary["mean_ttft_ms"] == 0.0 and summary["p99_e2el_ms"] == 0.0
        assert summary["request_goodput"] is None  # no SLO asked for


def _timed(t_send: float, chunks: list[float], t_end: float, *, success: bool = True) -> RequestRecord:
    return RequestRecord(t_send=t_send, text_chunk_at=chunks, t_end=t_end, success=success, output_tokens=len(chunks))


def test_peak_tokens_per_second_and_busiest_second_are_bucketed_as_vllm_bench_serve_does() -> None:
    # One-second buckets from the earliest send (0.0); a chunk counts one token where it arrived,
    # a request counts in every bucket from int(send) to int(end). D failed and counts nowhere.
    a = _timed(0.0, [0.2, 0.7, 1.2, 1.6], 1.65)  # tokens: b0 b0 b1 b1; active b0-b1
    b = _timed(0.5, [0.9, 1.1, 1.3, 2.4], 2.5)  # tokens: b0 b1 b1 b2; active b0-b2
    c = _timed(1.9, [2.6], 2.6)  # tokens: b2; active b1-b2
    d = _timed(0.1, [], 3.9, success=False)
    summary = summarize([a, b, c, d], duration=2.6, peak_in_flight=2)
    # buckets: tokens 3 / 4 / 2, active 2 / 3 / 2
    assert summary["max_output_tokens_per_s"] == 4.0
    assert summary["max_concurrent_requests"] == 3
    # At no instant were three in flight (A ended at 1.65, C began at 1.9): the runner's own count differs.
    assert summary["peak_in_flight"] == 2


def test_no_successful_request_gives_zero_peaks() -> None:
    summary = summarize([_timed(0.0, [], 1.0, success=False)], duration=1.0)
    assert summary["max_output_tokens_per_s"] == 0.0 and summary["max_concurrent_requests"] == 0
    assert summary["peak_in_flight"] is None
