"""The embedded engines' layout: how many `make run` starts, each one's port, cores and role.

The one place that knows it. ``labapp.settings`` builds it once to resolve ``LAB_ROUTER`` and
``LAB_ROUTER_ENGINES``; the stack (``components``: one engine component each, the worker's
slots, the router), the engines list (``bench.engines.choices``) and the status page read
``current()``, built from the settings again, so that a test's ``override_settings`` reaches all.

The rules (docs/operations.md, "Scaling out"):

- ``LAB_ENGINES`` engines (``auto``: one per ``CORES_PER_ENGINE`` cores and per
  ``GIB_PER_ENGINE`` of memory, at least one). Each gets the reference machine's two cores, so
  its figures compare with the docs' and with each other's, and the memory one engine was
  measured to take (docs/performance.md: 7.6 GiB peak, its 2 GiB KV cache included).
- Consecutive ports from ``VLLM_PORT``; the cores ``VLLM_CPU_THREADS`` names (every core by
  default) split into equal consecutive runs, one per engine (the rest of a split: unbound,
  left to the web server and the worker).
- Roles: one engine measures and chats (the laptop, as before pools). With two or more, the
  last ``LAB_CHAT_ENGINES`` (``auto``: one) only chat and the others only measure, so a lab run
  is never disturbed by the chat; ``LAB_CHAT_ENGINES=0`` lets every engine do both.
- The Celery worker has one slot per measuring engine plus one for the default queue
  (documents, and waiting jobs' short turns): the engine lock keeps one job per engine.
- ``LAB_ROUTER=auto`` puts vllm-router in front of the chat pool when there is one (its health
  checks, retries and metrics, and chat engines added later need nothing else).

An external engine (``VLLM_BASE_URL``) is one engine that measures and chats; ``LAB_ENGINES``
is about the embedded ones.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

# bench.models.Engine.Role's values (tests/ops/test_layout.py checks they agree); no Django here:
# the settings module builds a layout before the apps load.
MEASURE, CHAT, BOTH = "measure", "chat", "both"
CORES_PER_ENGINE = 2  # the reference machine's cores: an engine's figures compare with the docs'
GIB_PER_ENGINE = 8  # one engine's measured peak, 7.6 GiB (docs/performance.md), rounded up
AUTO = "auto"


class LayoutError(ValueError):
    """A combination of settings that makes no layout (the message names the variables)."""


@dataclass(frozen=True)
class EngineSpec:
    """One engine of the layout: ``number`` from 1 (the configured engine, VLLM_BASE_URL), its base URL,
    role, and the cores its OpenMP threads are bound to (None: vLLM's own choice, or not a CPU engine here)."""

    number: int
    url: str
    role: str
    cores: str | None = None
    embedded: bool = True

    @property
    def name(self) -> str:
        """The supervisor's name for it (its output's prefix, its start record, the status page's row)."""
        return "engine" if self.number == 1 else f"engine-{self.number}"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def measures(self) -> bool:
        return self.role in (MEASURE, BOTH)

    @property
    def chats(self) -> bool:
        return self.role in (CHAT, BOTH)


@dataclass(frozen=True)
class Layout:
    engines: tuple[EngineSpec, ...]

    @property
    def embedded(self) -> tuple[EngineSpec, ...]:
        """The engines `make run` starts."""
        return tuple(e for e in self.engines if e.embedded)

    @property
    def measuring(self) -> tuple[EngineSpec, ...]:
        return tuple(e for e in self.engines if e.measures)

    @property
    def chat_pool(self) -> tuple[EngineSpec, ...]:
        """The engines that only chat (none with one engine, or with LAB_CHAT_ENGINES=0)."""
        return tuple(e for e in self.engines if e.role == CHAT)

    @property
    def worker_slots(self) -> int:
        """The Celery worker's concurrency: a slot per measuring engine and one for the default queue."""
        return len(self.measuring) + 1

    @property
    def router_engines(self) -> list[str]:
        """What vllm-router spreads the chat over unless LAB_ROUTER_ENGINES says: the chat pool, else the
        configured engine."""
        return [e.url for e in self.chat_pool] or [self.engines[0].url]

    @property
    def wants_router(self) -> bool:
        """Whether LAB_ROUTER=auto means on: there is a chat pool."""
        return bool(self.chat_pool)

    def by_url(self, url: str) -> EngineSpec | None:
        bare = url.rstrip("/")
        return next((e for e in self.engines if e.url == bare), None)


def memory_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float(GIB_PER_ENGINE)


def default_count(cpu_count: int, gib: float) -> int:
    """``LAB_ENGINES=auto``: one engine per CORES_PER_ENGINE cores and per GIB_PER_ENGINE GiB, at least one."""
    return max(1, min(cpu_count // CORES_PER_ENGINE, int(gib // GIB_PER_ENGINE)))


def default_chat(count: int) -> int:
    """``LAB_CHAT_ENGINES=auto``: one chat engine once there are two (continuous batching serves a
    class's chat on one; the runs, one at a time per engine, are what queues)."""
    return 1 if count >= 2 else 0


def bound_cores(threads: str, cpu_count: int) -> list[int] | None:
    """The cores VLLM_CPU_THREADS names (``all``, a count, or a list such as ``0-3,6``); None for ``auto``."""
    choice = (threads or "all").strip()
    if choice == AUTO:
        return None
    if choice == "all":
        return list(range(max(1, cpu_count)))
    if choice.isdigit():
        return list(range(max(1, int(choice))))
    cores: list[int] = []
    try:
        for part in choice.split(","):
            low, _, high = part.strip().partition("-")
            cores += range(int(low), int(high or low) + 1)
    except ValueError:
        raise LayoutError(f"VLLM_CPU_THREADS={threads!r}: use all, auto, a count or a core list such as 0-3") from None
    return cores


def _spelled(cores: list[int]) -> str:
    """A run of cores as OpenMP's bind list reads it: ``0-1``, ``2``."""
    return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"


def split(cores: list[int] | None, count: int) -> list[str | None]:
    """Each engine's own cores: equal consecutive runs of ``cores`` (the remainder left unbound)."""
    if cores is None:
        return [None] * count
    if len(cores) < count:
        raise LayoutError(
            f"LAB_ENGINES={count} needs a core per engine at least, and VLLM_CPU_THREADS gives {len(cores)}"
        )
    each = len(cores) // count
    runs = [cores[i * each : (i + 1) * each] for i in range(count)]
    return [_spelled(run) if run == list(range(run[0], run[-1] + 1)) else ",".join(map(str, run)) for run in runs]


def build(
    *,
    first_url: str,
    embedded: bool,
    count: int,
    chat: int,
    threads: str = "all",
    cpu_count: int | None = None,
) -> Layout:
    """The layout for these settings; LayoutError names what does not fit."""
    if not embedded:
        return Layout((EngineSpec(1, first_url.rstrip("/"), BOTH, None, embedded=False),))
    if count < 1:
        raise LayoutError(f"LAB_ENGINES={count}: at least one engine")
    if count > 1 and chat >= count:
        raise LayoutError(f"LAB_CHAT_ENGINES={chat} leaves none of LAB_ENGINES={count} to measure")
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    cores = split(bound_cores(threads, cpus), count)
    host, port = first_url.rstrip("/").rsplit(":", 1)
    engines = []
    for number in range(1, count + 1):
        if count == 1 or chat == 0:
            role = BOTH
        else:
            role = CHAT if number > count - chat else MEASURE
        engines.append(EngineSpec(number, f"{host}:{int(port) + number - 1}", role, cores[number - 1]))
    return Layout(tuple(engines))


def machine_count() -> int:
    """``LAB_ENGINES=auto`` on this machine."""
    return default_count(os.cpu_count() or 1, memory_gib())


def current() -> Layout:
    """The layout of the running settings."""
    from django.conf import settings

    return build(
        first_url=settings.VLLM_BASE_URL,
        embedded=settings.VLLM_EMBEDDED,
        count=settings.LAB_ENGINES,
        chat=settings.LAB_CHAT_ENGINES,
        threads=settings.VLLM_CPU_THREADS,
    )


def main(argv: list[str]) -> int:
    """``python -m labapp.engine_layout``: the layout `make run` would start, one engine a line;
    ``router-needed``: exit 0 when the embedded router is part of it (the Makefile installs it then)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")
    import django

    django.setup()
    from django.conf import settings

    if argv[1:] == ["router-needed"]:
        return 0 if settings.LAB_ROUTER and settings.ROUTER_EMBEDDED else 1
    for spec in current().engines:
        print(f"== {spec.name}: {spec.url}, role {spec.role}, cores {spec.cores or 'unbound'}")
    router = f"on, in front of {', '.join(settings.LAB_ROUTER_ENGINES)}" if settings.LAB_ROUTER else "off"
    print(f"== worker slots: {current().worker_slots}; router: {router}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
