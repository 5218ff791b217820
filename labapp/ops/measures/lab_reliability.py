"""How often each lab's default run passes its own checks: a report, not a test.

python manage.py lab_reliability --runs 10 --labs 1,2,3 --browser --engine http://127.0.0.1:8200

Each lab's run button's settings (``labapp.labs.catalog.LABS[n].config`` over the job
kind's defaults, a fresh seed per run, as ``labapp.labs.services.lab_run`` submits them)
run N times through the ``bench`` command's code path; the table gives the runs that
passed every check, the median run time and, per failed check, how often and examples.

``--browser`` keeps a headless Chromium on the lab's chapter page (``--web``, the site
this command's settings point at), reloading it every few seconds as a learner's open
tab does, so that the browser's CPU load is part of the measurement. The lab's own
page needs a signed-in learner; the chapter page is public and draws the same charts
and widgets, so it is the one opened.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import kinds
from bench.kinds.checks import Check, all_passed
from bench.management.commands.bench import run_once
from labapp.labs.catalog import LABS
from labapp.ops.report import save_json
from rag.vllm import client as vllm_client

EXAMPLES = 2  # example messages kept per failed check
RELOAD_S = 3.0  # how often the browser reloads the page


@dataclass(frozen=True)
class RunOutcome:
    """One run of a lab: how long it took, its checks, or the error that stopped it."""

    lab: int
    seconds: float
    checks: tuple[Check, ...] = ()
    error: str = ""
    results: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    load: float | None = None  # the machine's 1-minute load average when the run ended

    @property
    def passed(self) -> bool:
        return not self.error and all_passed(self.checks)


@dataclass
class LabRow:
    """A lab's line of the table: its runs, those that passed, the median run time, and per failed check
    (or "error" for a run that did not finish) how many runs failed it and example messages."""

    lab: int
    runs: int = 0
    passed: int = 0
    seconds: list[float] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def median_load(self) -> float | None:
        return statistics.median(self.loads) if self.loads else None


def tally(outcomes: Sequence[RunOutcome]) -> list[LabRow]:
    """The table's rows, one per lab in the order the labs first appear."""
    rows: dict[int, LabRow] = {}
    for outcome in outcomes:
        row = rows.setdefault(outcome.lab, LabRow(outcome.lab))
        row.runs += 1
        row.passed += outcome.passed
        row.seconds.append(outcome.seconds)
        if outcome.load is not None:
            row.loads.append(outcome.load)
        if outcome.error:
            row.failures.setdefault("error", []).append(outcome.error)
        for check in outcome.checks:
            if check.failed:
                row.failures.setdefault(check.name, []).append(check.message)
    return list(rows.values())


def table_lines(rows: Sequence[LabRow]) -> list[str]:
    """The report: a line per lab, then an indented line per failed check with its count and examples."""
    lines = [f"{'lab':<4} {'runs':>4} {'passed':>6} {'median s':>9} {'load':>5}"]
    for row in rows:
        median = "—" if row.median_s is None else f"{row.median_s:.0f}"
        load = "—" if row.median_load is None else f"{row.median_load:.1f}"
        lines.append(f"{row.lab:<4} {row.runs:>4} {row.passed:>6} {median:>9} {load:>5}")
        for name, messages in sorted(row.failures.items(), key=lambda item: -len(item[1])):
            shown = " | ".join(list(dict.fromkeys(messages))[:EXAMPLES])  # distinct examples, in order
            lines.append(f"     failed {len(messages)}x {name}: {shown}")
    return lines


def lab_config(number: int, seed: int) -> dict[str, Any]:
    """What the lab's run button saves as the job's settings: its config and a seed."""

    return dict(LABS[number].config) | {"seed": seed}


def measure_lab(number: int, *, base_url: str, seed: int) -> RunOutcome:
    """The lab's default run once and its checks (as the lab page shows them)."""

    lab, raw = LABS[number], lab_config(number, seed)
    kind = kinds.get(lab.job_kind)
    started = time.monotonic()
    try:
        results, _cancelled = run_once(kind, kinds.config_for(kind.name, raw), base_url=base_url, reporter=Quiet())
    except Exception as exc:  # a report: a run that broke is counted with its reason, the next one still runs
        return RunOutcome(number, time.monotonic() - started, error=f"{type(exc).__name__}: {exc}", load=_load())
    checks = tuple(lab.checks(results, raw))
    return RunOutcome(number, time.monotonic() - started, checks, results=results, load=_load())


