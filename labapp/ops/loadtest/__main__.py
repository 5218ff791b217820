"""``make load``: start what of the stack is not running (as ``make perf`` does), then ``load_test``.

python -m labapp.ops.loadtest [load_test options]

With ``--web-processes N`` (N > 1) it also starts N - 1 more web processes beside WEB_PORT's and
Debian's nginx in front of them all (the class rehearsal's own, ``labapp.ops.rehearsal.cluster``), and
the load goes through nginx: the class server's layout, its memory read for every web process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from labapp.ops.stack import launch
from labapp.ops.stack.launch import Service
from labapp.ops.stack.memory import find_web_pid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")


def main(argv: list[str]) -> int:
    django.setup()
    from labapp.ops.management.commands.load_test import Command

    # Its options are read before anything starts: --help, or a mistyped option, answers at once
    # instead of after the engine's minutes of start-up (so marked, Django's parser prints its usage
    # and exits on a bad option instead of raising CommandError).
    command = Command()
    command._called_from_command_line = True  # type: ignore[attr-defined]
    options = command.create_parser("make", "load").parse_args(argv)
    logs = Path(settings.DATA_DIR) / "load" / "logs"
    started = launch.start_missing(("redis", "chroma", "engine", "worker", "web"), logs, tag="load")
    try:
        call_command("migrate", verbosity=0)
        call_command("load_chapter", verbosity=0)
        call_command("build_index", wait=120, verbosity=0)
        if options.web_processes > 1:
            argv = [*argv, *front_start(options.web_processes, logs, started)]
        call_command("load_test", *argv)
    except CommandError as exc:
        print(f"[load] {exc}", file=sys.stderr)
        return 1
    finally:
        for service in reversed(started):
            service.stop()
    return 0


def front_start(count: int, logs: Path, started: list[Service]) -> list[str]:
    """``count - 1`` web processes more beside WEB_PORT's and nginx in front of all, each added to
    ``started`` once ready; ``load_test``'s arguments for them (the front's address, each web's pid)."""
    from labapp.ops.rehearsal import cluster

    ports = [int(settings.WEB_PORT)] + [cluster.free_port() for _ in range(count - 1)]
    for n, port in enumerate(ports[1:], start=2):
        started.append(launch.start_component(cluster.web(f"web-{n}", port), logs))
        print(f"[load] web-{n} on port {port} ready in {started[-1].wait_ready():.0f} s", flush=True)
    front = cluster.free_port()
    started.append(launch.start_component(cluster.nginx(front, ports, logs / "nginx"), logs))
    print(f"[load] nginx on port {front} in front of {len(ports)} web processes", flush=True)
    started[-1].wait_ready()
    pids = [find_web_pid(port) for port in ports]
    return ["--web", f"http://127.0.0.1:{front}", *(f"--web-pid={pid}" for pid in pids if pid)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
