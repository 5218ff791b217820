"""vLLM's own benchmark client (`vllm bench serve`), run as the reference our runner is measured against.

It runs in the engine's virtualenv (``bench/vllm_bench_serve.py``) on prompts we give it as a
``custom`` dataset, and its ``--save-result`` JSON is read back. The CPU it spends is read from
the line where its main run starts to the line where it prints its result table, so its
imports, tokenizer load and start-up test request are not counted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import psutil

from labapp.ops.stack.components import ENGINE_PYTHON, ROOT

RUN_LIMIT_S = 1800  # vllm bench serve is killed past this


class ReferenceFailed(RuntimeError):
    """vllm bench serve exited with an error (its output's tail is the message)."""


def available() -> bool:
    return ENGINE_PYTHON.exists()


def _cpu_s(process: psutil.Process) -> float:
    """User + system CPU seconds a process has used so far (0 when it is gone)."""
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


def run_command(command: list[str]) -> tuple[int, str, float]:
    """Run vLLM's client; returns (exit code, its output, CPU seconds it used during the main run)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1"},
    )
    watchdog = threading.Timer(RUN_LIMIT_S, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        client = psutil.Process(process.pid)
        lines: list[str] = []
        began = ended = 0.0
        for line in process.stdout:
            lines.append(line)
            if "Starting main benchmark run" in line:
                began = _cpu_s(client)
            elif "Serving Benchmark Result" in line and not ended:
                ended = _cpu_s(client)
        code = process.wait()
    finally:
        watchdog.cancel()
    if code == -signal.SIGKILL:
        lines.append(f"\nkilled after {RUN_LIMIT_S} s")
    return code, "".join(lines), ended - began if began and ended > began else 0.0


def run(
    prompts: list[str],
    *,
    base: str,
    model: str,
    tokenizer: str,
    output_len: int,
    concurrency: int,
) -> tuple[dict[str, Any], float]:
    """vllm bench serve on ``prompts`` (all due at once, at most ``concurrency`` in flight, exactly
    ``output_len`` tokens each, greedy): its saved result with per-request details, and its CPU seconds."""
    with tempfile.TemporaryDirectory(prefix="reference-") as folder:
        dataset = Path(folder) / "prompts.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
        command = [
            str(ENGINE_PYTHON),
            "-P",  # not bench/ on sys.path: bench/selectors.py would shadow the standard library's selectors
            str(ROOT / "bench" / "vllm_bench_serve.py"),
            "--",
            "--backend", "openai",
            "--base-url", base,
            "--endpoint", "/v1/completions",
            "--model", model,
            "--tokenizer", tokenizer,
            "--dataset-name", "custom",
            "--dataset-path", str(dataset),
            "--custom-output-len", str(output_len),
            "--skip-chat-template",
            "--disable-shuffle",
            "--num-prompts", str(len(prompts)),
            "--max-concurrency", str(concurrency),
            "--request-rate", "inf",
            "--ignore-eos",
            # Ours decodes greedily (temperature 0); vLLM's client no longer does by default, and
            # sampling over Gemma 3's 262k-token vocabulary made its TPOT 5-25 % slower here.
            "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,90,95,99",
            "--save-result",
            "--save-detailed",
            "--result-dir", folder,
            "--result-filename", "vllm.json",
        ]  # fmt: skip
        code, output, cpu_s = run_command(command)
        if code != 0:
            raise ReferenceFailed(f"vllm bench serve failed ({code}):\n{output[-3000:]}")
        saved: dict[str, Any] = json.loads((Path(folder) / "vllm.json").read_text())
    return saved, cpu_s
