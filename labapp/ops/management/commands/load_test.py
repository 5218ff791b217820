"""``python manage.py load_test``: chat websockets, browsing users and a benchmark job against a running lab.

The web server must share this process's database (labapp/ops/loadtest/). Full size by
default (the issue's numbers); ``--reduced`` is the size CI runs. Prints a table (or,
with ``--json``, the whole report) and fails when a check fails.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from labapp.ops import loadtest
from labapp.ops.report import emit


class Command(BaseCommand):
    help = "Load test of a running lab: many chat websockets, browsing users and a benchmark job at once."

    def add_arguments(self, parser: CommandParser) -> None:
        full = loadtest.FULL
        parser.add_argument("--web", default="", help="the lab's web server (default: http://127.0.0.1:WEB_PORT)")
        parser.add_argument("--reduced", action="store_true", help="the size CI runs (12 sockets, 6 browsers)")
        parser.add_argument("--sockets", type=int, help=f"chat websockets (default {full.sockets})")
        parser.add_argument("--tab-pairs", type=int, help=f"users with two sockets (default {full.tab_pairs})")
        parser.add_argument("--browsers", type=int, help=f"users fetching pages (default {full.browsers})")
        parser.add_argument("--rounds", type=int, help=f"rounds, at least 2 (default {full.rounds})")
        parser.add_argument("--asks", type=int, help=f"questions per socket per round (default {full.asks})")
        parser.add_argument("--max-tokens", type=int, help=f"per answer (default {full.max_tokens})")
        parser.add_argument("--top-k", type=int, help=f"chunks retrieved per question (default {full.top_k})")
        parser.add_argument("--think", type=float, dest="think_s", help="seconds between a browser's pages")
        parser.add_argument("--duration", type=float, dest="round_limit_s", help="seconds a round may take at most")
        parser.add_argument("--rss-bound", type=float, dest="rss_bound_mib", help="MiB the last round may add")
        parser.add_argument(
            "--job", action=argparse.BooleanOptionalAction, default=None, help="submit a benchmark job (default)"
        )
        parser.add_argument(
            "--first-question-chunks",
            type=int,
            help=f"a new process's first question at this many chunks, during the last round; 0: none "
            f"(default {full.first_question_chunks})",
        )
        parser.add_argument(
            "--web-pid",
            type=int,
            action="append",
            dest="web_pids",
            help="a web process's pid, once per process (default: the one listening on --web's port)",
        )
        parser.add_argument(
            "--web-processes",
            type=int,
            default=1,
            help="make load only: start this many web processes (WEB_PORT's and more) behind nginx, load through it",
        )
        parser.add_argument("--worker-pid", type=int, help="the Celery worker's pid (default: found by its Redis)")
        parser.add_argument("--keep", action="store_true", help="keep the run's users, class and answers")
        parser.add_argument("--json", action="store_true", help="print the whole report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        base = loadtest.REDUCED if options["reduced"] else loadtest.FULL
        fields = {f.name for f in dataclasses.fields(loadtest.LoadPlan)}
        chosen = {k: v for k, v in options.items() if k in fields and v is not None}
        plan = dataclasses.replace(base, **chosen)
        try:
            plan.check()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if options["web_processes"] > 1 and not options["web"]:
            raise CommandError(
                "--web-processes starts processes: run it with make load (python -m labapp.ops.loadtest); "
                "against web processes already behind a proxy, give --web its address and --web-pid each pid"
            )
        web = options["web"] or f"http://127.0.0.1:{settings.WEB_PORT}"
        say = (lambda _text: None) if options["json"] else (lambda text: self.stdout.write(text))
        report = loadtest.load_run(
            web,
            plan,
            web_pids=options["web_pids"],
            worker_pid=options["worker_pid"],
            keep=options["keep"],
            say=say,
        )
        emit(self.stdout, report, json_wanted=options["json"], lines=lambda: [loadtest.table(report)])
        problems = loadtest.failures(report)
        if problems:
            raise CommandError("load test failed:\n  " + "\n  ".join(problems))
