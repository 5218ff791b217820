"""``make load``: start what of the stack is not running (as ``make perf`` does), then ``load_test``.

python -m labapp.ops.loadtest [load_test options]
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

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")


def main(argv: list[str]) -> int:
    django.setup()
    from labapp.ops.management.commands.load_test import Command

    # Its options are read before anything starts: --help, or a mistyped option, answers at once
    # instead of after the engine's minutes of start-up (so marked, Django's parser prints its usage
    # and exits on a bad option instead of raising CommandError).
    command = Command()
    command._called_from_command_line = True  # type: ignore[attr-defined]
    command.create_parser("make", "load").parse_args(argv)
    started = launch.start_missing(
        ("redis", "chroma", "engine", "worker", "web"), Path(settings.DATA_DIR) / "load" / "logs", tag="load"
    )
    try:
        call_command("migrate", verbosity=0)
        call_command("load_chapter", verbosity=0)
        call_command("build_index", wait=120, verbosity=0)
        call_command("load_test", *argv)
    except CommandError as exc:
        print(f"[load] {exc}", file=sys.stderr)
        return 1
    finally:
        for service in reversed(started):
            service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
