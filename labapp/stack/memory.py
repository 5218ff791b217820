"""Peak memory of a running stack: ``python -m labapp.stack.memory PID [SECONDS]``.

Samples the proportional set size (PSS: shared pages split between the processes
that share them, so nothing is counted twice) of PID and all its descendants
every two seconds, and prints the peak in total and per command.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import defaultdict

import psutil


def _label(process: psutil.Process) -> str:
    try:
        words = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    for marker in ("vllm", "celery", "daphne", "chroma", "redis-server", "labapp.stack", "honcho"):
        if any(marker in word for word in words):
            return "vllm engine" if marker == "vllm" else marker
    return str(process.name())


def sample(root: psutil.Process) -> dict[str, int]:
    usage: dict[str, int] = defaultdict(int)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            usage[_label(process)] += process.memory_full_info().pss
    return dict(usage)


def main() -> int:
    root = psutil.Process(int(sys.argv[1]))
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    peak_total, peak_parts = 0, {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and root.is_running():
        parts = sample(root)
        if sum(parts.values()) > peak_total:
            peak_total, peak_parts = sum(parts.values()), parts
        time.sleep(2.0)
    print(f"peak PSS of the whole stack: {peak_total / 2**30:.2f} GiB")
    for name, size in sorted(peak_parts.items(), key=lambda item: -item[1]):
        print(f"  {name:<14} {size / 2**20:8.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
