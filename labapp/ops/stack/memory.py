"""Peak memory of a running stack: ``python -m labapp.ops.stack.memory PID [SECONDS]``.

Samples the proportional set size (PSS: shared pages split between the processes
that share them, so nothing is counted twice) of PID and all its descendants
every two seconds, and prints the peak in total and per command. Also the resident
memory of one server and how to find the stack's web server and worker (the load test).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import defaultdict
from typing import Any

import psutil


def _label(process: psutil.Process) -> str:
    try:
        words = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    for marker in ("vllm", "celery", "daphne", "chroma", "redis-server", "labapp.ops.stack", "honcho"):
        if any(marker in word for word in words):
            return "vllm engine" if marker == "vllm" else marker
    return str(process.name())


def sample(root: psutil.Process) -> dict[str, int]:
    usage: dict[str, int] = defaultdict(int)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            usage[_label(process)] += process.memory_full_info().pss
    return dict(usage)


def rss_mib(pid: int) -> float | None:
    """Resident memory of a process and all its descendants, MiB (None when it is gone)."""
    try:
        root = psutil.Process(pid)
        total = 0
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return round(total / 2**20, 1)
    except psutil.NoSuchProcess:
        return None


def _connections(process: psutil.Process) -> list[Any]:
    try:
        return list(process.net_connections(kind="tcp"))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def find_web_pid(port: int) -> int | None:
    """The process listening on the web server's port."""
    for process in psutil.process_iter():
        for conn in _connections(process):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return int(process.pid)
    return None


def find_worker_pid(redis_port: int) -> int | None:
    """The topmost Celery worker process connected to this stack's Redis."""
    found: set[int] = set()
    for process in psutil.process_iter():
        try:
            words = process.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "celery" in " ".join(words) and "worker" in words:
            if any(c.raddr and c.raddr.port == redis_port for c in _connections(process)):
                found.add(int(process.pid))
    for pid in sorted(found):
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).ppid() not in found:
                return pid
    return None


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
