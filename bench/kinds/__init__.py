"""Job kinds: one module each (``speed``, ``sweep``, ``load``, ``retrieval``, ``prefix``, ``short``,
``router_policy``; ``imported``, another tool's run read from its file and never run), in a registry.

Importing this package registers the built-in kinds (``bench.kinds.registry`` has the
registry and what a kind declares). ``config_for(kind, raw)`` reads a kind's settings;
``measure(kind, config, ...)`` runs it, reporting through a ``bench.reporting.Reporter``.
"""

from __future__ import annotations

from typing import Any

from bench.kinds import imported, load, prefix, registry, retrieval, router_policy, short, speed, sweep
from bench.kinds.registry import JobKind, all_kinds, find, get
from bench.reporting import Reporter

BUILT_IN = (
    speed.KIND,
    sweep.KIND,
    load.KIND,
    retrieval.KIND,
    prefix.KIND,
    short.KIND,
    router_policy.KIND,
    imported.KIND,
)

__all__ = ["BUILT_IN", "JobKind", "all_kinds", "config_for", "find", "get", "measure", "registry"]


def config_for(kind: str, raw: dict[str, Any], *, max_model_len: int | None = None) -> Any:
    """The typed configuration of a job of ``kind`` from its form or saved settings.

    Raises ``configs.ConfigError`` naming the field of the first bad value (the
    "kind" field for an unknown kind or one that is never run), including a request longer than the engine's
    ``max_model_len`` when that is given.
    """
    job_kind = registry.get_runnable(kind)
    config = job_kind.config(raw)
    if max_model_len:
        job_kind.checked_length(config, max_model_len)
    return config


async def measure(
    kind: str, config: Any, *, base_url: str, model: str, reporter: Reporter
) -> tuple[dict[str, Any], bool]:
    """Run a job of ``kind``: its results (the kind's cells, fits or summary, and the model) and whether it was
    cancelled."""
    results, cancelled = await get(kind).measure(config, base_url=base_url, model=model, reporter=reporter)
    return results | {"model": model}, cancelled
