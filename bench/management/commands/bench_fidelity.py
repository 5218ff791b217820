"""Our runner against `vllm bench serve` on the same workload and server, in one run.

Both get prompts of the same exact token length and the same output length
(``ignore_eos``), at the same concurrency, but different prompt texts, so neither
finds the other's prefixes in vLLM's prefix cache. Prints median TTFT, median
TPOT and output throughput side by side with their ratios (ours / vLLM's).

    python manage.py bench_fidelity --num-prompts 16 --input-len 256 --output-len 32 --concurrency 4
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import runner
from bench.metrics import summarize
from bench.workloads import synthetic_prompts
from labapp.stack.components import ENGINE_PYTHON, ROOT, embedded_model_dir
from rag import vllm_client

COMPARED = [
    ("median TTFT (ms)", "median_ttft_ms"),
    ("p99 TTFT (ms)", "p99_ttft_ms"),
    ("median TPOT (ms)", "median_tpot_ms"),
    ("median ITL (ms)", "median_itl_ms"),
    ("median E2EL (ms)", "median_e2el_ms"),
    ("output throughput (tok/s)", "output_throughput"),
]


class Command(BaseCommand):
    help = "Compare this lab's load generator with vllm bench serve on one workload."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--num-prompts", type=int, default=16)
        parser.add_argument("--input-len", type=int, default=256)
        parser.add_argument("--output-len", type=int, default=32)
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--tokenizer", default="", help="tokenizer path for vllm bench serve (external engines)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in ("num_prompts", "input_len", "output_len", "concurrency"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if not ENGINE_PYTHON.exists():
            raise CommandError(f"vllm bench serve needs the engine's virtualenv ({ENGINE_PYTHON}); run `make engine`")
        try:
            report = asyncio.run(compare(options))
        except vllm_client.EngineUnavailable as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report))
            return
        self.stdout.write(
            f"{options['num_prompts']} prompts × {options['input_len']} tokens in, {options['output_len']} out, "
            f"concurrency {options['concurrency']}, model {report['model']}"
        )
        self.stdout.write(f"{'':<28}{'vllm bench serve':>18}{'this lab':>12}{'ratio':>8}")
        for label, key in COMPARED:
            theirs, ours = report["vllm"][key], report["ours"][key]
            ratio = ours / theirs if theirs else float("nan")
            self.stdout.write(f"{label:<28}{theirs:>18.2f}{ours:>12.2f}{ratio:>8.3f}")
        self.stdout.write(
            f"{'our TTFT on first chunk':<28}{'':>18}{report['ours']['median_first_chunk_ttft_ms']:>12.2f}"
            "  (vllm bench serve latches on the first chunk with choices)"
        )


async def compare(options: dict[str, Any]) -> dict[str, Any]:
    base = vllm_client.base_url()
    model = await asyncio.to_thread(vllm_client.model_name)
    tokenizer = options["tokenizer"] or (str(embedded_model_dir()) if settings.VLLM_EMBEDDED else model)
    n, output_len = options["num_prompts"], options["output_len"]
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        theirs_prompts = await synthetic_prompts(n, options["input_len"], seed=101, model=model, client=http)
        our_prompts = await synthetic_prompts(n, options["input_len"], seed=202, model=model, client=http)
        warm_prompts = await synthetic_prompts(2, options["input_len"], seed=303, model=model, client=http)
    with tempfile.TemporaryDirectory(prefix="fidelity-") as folder:
        dataset = Path(folder) / "prompts.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in theirs_prompts))
        command = [
            str(ENGINE_PYTHON),
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
            "--num-prompts", str(n),
            "--max-concurrency", str(options["concurrency"]),
            "--request-rate", "inf",
            "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,90,95,99",
            "--save-result",
            "--save-detailed",
            "--result-dir", folder,
            "--result-filename", "vllm.json",
        ]  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run,
            command,
            capture_output=True,
            text=True,
            env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1"},
            timeout=1800,
        )
        if done.returncode != 0:
            raise CommandError(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
        theirs = json.loads((Path(folder) / "vllm.json").read_text())
    shape = runner.LoadShape(concurrency=options["concurrency"])
    specs = [runner.RequestSpec(prompt=p, max_tokens=output_len) for p in our_prompts]
    warm = [runner.RequestSpec(prompt=p, max_tokens=output_len) for p in warm_prompts]
    result = await runner.run(specs, base_url=base, model=model, shape=shape, warmup=warm)
    ours = summarize(result.records, duration=result.duration, max_concurrent_requests=result.max_concurrent)
    first_chunks = sorted((r.first_chunk or 0) * 1000 for r in result.records if r.success)
    ours["median_first_chunk_ttft_ms"] = first_chunks[len(first_chunks) // 2] if first_chunks else 0.0
    return {
        "model": model,
        "vllm": {key: float(theirs.get(key) or 0.0) for _, key in COMPARED} | {"completed": theirs.get("completed")},
        "ours": {key: float(ours[key] or 0.0) for _, key in COMPARED}
        | {"completed": ours["completed"], "median_first_chunk_ttft_ms": ours["median_first_chunk_ttft_ms"]},
        "prompt_tokens": {
            "vllm": sum(theirs.get("input_lens") or []) / max(1, len(theirs.get("input_lens") or [])),
            "ours": ours["total_input_tokens"] / max(1, ours["completed"]),
        },
    }