def _load() -> float | None:
    """The 1-minute load average (how busy the machine was: 2 cores, so above 2 something waited)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


class Quiet:
    """A reporter that never stops the job and shows nothing (the table is the output)."""

    async def progress(self, done: int, total: int, cell: str) -> bool:
        return True

    async def partial(self, results: dict[str, Any]) -> None:
        return None


@contextmanager
def browser_on(url: str | None) -> Iterator[None]:
    """A headless Chromium reloading ``url`` every ``RELOAD_S`` seconds in a thread, while the block runs
    (nothing when ``url`` is None)."""
    if url is None:
        yield
        return
    stop, opened, failure = threading.Event(), threading.Event(), []

    def keep_open() -> None:
        # Only --browser needs Playwright (a test tool, with its own event loop): loaded then.
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                chromium = playwright.chromium.launch(
                    executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
                )
                page = chromium.new_page()
                page.goto(url)
                opened.set()
                while not stop.wait(RELOAD_S):
                    page.reload()
                chromium.close()
        except Exception as exc:  # a report: say the browser failed, keep measuring
            failure.append(exc)
            opened.set()

    thread = threading.Thread(target=keep_open, daemon=True)
    thread.start()
    opened.wait(120)
    if failure:
        raise CommandError(f"--browser: could not open {url}: {failure[0]}")
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def save(folder: Path, outcome: RunOutcome, run: int) -> None:
    """The run's results and checks as ``lab<N>-run<K>.json`` (to read why a run failed)."""
    data = {"seconds": outcome.seconds, "error": outcome.error, "load": outcome.load}
    data["checks"] = [c.as_dict() for c in outcome.checks]
    save_json(folder / f"lab{outcome.lab}-run{run + 1}.json", data | {"results": outcome.results})


def rechecked(folder: Path) -> list[RunOutcome]:
    """The runs saved by ``save`` in ``folder``, checked again by the labs' checks as they are now."""

    outcomes = []
    for path in sorted(folder.glob("lab*-run*.json"), key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)]):
        number, data = int(re.findall(r"\d+", path.name)[0]), json.loads(path.read_text())
        checks = () if data["error"] else tuple(LABS[number].checks(data["results"], lab_config(number, 0)))
        outcomes.append(RunOutcome(number, data["seconds"], checks, data["error"], load=data.get("load")))
    return outcomes


class Command(BaseCommand):
    help = "Run each lab's default run N times against vLLM and report how often it passes its checks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=10, help="runs per lab")
        parser.add_argument("--labs", default="", help="lab numbers, comma-separated (default: every lab)")
        parser.add_argument("--browser", action="store_true", help="keep a headless Chromium on the lab's page")
        parser.add_argument("--engine", help="the vLLM server's URL (default: the configured one)")
        parser.add_argument("--web", help="the site the browser opens (default: http://127.0.0.1:WEB_PORT)")
        parser.add_argument("--save", type=Path, help="a folder to write each run's results and checks to (JSON)")
        parser.add_argument(
            "--recheck", type=Path, help="run nothing: the table of the runs saved in this folder, with today's checks"
        )

    def handle(self, *args: Any, **options: Any) -> None:

        if options["recheck"]:
            for line in table_lines(tally(rechecked(options["recheck"]))):
                self.stdout.write(line)
            return

        try:
            numbers = [int(n) for n in options["labs"].split(",") if n.strip()] or list(LABS)
        except ValueError as exc:
            raise CommandError(f"--labs: {exc}") from exc
        unknown = [n for n in numbers if n not in LABS]
        if unknown or options["runs"] < 1:
            raise CommandError(f"--labs: no lab {unknown}" if unknown else "--runs: at least 1")
        base = (options["engine"] or vllm_client.base_url()).rstrip("/").removesuffix("/v1")
        web = (options["web"] or f"http://127.0.0.1:{settings.WEB_PORT}").rstrip("/")
        outcomes: list[RunOutcome] = []
        for number in numbers:
            url = f"{web}/chapter/{LABS[number].slug}/" if options["browser"] else None
            with browser_on(url):
                for run in range(options["runs"]):
                    # A fresh seed per run, as the run button gives: no run profits from another's cached prompts.
                    outcome = measure_lab(number, base_url=base, seed=random.SystemRandom().randrange(1, 1 << 30))
                    outcomes.append(outcome)
                    if options["save"]:
                        save(options["save"], outcome, run)
                    failed = [c.name for c in outcome.checks if c.failed] + ([outcome.error] if outcome.error else [])
                    state = "pass" if outcome.passed else "FAIL " + "; ".join(failed)
                    sys.stderr.write(f"lab {number} run {run + 1}/{options['runs']}: {outcome.seconds:.0f} s {state}\n")
        for line in table_lines(tally(outcomes)):
            self.stdout.write(line)
