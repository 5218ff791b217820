"""The per-request timing math of docs/metrics.md, on scripted streams and clocks."""

from __future__ import annotations

from typing import Any

import pytest

from rag.vllm.records import RequestRecord, apply_chunk


def _text(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def _play(chunks: list[tuple[float, dict[str, Any]]], t_send: float = 10.0) -> RequestRecord:
    record = RequestRecord(t_send=t_send)
    for at, chunk in chunks:
        apply_chunk(record, chunk, at)
    return record


def test_it_measures_ttft_itl_e2el_and_tpot_from_text_chunks() -> None:
    record = _play(
        [
            (10.5, _text("")),  # a role/empty chunk: first_chunk latches here, TTFT does not
            (11.0, _text("Hel")),
            (11.1, _text("lo")),
            (11.3, _text("!", finish="length")),
            (
                11.4,
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 100,
                        "completion_tokens": 3,
                        "prompt_tokens_details": {"cached_tokens": 64},
                    },
                },
            ),
        ]
    )
    assert record.first_chunk == pytest.approx(0.5)
    assert record.ttft == pytest.approx(1.0)
    assert record.itl == pytest.approx([0.1, 0.2])
    assert record.e2el == pytest.approx(1.3)  # the trailing usage chunk does not count
    assert record.decode_time == pytest.approx(0.3)
    assert record.tpot == pytest.approx(0.15)
    assert record.decode_speed == pytest.approx(2 / 0.3)
    assert record.prefill_time_source == "client_ttft"
    assert record.prefill_speed == pytest.approx(100.0)
    assert (record.prompt_tokens, record.output_tokens, record.cached_tokens) == (100, 3, 64)
    assert record.generated_text == "Hello!"
    assert record.finish_reason == "length"


def test_it_prefers_the_servers_prefill_time_and_says_so() -> None:
    record = _play(
        [
            (11.0, _text("a")),
            (11.2, _text("b")),
            (
                11.3,
                {
                    "choices": [],
                    "usage": {"prompt_tokens": 600, "completion_tokens": 2},
                    "metrics": {"queue_time_ms": 5.0, "time_to_first_token_ms": 900.0, "generation_time_ms": 190.0},
                },
            ),
        ]
    )
    assert record.queue_time_server == pytest.approx(0.005)
    assert record.prefill_time_server == pytest.approx(0.9)
    assert record.decode_time_server == pytest.approx(0.19)
    assert record.prefill_time_source == "server"
    assert record.prefill_speed == pytest.approx(600 / 0.9)
    assert record.cached_tokens is None  # not reported: null, not zero


def test_chat_deltas_and_reasoning_text_both_count_as_generated_text() -> None:
    record = _play(
        [
            (10.2, {"choices": [{"delta": {"role": "assistant"}}]}),
            (10.4, {"choices": [{"delta": {"reasoning_content": "think"}}]}),
            (10.6, {"choices": [{"delta": {"content": "answer"}}]}),
        ]
    )
    assert record.first_chunk == pytest.approx(0.2)
    assert record.ttft == pytest.approx(0.4)
    assert record.generated_text == "thinkanswer"


def test_tpot_is_undefined_for_a_single_output_token() -> None:
    record = _play([(10.3, _text("x")), (10.4, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})])
    assert record.decode_time == pytest.approx(0.0)
    assert record.tpot is None
    assert record.decode_speed is None


def test_a_record_without_text_has_no_timings() -> None:
    record = RequestRecord(t_send=1.0, error="boom")
    assert record.ttft is None and record.e2el is None and record.decode_time is None and record.tpot is None
    assert record.as_dict()["error"] == "boom"
