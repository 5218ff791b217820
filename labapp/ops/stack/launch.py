"""Start embedded components as child processes and wait until they answer.

Used by the test harness and by ``make perf``: the same commands and readiness checks
as ``make run`` (labapp.ops.stack.components), each process in its own session, logged
to a file and stopped with everything under it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from labapp.ops.stack.__main__ import port_in_use, stop_tree
from labapp.ops.stack.components import BUILDERS, Component, spawn


class ServiceFailed(RuntimeError):
    pass


@dataclass
class Service:
    component: Component
    process: subprocess.Popen[bytes]
    log_path: Path
    started: float

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, ready: Callable[[], bool] | None = None, timeout: float | None = None) -> float:
        check = ready or self.component.ready
        limit = timeout or self.component.ready_timeout_s
        while True:
            if self.process.poll() is not None:
                raise ServiceFailed(f"{self.component.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if check is None or check():
                return time.monotonic() - self.started
            if time.monotonic() - self.started > limit:
                raise ServiceFailed(f"{self.component.name} not ready after {limit:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process.poll() is None:
            stop_tree(self.process, grace_s=15)

    def kill(self) -> None:
        """SIGKILL the process and everything under it, as a crash would (no chance to clean up).

        The family is found first: helpers that left the process group (vLLM's engine core,
        Celery's pool) go too. Used by the fault tests and the class rehearsal's faults."""
        try:
            family = [psutil.Process(self.process.pid)]
            family += family[0].children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        psutil.wait_procs(family, timeout=15)
        self.process.wait(timeout=15)


def start(name: str, log_dir: Path) -> Service:
    return start_component(BUILDERS[name](), log_dir)


def start_component(component: Component, log_dir: Path, log_name: str | None = None) -> Service:
    """Prepare and start one component, logged to ``log_dir/<log_name or its name>.log`` (several of one
    kind, e.g. two web processes, each need their own name)."""
    name = component.name
    if component.disabled:
        raise ServiceFailed(f"{name}: not started: {component.disabled}")
    if component.port is not None and port_in_use(component.port):
        raise ServiceFailed(f"{name}: port {component.port} is already in use")
    if component.prepare is not None:
        component.prepare()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{log_name or name}.log"
    log = log_path.open("ab")
    process = spawn(component, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return Service(component, process, log_path, time.monotonic())


def start_missing(names: tuple[str, ...], log_dir: Path, *, tag: str) -> list[Service]:
    """Start each named component that is neither external nor already answering; wait until all are ready.

    For commands run beside a ``make run`` that may or may not be up (``make perf``,
    ``make load``): what is running is reused, what was started is returned, for the
    caller to stop.
    """
    started: list[Service] = []
    try:
        for name in names:
            component = BUILDERS[name]()
            if component.disabled:
                continue
            if component.external or (component.ready is not None and component.ready()):
                print(f"[{tag}] {name}: already running", flush=True)
                continue
            print(f"[{tag}] starting {name}", flush=True)
            started.append(start(name, log_dir))
        for service in started:
            print(f"[{tag}] {service.component.name} ready in {service.wait_ready():.0f} s", flush=True)
    except BaseException:
        for service in reversed(started):
            service.stop()
        raise
    return started
