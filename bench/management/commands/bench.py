"""Run a benchmark job from a terminal, with a progress bar, writing the page's JSON and CSV.

python manage.py bench speed --repeats 2 --json speed.json --csv speed.csv
python manage.py bench load --set mode=rate --set rates=0.5,1,2 --set workload=rag --json load.json
"""

from __future__ import annotations

import asyncio
import csv
import json
import random
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import configs, exports, jobs
from bench.models import BenchJob
from rag.vllm import client as vllm_client


class Command(BaseCommand):
    help = (
        "Run a benchmark job against vLLM: speed (Lab 1), sweep (2), load (3), retrieval (4), prefix (5), "
        "short (6). --set KEY=VALUE takes the job page's settings (e.g. concurrencies=1,2,4)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=[kind for kind, _ in BenchJob.Kind.choices])
        parser.add_argument("--repeats", type=int, default=2)
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a job setting")
        parser.add_argument("--custom", type=Path, help="a JSONL workload (load with --set workload=custom)")
        parser.add_argument("--json", type=Path, help="write the results here")
        parser.add_argument("--csv", type=Path, help="write one row per request here")

    def handle(self, *args: Any, **options: Any) -> None:
        seed = random.SystemRandom().randrange(1, 1 << 30)
        raw: dict[str, Any] = {"repeats": options["repeats"], "seed": seed}
        for item in options["set"]:
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--set {item}: expected KEY=VALUE")
            raw[key.strip()] = value.strip()
        try:
            if options["custom"]:
                prompts = configs.jsonl_parse(options["custom"].read_bytes(), field="--custom")
                raw["custom"] = [{"prompt": c.prompt, "max_tokens": c.max_tokens} for c in prompts]
            config = jobs.config_for(options["kind"], raw)
        except configs.ConfigError as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from exc
        except OSError as exc:
            raise CommandError(str(exc)) from exc
        base = vllm_client.base_url()

        async def progress(done: int, total: int, cell: str) -> bool:
            filled = round(30 * done / total)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {cell:<28}")
            sys.stderr.flush()
            return True

        async def measure() -> tuple[dict[str, Any], bool]:
            model = await vllm_client.engine_model(base)
            return await jobs.job_measure(config, base_url=base, model=model, progress=progress)

        try:
            results, _cancelled = asyncio.run(measure())
        except vllm_client.EngineUnavailable as exc:
            raise CommandError(str(exc)) from exc
        sys.stderr.write("\n")
        for cell in results["cells"]:
            self.stdout.write(cell_line(cell))
        for line in summary_lines(results):
            self.stdout.write(line)
        if options["json"]:
            job = BenchJob(kind=options["kind"], config=raw, engine_url=base, results=results, status="done")
            data = exports.job_json(job, model=str(results.get("model", "")))
            options["json"].write_text(json.dumps(data, indent=1, ensure_ascii=False))
        if options["csv"]:
            with options["csv"].open("w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=exports.CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(exports.csv_rows(results))


def _ms(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def cell_line(cell: dict[str, Any]) -> str:
    """One line per cell: its name, then the numbers its kind is about."""
    name = exports.cell_name(cell)
    if "request_throughput" in cell:
        return (
            f"{name:<24} {cell['request_throughput']:.2f} req/s, {cell['output_throughput']:.1f} tok/s, "
            f"goodput {cell['request_goodput']:.2f} req/s, TTFT p50/p99 {_ms(cell['median_ttft_ms'])}/"
            f"{_ms(cell['p99_ttft_ms'])} ms, TPOT p50 {_ms(cell['median_tpot_ms'], 1)} ms"
        )
    line = (
        f"{name:<24} TTFT {_ms(cell['median_ttft_ms'], 1):>8} ms, TPOT {_ms(cell['median_tpot_ms'], 1):>6} ms, "
        f"E2EL {_ms(cell['median_e2el_ms']):>6} ms"
    )
    if "prefill_speed" in cell:
        line += f", prefill {_ms(cell['prefill_speed'])} tok/s, decode {_ms(cell['decode_speed'], 1)} tok/s"
    if "median_context_tokens" in cell:
        line += f", context {_ms(cell['median_context_tokens'])} tok, retrieval {_ms(cell['median_retrieval_ms'])} ms"
    if "hit_rate" in cell:
        line += f", cached {_ms(cell['median_cached_tokens'])} tok (hit rate {_ms(cell['hit_rate'], 2)})"
    if "median_output_tokens" in cell and "brief" in cell:
        line += f", output {_ms(cell['median_output_tokens'])} tok, evidence {_ms(cell['answer_coverage'], 2)}"
    return line


def summary_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    if "slo" in results:
        lines.append(f"highest load meeting the SLO {results['slo']}: {results.get('best_level')}")
    if results.get("prefill_speed") or results.get("decode_speed"):
        line = f"prefill {_ms(results.get('prefill_speed'))} tok/s, decode {_ms(results.get('decode_speed'), 1)} tok/s"
        check = results.get("check")
        if check:
            line += (
                f"; estimate on {check['input_tokens']}/{check['output_tokens']}: {check['estimate_s']} s vs "
                f"measured {check['measured_s']} s ({check['error_pct']} % off)"
            )
        lines.append(line)
    fits = results.get("fits") or {}
    if fits.get("ttft_vs_input") and fits.get("decode_vs_output"):
        ttft, decode = fits["ttft_vs_input"], fits["decode_vs_output"]
        lines.append(
            f"TTFT = {ttft['slope']:.3f} ms/token x input + {ttft['intercept']:.1f} ms (r² {ttft['r2']:.3f}); "
            f"decode = {decode['slope']:.1f} ms/token x (output-1) + {decode['intercept']:.1f} ms "
            f"(r² {decode['r2']:.3f})"
        )
    if "cache_reset" in results:
        lines.append(
            f"prefix cache reset: {results['cache_reset']}; "
            f"warm/cold TTFT speed-up {_ms(results.get('warm_speedup'), 1)}x"
        )
    if "time_saved_pct" in results:
        lines.append(f"brief + capped vs normal: {_ms(results['time_saved_pct'])} % less time per answer")
    return lines
