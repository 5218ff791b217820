"""Our runner against `vllm bench serve` on the same workload and server, in one run.

Both get prompts of the same exact token length and the same output length
(``ignore_eos``), at the same concurrency, but different prompt texts, so neither
finds the other's prefixes in vLLM's prefix cache. Prints median TTFT, median
TPOT and output throughput side by side with their ratios (ours / vLLM's), and
the CPU time each client spent during its run (on a small machine the client
shares the cores with the engine). ``--rounds N`` runs N pairs, alternating which
client goes first, on fresh prompts each time, and reports medians over the rounds.

    python manage.py bench_fidelity --num-prompts 16 --input-len 256 --output-len 32 --concurrency 4 --rounds 4
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import runner
from bench.metrics import summarize
from bench.workloads import synthetic_prompts
from labapp.ops.measures import reference
from labapp.ops.report import emit
from labapp.ops.stack.components import ENGINE_PYTHON, embedded_model_dir
from rag.vllm import client as vllm_client

COMPARED = [
    ("median TTFT (ms)", "median_ttft_ms"),
    ("p99 TTFT (ms)", "p99_ttft_ms"),
    ("median TPOT (ms)", "median_tpot_ms"),
    ("median ITL (ms)", "median_itl_ms"),
    ("median E2EL (ms)", "median_e2el_ms"),
    ("output throughput (tok/s)", "output_throughput"),
]
RATIO_KEYS = ("median_ttft_ms", "median_tpot_ms", "output_throughput")


class Command(BaseCommand):
    help = "Compare this lab's load generator with vllm bench serve on one workload."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--num-prompts", type=int, default=16)
        parser.add_argument("--input-len", type=int, default=256)
        parser.add_argument("--output-len", type=int, default=32)
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument(
            "--rounds", type=int, default=1, help="pairs of runs; who goes first alternates (vLLM's client in round 1)"
        )
        parser.add_argument("--tokenizer", default="", help="tokenizer path for vllm bench serve (external engines)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in ("num_prompts", "input_len", "output_len", "concurrency", "rounds"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if not ENGINE_PYTHON.exists():
            raise CommandError(f"vllm bench serve needs the engine's virtualenv ({ENGINE_PYTHON}); run `make engine`")
        try:
            report = asyncio.run(compare(options))
        except vllm_client.EngineUnavailable as exc:
            raise CommandError(str(exc)) from exc

        def text_lines() -> Iterator[str]:
            yield (
                f"{options['num_prompts']} prompts × {options['input_len']} tokens in, {options['output_len']} out, "
                f"concurrency {options['concurrency']}, model {report['model']}"
            )
            yield f"{'':<28}{'vllm bench serve':>18}{'this lab':>12}{'ratio':>8}"
            for label, key in COMPARED:
                theirs, ours = report["vllm"][key], report["ours"][key]
                ratio = ours / theirs if theirs else float("nan")
                yield f"{label:<28}{theirs:>18.2f}{ours:>12.2f}{ratio:>8.3f}"
            yield (
                f"{'our TTFT on first chunk':<28}{'':>18}{report['ours']['median_first_chunk_ttft_ms']:>12.2f}"
                "  (vllm bench serve latches on the first chunk with choices)"
            )
            theirs_cpu, ours_cpu = report["vllm"]["client_cpu_s"], report["ours"]["client_cpu_s"]
            yield f"{'client CPU during the run (s)':<28}{theirs_cpu:>18.2f}{ours_cpu:>12.2f}"
            if len(report["rounds"]) > 1:
                yield "per round (ours / vLLM's): first, median TTFT, median TPOT, output throughput"
                for r in report["rounds"]:
                    ratios = [r["ours"][k] / r["vllm"][k] if r["vllm"][k] else float("nan") for k in RATIO_KEYS]
                    yield f"  {r['first']:<6}" + "".join(f"{x:>8.3f}" for x in ratios)

        emit(self.stdout, report, json_wanted=options["json"], lines=text_lines)


async def _theirs(
    options: dict[str, Any], prompts: list[str], *, base: str, model: str, tokenizer: str
) -> dict[str, Any]:
    try:
        theirs, cpu_s = await asyncio.to_thread(
            reference.run,
            prompts,
            base=base,
            model=model,
            tokenizer=tokenizer,
            output_len=options["output_len"],
            concurrency=options["concurrency"],
        )
    except reference.ReferenceFailed as exc:
        raise CommandError(str(exc)) from exc
    input_lens = theirs.get("input_lens") or []
    return {key: float(theirs.get(key) or 0.0) for _, key in COMPARED} | {
        "completed": theirs.get("completed"),
        "prompt_tokens": sum(input_lens) / max(1, len(input_lens)),
        "client_cpu_s": round(cpu_s, 3),
    }


async def _ours(
    options: dict[str, Any], prompts: list[str], warm_prompts: list[str], *, base: str, model: str
) -> dict[str, Any]:
    output_len = options["output_len"]
    shape = runner.LoadShape(concurrency=options["concurrency"])
    specs = [runner.RequestSpec(prompt=p, max_tokens=output_len) for p in prompts]
    warm = [runner.RequestSpec(prompt=p, max_tokens=output_len) for p in warm_prompts]
    result = await runner.run(specs, base_url=base, model=model, shape=shape, warmup=warm)
    ours = summarize(result.records, duration=result.duration, peak_in_flight=result.max_concurrent)
    first_chunks = sorted((r.first_chunk or 0) * 1000 for r in result.records if r.success)
    return {key: float(ours[key] or 0.0) for _, key in COMPARED} | {
        "completed": ours["completed"],
        "median_first_chunk_ttft_ms": first_chunks[len(first_chunks) // 2] if first_chunks else 0.0,
        "prompt_tokens": ours["total_input_tokens"] / max(1, ours["completed"]),
        # process CPU over the measured requests only (the warm-up runs before the clock starts)
        "client_cpu_s": round(result.client_cpu_s, 3),
    }


def _median_of_rounds(rounds: list[dict[str, Any]], side: str) -> dict[str, Any]:
    keys = [key for key, value in rounds[0][side].items() if isinstance(value, int | float)]
    merged: dict[str, Any] = {key: statistics.median(r[side][key] for r in rounds) for key in keys}
    merged["completed"] = sum(int(r[side]["completed"] or 0) for r in rounds) // len(rounds)
    return merged


async def compare(options: dict[str, Any]) -> dict[str, Any]:
    """``rounds`` pairs of runs, alternating who goes first (vLLM's client first in even
    rounds), each on its own fresh prompts; the figures are medians over the rounds."""
    base = vllm_client.base_url()
    model = await asyncio.to_thread(vllm_client.model_name)
    tokenizer = options["tokenizer"] or (str(embedded_model_dir()) if settings.VLLM_EMBEDDED else model)
    n = options["num_prompts"]
    rounds: list[dict[str, Any]] = []
    for number in range(options.get("rounds") or 1):
        async with vllm_client.connect(base, timeout=60) as http:
            seed = 1000 * (number + 1)
            theirs_prompts = await synthetic_prompts(n, options["input_len"], seed=seed + 101, model=model, client=http)
            our_prompts = await synthetic_prompts(n, options["input_len"], seed=seed + 202, model=model, client=http)
            warm_prompts = await synthetic_prompts(2, options["input_len"], seed=seed + 303, model=model, client=http)
        vllm_first = number % 2 == 0
        if vllm_first:
            theirs = await _theirs(options, theirs_prompts, base=base, model=model, tokenizer=tokenizer)
            ours = await _ours(options, our_prompts, warm_prompts, base=base, model=model)
        else:
            ours = await _ours(options, our_prompts, warm_prompts, base=base, model=model)
            theirs = await _theirs(options, theirs_prompts, base=base, model=model, tokenizer=tokenizer)
        rounds.append({"first": "vllm" if vllm_first else "ours", "vllm": theirs, "ours": ours})
    vllm, ours = _median_of_rounds(rounds, "vllm"), _median_of_rounds(rounds, "ours")
    return {
        "model": model,
        "rounds": rounds,
        "vllm": vllm,
        "ours": ours,
        "prompt_tokens": {"vllm": vllm.pop("prompt_tokens"), "ours": ours.pop("prompt_tokens")},
    }
