"""Run a benchmark job from a terminal, with a progress bar, writing the page's JSON and CSV.

python manage.py bench speed --repeats 2 --json speed.json --csv speed.csv
python manage.py bench load --set mode=rate --set rates=0.5,1,2 --set workload=rag --json load.json
python manage.py bench load --set workload=custom --custom prompts.jsonl

Any registered job kind runs; --set takes the settings of its form fields (their
defaults are the kind's own), a file setting given as the path of the file.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import configs, exports, kinds, provenance
from bench.kinds import registry
from bench.models import BenchJob
from rag.vllm import client as vllm_client


class ProgressBar:
    """A ``bench.reporting.Reporter`` drawing a bar on stderr; it never stops the job and keeps no partial results."""

    async def progress(self, done: int, total: int, cell: str) -> bool:
        filled = round(30 * done / total) if total else 30
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {cell:<28}")
        sys.stderr.flush()
        return True

    async def partial(self, results: dict[str, Any]) -> None:
        return None


def settings_of(kind: registry.JobKind, options: dict[str, Any]) -> dict[str, Any]:
    """The raw config: a fresh seed, --repeats, every --set KEY=VALUE, and the file settings read from their paths."""
    raw: dict[str, Any] = {"seed": random.SystemRandom().randrange(1, 1 << 30)}
    if options["repeats"] is not None:
        raw["repeats"] = options["repeats"]
    for item in options["set"]:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--set {item}: expected KEY=VALUE")
        raw[key.strip()] = value.strip()
    files = [field for field in kind.fields if field.widget == "jsonl"]
    if options["custom"] is not None:
        if not files:
            raise CommandError(f"--custom: a {kind.name} job reads no file")
        raw[files[0].name] = str(options["custom"])
    for field in files:
        if raw.get(field.name):
            prompts = configs.jsonl_parse(Path(raw.pop(field.name)).read_bytes(), field=field.name)
            raw[field.stores] = [{"prompt": c.prompt, "max_tokens": c.max_tokens} for c in prompts]
    return raw


def run_once(
    kind: registry.JobKind, config: Any, *, base_url: str, reporter: Any | None = None
) -> tuple[dict[str, Any], bool]:
    """One job of ``kind`` against the engine at ``base_url`` (its served model), as this command runs it:
    (results, cancelled). Raises ``vllm_client.EngineUnavailable`` when the engine does not answer."""

    async def measure() -> tuple[dict[str, Any], bool]:
        model = await vllm_client.engine_model(base_url)
        shown = reporter or ProgressBar()
        return await kinds.measure(kind.name, config, base_url=base_url, model=model, reporter=shown)

    return asyncio.run(measure())


class Command(BaseCommand):
    help = (
        "Run a benchmark job against vLLM (a registered job kind: Lab 1 speed ... Lab 6 short). "
        "--set KEY=VALUE takes the job page's settings (e.g. concurrencies=1,2,4)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=[kind.name for kind in registry.runnable_kinds()])
        parser.add_argument("--repeats", type=int, help="requests per cell (default: the kind's own)")
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a job setting")
        parser.add_argument("--custom", type=Path, help="the kind's JSONL workload file (load: with workload=custom)")
        parser.add_argument("--json", type=Path, help="write the results here")
        parser.add_argument("--csv", type=Path, help="write one row per request here")

    def handle(self, *args: Any, **options: Any) -> None:
        kind = registry.get(options["kind"])
        try:
            raw = settings_of(kind, options)
            config = kinds.config_for(kind.name, raw)
        except configs.ConfigError as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from exc
        except OSError as exc:
            raise CommandError(str(exc)) from exc
        base = vllm_client.base_url()
        policy = kind.router_policies(config) if kind.router_policies is not None else None
        behind = kind.router_engines(base) if kind.router_engines is not None else None
        found = asyncio.run(
            provenance.read(base, model=settings.VLLM_MODEL or "", router_policy=policy, router_engines=behind)
        )
        try:
            results, _cancelled = run_once(kind, config, base_url=base)
        except vllm_client.EngineUnavailable as exc:
            raise CommandError(str(exc)) from exc
        sys.stderr.write("\n")
        for cell in results["cells"]:
            self.stdout.write(kind.cell_line(cell) if kind.cell_line else kind.cell_name(cell))
        for line in kind.report_lines(results):
            self.stdout.write(line)
        if options["json"]:
            job = BenchJob(kind=kind.name, config=raw, engine_url=base, results=results, status="done")
            job.provenance = found.as_dict()
            data = exports.job_json(job, model=str(results.get("model", "")))
            options["json"].write_text(json.dumps(data, indent=1, ensure_ascii=False))
        if options["csv"]:
            with options["csv"].open("w", newline="") as out:
                exports.write_csv(out, exports.csv_rows(kind.name, results), provenance=found.as_dict())
