"""Our run summary against vllm bench serve's own ``calculate_metrics``, run in the engine's virtualenv.

The hand-computed cases are in test_run_metrics.py; this feeds both implementations the
same randomly timed requests and compares the figures they share.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from bench.metrics import summarize
from rag.vllm.records import RequestRecord

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"

VLLM_SIDE = """
import json, sys
from types import SimpleNamespace
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.serve import calculate_metrics
answers = []
for rows in json.load(sys.stdin):
    outputs = [RequestFuncOutput(**row) for row in rows]
    inputs = [SimpleNamespace(prompt_len=row["prompt_len"], expected_output_len=row["output_tokens"]) for row in rows]
    duration = max(r["start_time"] + r["latency"] for r in rows) - min(r["start_time"] for r in rows)
    metrics, _ = calculate_metrics(inputs, outputs, duration, None, [50.0, 99.0], {})
    answer = {"duration": duration, **{k: v for k, v in vars(metrics).items() if isinstance(v, (int, float))}}
    for name in ("ttft", "itl"):
        answer |= {f"p{p:g}_{name}_ms": v for p, v in getattr(metrics, f"percentiles_{name}_ms")}
    answers.append(answer)
print(json.dumps(answers))
"""

SEEDS = (1, 2, 3)


def _records(seed: int) -> list[RequestRecord]:
    rng = random.Random(seed)
    records = []
    for _ in range(40):
        t_send = rng.uniform(0, 6)
        chunks = [t_send + rng.uniform(0.05, 0.6)]
        for _ in range(rng.randint(0, 30)):
            chunks.append(chunks[-1] + rng.uniform(0.005, 0.12))
        ok = rng.random() > 0.1
        record = RequestRecord(
            t_send=t_send,
            text_chunk_at=chunks if ok else [],
            t_end=chunks[-1] + rng.uniform(0, 0.02),
            success=ok,
            prompt_tokens=rng.randint(10, 400),
            output_tokens=len(chunks) if ok else None,
        )
        records.append(record)
    return records


def _rows(records: list[RequestRecord]) -> list[dict[str, object]]:
    return [
        {
            "success": r.success,
            "start_time": r.t_send,
            "latency": (r.t_end or r.t_send) - r.t_send,
            "ttft": r.ttft or 0.0,
            "itl": r.itl,
            "output_tokens": r.output_tokens or 0,
            "prompt_len": r.prompt_tokens or 0,
        }
        for r in records
    ]


@pytest.fixture(scope="module")
def vllm_figures() -> list[dict[str, float]]:
    """vLLM's figures for every seed's requests, from one interpreter (importing vLLM takes a while)."""
    if not ENGINE_PYTHON.exists():
        pytest.fail("the engine's virtualenv (.venv-engine) is not installed: run make setup")
    done = subprocess.run(
        [str(ENGINE_PYTHON), "-P", "-c", VLLM_SIDE],
        input=json.dumps([_rows(_records(seed)) for seed in SEEDS]),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures: list[dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.mark.integration
@pytest.mark.parametrize("number", range(len(SEEDS)))
def test_our_summary_matches_vllm_calculate_metrics_on_the_same_requests(
    number: int, vllm_figures: list[dict[str, float]]
) -> None:
    records = _records(SEEDS[number])
    theirs = vllm_figures[number]
    ours = summarize(records, duration=theirs["duration"])
    assert ours["max_output_tokens_per_s"] == theirs["max_output_tokens_per_s"]
    assert ours["max_concurrent_requests"] == theirs["max_concurrent_requests"]
    for key in ("completed", "total_input", "request_throughput", "output_throughput"):
        mine = {"total_input": ours["total_input_tokens"]}.get(key, ours.get(key))
        assert mine == pytest.approx(theirs[key]), key
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms"):
        assert ours[key] == pytest.approx(theirs[key]), key
