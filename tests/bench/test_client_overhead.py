"""The scripted server (labapp/ops/scripted/) and the client-overhead command, without an engine.

Sanity bounds only: the overheads are timings of this machine, and the tests
claim nothing about them beyond "not negative" and "not absurd".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from bench import runner
from labapp.ops import scripted
from labapp.ops.measures.bench_client_overhead import threshold_ms
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord
from tests import aio

TTFT_MS, ITL_MS = 30.0, 5.0


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with scripted.spawn(ttft_ms=TTFT_MS, itl_ms=ITL_MS) as url:
        yield url


def test_the_scripted_stream_is_parsed_by_our_client(server: str) -> None:
    prompt = "k1 one two  three\nfour"

    async def go() -> tuple[list[RequestRecord], dict[str, Any], int]:
        async with httpx.AsyncClient(base_url=server, timeout=10) as http:
            records = [
                await vllm_client.stream_completion(prompt, max_tokens=5, model="scripted", client=http)
                for _ in range(3)
            ]
            stats = (await http.get("/stats", params={"reset": "1"})).json()
            tokens = (await http.post("/tokenize", json={"model": "scripted", "prompt": prompt})).json()["count"]
        return records, stats, tokens

    records, stats, tokens = aio.run(go())
    for record in records:
        assert record.success, record.error
        assert record.output_tokens == 5 and len(record.text_chunk_at) == 5 and record.generated_text == "xxxxx"
        assert record.prompt_tokens == 5 and record.finish_reason == "length"
        assert record.ttft is not None and record.ttft >= TTFT_MS / 1000
        # The server writes token k at ttft + k·itl after it has read the request, never earlier.
        assert record.e2el is not None and record.e2el >= (TTFT_MS + 4 * ITL_MS) / 1000
        assert record.tpot is not None and record.tpot > 0
    assert tokens == 5
    seen = [entry for entry in stats["requests"] if entry["key"] == "k1"]
    assert len(seen) == 3 and all(entry["done"] and entry["tokens"] == 5 for entry in seen)
    assert all(entry["first"] - entry["arrival"] >= TTFT_MS / 1000 for entry in seen)


def test_a_stream_read_to_the_end_leaves_the_connection_open_for_the_next_request(server: str) -> None:
    async def go() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=server, timeout=10) as http:
            await http.get("/stats", params={"reset": "1"})
            for _ in range(3):
                payload = {"prompt": "k2 a", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
                async with http.stream("POST", "/v1/completions", json=payload) as response:
                    assert response.headers["content-type"].startswith("text/event-stream")
                    lines = [line async for line in response.aiter_lines() if line]
                assert lines[-1] == "data: [DONE]" and len(lines) == 5  # 3 tokens, the usage chunk, [DONE]
                assert json.loads(lines[-2][5:]) | {"id": "", "created": 0} == {
                    "id": "",
                    "object": "text_completion",
                    "created": 0,
                    "model": "scripted",
                    "choices": [],
                    "usage": {"prompt_tokens": 2, "total_tokens": 5, "completion_tokens": 3},
                }
            stats: dict[str, Any] = (await http.get("/stats", params={"reset": "1"})).json()
            return stats

    stats = aio.run(go())
    assert stats["connections"] == 0  # all on the connection opened before the reset
    assert stats["peak_streams"] == 1 and stats["streams"] == 0


def test_a_run_streams_its_requests_in_turn_over_one_connection(server: str) -> None:
    # Each answer is read to the end of its body, so its connection goes back to the pool: a run at
    # concurrency 1 opens one connection, not one per request (a connect in every TTFT).
    async def go() -> tuple[runner.RunResult, dict[str, Any]]:
        async with httpx.AsyncClient(base_url=server, timeout=10) as http:
            await http.get("/stats", params={"reset": "1"})
            specs = [runner.RequestSpec(prompt=f"k3{i} a b", max_tokens=3) for i in range(5)]
            result = await runner.run(specs, base_url=server, model="scripted", shape=runner.LoadShape(concurrency=1))
            return result, (await http.get("/stats", params={"reset": "1"})).json()

    result, stats = aio.run(go())
    assert all(r.success for r in result.records), [r.error for r in result.records]
    assert stats["connections"] == 1 and len([e for e in stats["requests"] if e["key"].startswith("k3")]) == 5


def test_the_scripted_server_answers_the_other_routes_like_vllm(server: str) -> None:
    with httpx.Client(base_url=server, timeout=10) as http:
        assert http.get("/health").status_code == 200
        assert http.get("/v1/models").json()["data"][0]["id"] == "scripted"
        assert http.get("/nowhere").status_code == 404
        assert http.get("/v1/completions").status_code == 405
        assert http.post("/v1/completions", content=b"{not json").status_code == 400
        assert http.post("/v1/completions", json={"prompt": "a", "max_tokens": 0}).status_code == 400
        assert http.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).status_code == 400
        whole = http.post("/v1/completions", json={"prompt": "a b", "max_tokens": 3}).json()
        assert whole["choices"][0]["text"] == "xxx" and whole["usage"]["completion_tokens"] == 3


def test_our_runner_streams_from_it_at_once_with_usage_on_every_chunk(server: str) -> None:
    specs = [runner.RequestSpec(prompt=f"r{i} a b c", max_tokens=4) for i in range(16)]
    result = aio.run(runner.run(specs, base_url=server, model="scripted", shape=runner.LoadShape(concurrency=16)))
    assert all(r.success and r.output_tokens == 4 and r.prompt_tokens == 4 for r in result.records)
    assert result.max_concurrent == 16
    assert all((r.ttft or 0) >= TTFT_MS / 1000 for r in result.records)


def test_the_command_reports_overheads_per_level_as_json() -> None:
    out = StringIO()
    call_command(
        "bench_client_overhead",
        "--levels", "16,1",
        "--requests-per-level", "8",
        "--ttft-ms", str(TTFT_MS),
        "--itl-ms", str(ITL_MS),
        "--output-tokens", "4",
        "--json",
        stdout=out,
    )  # fmt: skip
    report = json.loads(out.getvalue())
    assert report["scripted"] == {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_tokens": 4, "prompt_words": 256}
    assert report["threshold_ms"] == threshold_ms(TTFT_MS) == 3.0
    assert [row["concurrency"] for row in report["levels"]] == [1, 16]
    for row in report["levels"]:
        level = row["concurrency"]
        assert row["failed"] == 0 and row["requests"] == 2 * level * row["runs"]
        assert row["runs"] == max(1, 8 // level)
        assert row["max_concurrent"] == level and 1 <= row["server_peak_streams"] <= level
        assert row["requests_per_s"] > 0
        for wave in ("first", "second"):
            stats = row[wave]
            assert stats["failed"] == 0 and stats["wrong_token_count"] == 0
            assert stats["requests"] == level * row["runs"]
            for name in ("ttft_overhead_ms", "client_queue_ms"):
                assert 0 <= stats[name]["p50"] <= stats[name]["p99"] < 5000, (level, wave, name, stats[name])
            # TPOT's overhead may be negative (a late first token shortens the decode interval), not below -ITL.
            assert -ITL_MS <= stats["tpot_overhead_ms"]["p50"] < 1000
            if report["shared_clock"]:
                split = stats["breakdown_ms"]
                assert split["matched"] == stats["requests"]
                assert split["send_to_server_read"]["p50"] >= 0 and split["server_late"]["p50"] >= 0
                assert split["server_write_to_client_read"]["p50"] >= 0
    assert report["distorts_at"].keys() == {"first", "second"}
    assert all(at in (None, 1, 16) for at in report["distorts_at"].values())


def test_the_command_prints_a_table_and_a_verdict() -> None:
    out = StringIO()
    call_command("bench_client_overhead", "--levels", "2", "--requests-per-level", "2", "--output-tokens", "2",
                 "--ttft-ms", "5", "--itl-ms", "1", stdout=out)  # fmt: skip
    text = out.getvalue()
    assert "first wave" in text and "second wave" in text and "TTFT+" in text
    assert "distort TTFT" in text


@pytest.mark.parametrize(
    "args", [["--levels", "0"], ["--levels", "a,b"], ["--output-tokens", "1"], ["--requests-per-level", "0"]]
)
def test_the_command_refuses_bad_options(args: list[str]) -> None:
    with pytest.raises(CommandError):
        call_command("bench_client_overhead", *args, stdout=StringIO())
