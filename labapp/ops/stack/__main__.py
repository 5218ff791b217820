"""Run one embedded component under the Procfile: ``python -m labapp.ops.stack NAME``.

honcho stops every process as soon as one exits, so this wrapper never exits on
its own: when its component cannot start, it says so (naming the component and
the reason) and stays idle, and the rest of the lab keeps running; the status
page shows the component red. A component that dies after it had answered is
started again (``supervise``), a few times at most.  On SIGINT/SIGTERM it stops the
component and every process under it, so Ctrl-C leaves no orphans behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

import django
import psutil

if TYPE_CHECKING:
    from labapp.ops.stack.components import Component

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")

_stop = threading.Event()
# honcho SIGKILLs whatever still runs 5 s after its SIGTERM; finish before that.
STOP_GRACE_S = 4.0


def _say(name: str, message: str) -> None:
    print(f"[{name}] {message}", flush=True)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _stop.set()


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def stop_tree(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the component and every process under it; SIGKILL what outlives ``grace_s``.

    The whole tree is found up front, so helpers that a service spawned (Celery's
    pool, vLLM's engine core) are stopped even if their parent exits first.
    """
    try:
        root = psutil.Process(process.pid)
        family = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=5)
    process.wait()


def web_url() -> str:
    from django.conf import settings

    host = settings.WEB_HOST if settings.WEB_HOST not in ("127.0.0.1", "0.0.0.0", "::", "") else "localhost"
    return f"http://{host}:{settings.WEB_PORT}/"


def idle(name: str) -> int:
    _stop.wait()
    _say(name, "stopped")
    return 0


def _refusal(name: str, component: Component) -> str | None:
    """Why the component cannot be started here (None: it can), after its preparation."""
    from labapp.ops.stack.components import PrepareError

    if component.disabled:
        return f"not started: {component.disabled}"
    if component.external:
        return f"not started here: using the external server at {component.external}"
    if component.port is not None and port_in_use(component.port):
        return (
            f"FAILED to start: port {component.port} on 127.0.0.1 is already in use "
            f"(another {name}? stop it or choose another port)"
        )
    if not os.path.exists(component.command[0]):
        return f"FAILED to start: missing binary {component.command[0]}"
    if component.prepare is not None:
        try:
            component.prepare()
        except PrepareError as exc:
            return f"FAILED to start: {exc}"
    return None


def run(name: str) -> int:
    """Supervise the Procfile line ``name``: one component, or (``GROUPS``: the engines) each of several in
    a thread of its own, each reported by its own name; a dead one does not stop the others."""
    from labapp.ops.stack.components import BUILDERS, GROUPS

    if name in GROUPS:
        group = GROUPS[name]()
    elif name in BUILDERS:
        group = [BUILDERS[name]()]
    else:
        _say(name, f"unknown component; choose from {', '.join(BUILDERS)}")
        return 2
    if len(group) == 1:
        return supervise(group[0])
    # Prepared one after another (the first engine converts the model; the others find it done).
    refusals = {component.name: _refusal(component.name, component) for component in group}
    threads = [
        threading.Thread(target=supervise, args=(c,), kwargs={"refused": refusals[c.name]}, name=c.name, daemon=True)
        for c in group
    ]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=0.5)
    return 0


RESTARTS_MAX = 5  # a component that had answered and died is started again this many times …
RESTART_WINDOW_S = 600.0  # … within this long; more often than that it is left FAILED
UP_WITHOUT_CHECK_S = 10.0  # a component without a ready check counts as having answered once up this long


def supervise(component: Component, refused: str | None = "") -> int:
    """Start one component and watch it until the wrapper is stopped; ``refused`` "" asks ``_refusal`` here.

    One that dies after it had answered (a worker killed by the kernel, a Redis that crashed) is started
    again, as a service manager would, after a pause doubling from a second, at most ``RESTARTS_MAX``
    times in ``RESTART_WINDOW_S``; one that dies before it ever answered stays FAILED (a bad setting
    would only fail again).
    """
    name = component.name
    refused = _refusal(name, component) if refused == "" else refused
    if refused is not None:
        _say(name, refused)
        return idle(name)
    restarts: list[float] = []
    while True:
        ended = _watch(component)
        if ended is None:
            _say(name, "stopped")
            return 0
        code, answered = ended
        if component.one_shot and code == 0:
            return idle(name)  # done, as it should be
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < RESTART_WINDOW_S]
        if component.one_shot or not answered or len(restarts) >= RESTARTS_MAX:
            why = f" ({len(restarts)} restarts in the last {RESTART_WINDOW_S / 60:.0f} min already)" if restarts else ""
            _say(name, f"FAILED: exited with code {code}{why}; see its output above")
            return idle(name)
        restarts.append(now)
        pause = 2.0 ** (len(restarts) - 1)
        _say(name, f"exited with code {code} after it had answered; starting it again in {pause:.0f} s")
        if _stop.wait(pause):
            _say(name, "stopped")
            return 0


def _watch(component: Component) -> tuple[int, bool] | None:
    """Run the component once: None when the wrapper was stopped, else its exit code and whether it had answered."""
    from labapp import starts
    from labapp.ops.stack.components import spawn

    name = component.name
    started = time.monotonic()
    # The component stays in this wrapper's process group: if honcho has to
    # SIGKILL the group, the component goes with it instead of being orphaned.
    # honcho starts each Procfile line in a session of its own: the component's.
    process = spawn(component, own_session=True)
    _say(name, f"started (pid {process.pid})")
    starts.begun(name, process.pid)  # the status page reads "starting", not "down", until it answers
    answered = False
    waited_out = False
    try:
        while not _stop.is_set():
            code = process.poll()
            if component.ready is None and time.monotonic() - started >= UP_WITHOUT_CHECK_S:
                answered = True  # no check to ask: up this long counts as serving
            if code is not None:
                if component.one_shot and code == 0:
                    _say(name, f"finished in {time.monotonic() - started:.1f} s")
                return code, answered
            if not answered and not waited_out and component.ready is not None:
                if component.ready():
                    answered = True
                    starts.answered(name)
                    _say(name, f"ready in {time.monotonic() - started:.1f} s")
                    if name == "web":
                        _say(name, f"open {web_url()}")
                elif time.monotonic() - started > component.ready_timeout_s:
                    _say(name, f"not ready after {component.ready_timeout_s:.0f} s; still waiting")
                    waited_out = True
            _stop.wait(0.5)
    finally:
        if process.poll() is None:
            _say(name, "stopping")
            stop_tree(process, grace_s=STOP_GRACE_S)
        starts.ended(name)
    return None


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m labapp.ops.stack COMPONENT", file=sys.stderr)
        return 2
    name = sys.argv[1]
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        django.setup()
    except Exception as exc:  # a bad environment value: say which, then stop
        _say(name, f"FAILED: configuration error: {exc}")
        return 78
    return run(name)


if __name__ == "__main__":
    sys.exit(main())
