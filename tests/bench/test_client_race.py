"""The race of our runner against vllm bench serve on the scripted server (bench_client_race)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from labapp.ops.measures.bench_client_race import report_lines, split


def test_the_added_ttft_splits_into_send_server_and_receive() -> None:
    # Sent at 10.000 s with a 62 ms TTFT; the server read it 2 ms later, wrote its first token
    # 53 ms after reading (3 ms late on a 50 ms script), and the client read it 7 ms after that.
    sent = {"k1": (10.000, 0.062), "k2": (10.010, 0.060)}
    seen = {"k1": {"arrival": 10.002, "first": 10.055}, "other": {"arrival": 9.0, "first": 9.1}}
    parts = split(sent, seen, ttft_s=0.050)
    assert parts["added_ttft_ms"]["p50"] == pytest.approx(11.0)  # 12 and 10 ms
    assert parts["send_to_server_read_ms"]["p50"] == pytest.approx(2.0)  # k2 was not in the server's log
    assert parts["server_late_ms"]["p50"] == pytest.approx(3.0)
    assert parts["server_write_to_client_read_ms"]["p50"] == pytest.approx(7.0)


def _side(added: float) -> dict[str, object]:
    p = {"p50": added, "p99": added * 2}
    return {
        "added_ttft_ms": p,
        "send_to_server_read_ms": p,
        "server_late_ms": p,
        "server_write_to_client_read_ms": p,
        "cpu_s": 1.0,
        "failed": 0,
        "error": None,
    }


def test_the_report_names_the_ratio_per_level_and_the_verdict() -> None:
    report = {
        "scripted": {"ttft_ms": 50.0, "itl_ms": 10.0, "output_tokens": 8, "prompt_words": 200},
        "rounds": 1,
        "levels": [
            {"concurrency": 1, "requests": 128, "ours": _side(2.0), "vllm": _side(4.0), "ratio": 0.5},
            {"concurrency": 256, "requests": 512, "ours": _side(90.0), "vllm": _side(60.0), "ratio": 1.5},
        ],
        "ours_at_or_under_vllm": False,
    }
    text = "\n".join(report_lines(report))
    assert "0.50" in text and "1.50" in text and "ABOVE vllm bench serve's" in text


@pytest.mark.parametrize("args", [["--levels", "0"], ["--requests", "0"], ["--output-tokens", "1"]])
def test_the_race_refuses_bad_options(args: list[str]) -> None:
    with pytest.raises(CommandError):
        call_command("bench_client_race", *args, stdout=StringIO())


@pytest.mark.integration
def test_both_clients_run_against_the_scripted_server_and_every_request_is_matched() -> None:
    out = StringIO()
    call_command("bench_client_race", "--levels", "1,4", "--requests", "8", "--ttft-ms", "20", "--itl-ms", "2",
                 "--output-tokens", "4", "--json", stdout=out)  # fmt: skip
    report = json.loads(out.getvalue())
    assert [row["concurrency"] for row in report["levels"]] == [1, 4]
    for row in report["levels"]:
        for client in ("ours", "vllm"):
            side = row[client]
            assert side["failed"] == 0, side["error"]
            assert 0 <= side["added_ttft_ms"]["p50"] < 1000
            assert side["send_to_server_read_ms"]["p50"] is not None  # the server's log matched the requests
            assert side["cpu_s"] > 0
        assert row["ratio"] is not None and row["ratio"] > 0
