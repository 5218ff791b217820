"""The registry of job kinds (work in progress: the entry points the rest of the code uses).

``config_for(kind, raw)`` reads a kind's settings; ``measure(kind, config, ...)`` runs it,
reporting through a ``bench.reporting.Reporter``.
"""

from __future__ import annotations

from typing import Any

from bench import jobs
from bench.reporting import Reporter


def config_for(kind: str, raw: dict[str, Any], *, max_model_len: int | None = None) -> Any:
    return jobs.config_for(kind, raw, max_model_len=max_model_len)


async def measure(
    kind: str, config: Any, *, base_url: str, model: str, reporter: Reporter
) -> tuple[dict[str, Any], bool]:
    """Run a job of ``kind``: its results (with the kind's fits or summary, and the model) and whether it was cancelled."""
    token = jobs.PARTIAL.set(reporter.partial)
    try:
        return await jobs.job_measure(config, base_url=base_url, model=model, progress=reporter.progress)
    finally:
        jobs.PARTIAL.reset(token)
