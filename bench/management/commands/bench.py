"""Run a benchmark job from a terminal, with a progress bar, writing the page's JSON and CSV.

python manage.py bench speed --repeats 2 --json speed.json --csv speed.csv
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

from bench import exports, jobs
from rag import vllm_client


class Command(BaseCommand):
    help = "Run a benchmark job (speed: Lab 1's speed probe; sweep: Lab 2's length sweeps) against vLLM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=["speed", "sweep", "load"])
        parser.add_argument("--repeats", type=int, default=2)
        parser.add_argument("--json", type=Path, help="write the results here")
        parser.add_argument("--csv", type=Path, help="write one row per request here")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["repeats"] <= 20:
            raise CommandError("--repeats must be from 1 to 20")
        seed = random.SystemRandom().randrange(1, 1 << 30)
        config = jobs.config_for(options["kind"], {"repeats": options["repeats"], "seed": seed})
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
            if "concurrency" in cell:
                self.stdout.write(
                    f"concurrency {cell['concurrency']:>3}: {cell['request_throughput']:.2f} req/s, "
                    f"{cell['output_throughput']:.1f} tok/s, goodput {cell['request_goodput']:.2f} req/s, "
                    f"TTFT p50/p99 {cell['median_ttft_ms']:.0f}/{cell['p99_ttft_ms']:.0f} ms, "
                    f"TPOT p50 {cell['median_tpot_ms']:.1f} ms"
                )
                continue
            self.stdout.write(
                f"{cell['input_tokens']:>5} in / {cell['output_tokens']:>4} out: "
                f"TTFT {cell['median_ttft_ms']:8.1f} ms, "
                f"TPOT {cell['median_tpot_ms']:6.1f} ms, prefill {cell['prefill_speed'] or 0:7.0f} tok/s, "
                f"decode {cell['decode_speed'] or 0:5.1f} tok/s"
            )
        check = results.get("check")
        if "best_concurrency" in results:
            self.stdout.write(f"highest concurrency meeting the SLO {results['slo']}: {results['best_concurrency']}")
        self.stdout.write(
            f"prefill {results.get('prefill_speed') or 0:.0f} tok/s, "
            f"decode {results.get('decode_speed') or 0:.1f} tok/s"
            + (
                f"; estimate on {check['input_tokens']}/{check['output_tokens']}: {check['estimate_s']} s vs "
                f"measured {check['measured_s']} s ({check['error_pct']} % off)"
                if check
                else ""
            )
        )
        fits = results.get("fits")
        if fits and fits["ttft_vs_input"] and fits["decode_vs_output"]:
            ttft, decode = fits["ttft_vs_input"], fits["decode_vs_output"]
            self.stdout.write(
                f"TTFT = {ttft['slope']:.3f} ms/token x input + {ttft['intercept']:.1f} ms (r² {ttft['r2']:.3f}); "
                f"decode = {decode['slope']:.1f} ms/token x (output-1) + {decode['intercept']:.1f} ms "
                f"(r² {decode['r2']:.3f})"
            )
        if options["json"]:
            options["json"].write_text(json.dumps({"kind": "speed", "engine_url": base, "results": results}, indent=1))
        if options["csv"]:
            with options["csv"].open("w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=exports.CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(exports.csv_rows(results))
