"""When each embedded component was last started and how long its earlier starts took to answer.

The stack supervisor (``labapp.ops.stack``, behind ``make run``) is the one that starts the
components, so it writes these records: ``begun`` when it launches one, ``answered`` when its
readiness check first passes (the seconds it took are kept, the last ``KEPT``), ``ended`` when
it stops or dies. The status page reads them, so an engine warming up reads "starting, about N
seconds left" instead of "down". One small JSON file per component under
``DATA_DIR/starts/``: the web server and the supervisor are separate processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from django.conf import settings

KEPT = 5  # earlier starts the expected start-up time is the median of
# With no start recorded yet: the float32 CPU engine answered after about 150 s on 2 cores
# (AMD EPYC, AVX2 only, `make run`, 2026-12-04, issue 27); the other components within seconds.
DEFAULT_START_S = {"engine": 150.0}
OTHER_DEFAULT_S = 30.0
# A start this many times longer than expected is no longer called "starting": the component is stuck.
GIVE_UP_AFTER = 4


@dataclass(frozen=True)
class Start:
    """A component's latest start: ``pid`` of the process started (0: it has ended), when (wall clock),
    when it first answered (None: not yet), and earlier starts' seconds to answer, oldest first."""

    name: str
    pid: int = 0
    started_at: float = 0.0
    answered_at: float | None = None
    durations: list[float] = field(default_factory=list)

    @property
    def expected_s(self) -> float:
        """Seconds a start takes: the median of the recorded starts, else the stated default."""
        if self.durations:
            return float(statistics.median(self.durations))
        return DEFAULT_START_S.get(self.name.split("-", 1)[0], OTHER_DEFAULT_S)  # engine-2: an engine

    @property
    def measured(self) -> bool:
        """Whether ``expected_s`` comes from recorded starts (not the default)."""
        return bool(self.durations)

    def starting(self) -> bool:
        """Started, not answered yet, its process still alive, and not stuck (``GIVE_UP_AFTER``)."""
        if self.pid <= 0 or self.answered_at is not None:
            return False
        return time.time() - self.started_at < GIVE_UP_AFTER * self.expected_s and _alive(self.pid)

    def ends_at(self) -> float:
        """When (wall clock) the start is expected to be over."""
        return self.started_at + self.expected_s


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process under that id: alive
        return True
    return True


def _path(name: str) -> Path:
    return Path(settings.DATA_DIR) / "starts" / f"{name}.json"


def read(name: str) -> Start | None:
    """The component's record (None: never started by the supervisor, or unreadable)."""
    try:
        data = json.loads(_path(name).read_text())
        return Start(
            name=name,
            pid=int(data.get("pid") or 0),
            started_at=float(data.get("started_at") or 0.0),
            answered_at=None if data.get("answered_at") is None else float(data["answered_at"]),
            durations=[float(d) for d in data.get("durations") or []][-KEPT:],
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _write(start: Start) -> None:
    path = _path(start.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(asdict(start)))
    os.replace(partial, path)  # a reader never sees half a file


def begun(name: str, pid: int) -> None:
    """The supervisor launched ``name`` as process ``pid`` just now."""
    earlier = read(name) or Start(name)
    _write(replace(earlier, pid=pid, started_at=time.time(), answered_at=None))


def answered(name: str) -> None:
    """``name``'s readiness check passed for the first time since its start: keep how long it took."""
    start = read(name)
    if start is None or start.answered_at is not None:
        return
    now = time.time()
    _write(replace(start, answered_at=now, durations=[*start.durations, now - start.started_at][-KEPT:]))


def ended(name: str) -> None:
    """``name``'s process is gone (stopped or died)."""
    start = read(name)
    if start is not None:
        with contextlib.suppress(OSError):
            _write(replace(start, pid=0))
