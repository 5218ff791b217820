"""The engine rows of the status page: each engine's role, pool, the jobs waiting in its queue and
whether it is measuring now, read per request (the probes' results are cached; these are the database's)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labapp.status.probes import ComponentStatus


def with_roles(components: list[ComponentStatus]) -> list[ComponentStatus]:
    """``components`` with each engine row's ``role``: role and its words, pool, ``queue`` (waiting jobs of
    the queue it measures for; None for a chat-only engine, which takes none) and ``measuring``."""
    if not any(c.engine for c in components):
        return components
    from bench import engines, pools
    from bench.models import BenchJob

    by_number = {choice.number: choice for choice in engines.configured()}
    measuring = pools.measuring_urls()
    waiting: dict[tuple[str, str], int] = {}
    shown = []
    for component in components:
        choice = by_number.get(component.engine)
        if choice is None:
            shown.append(component)
            continue
        queue = pools.queue_of(choice.url)
        if choice.measures and queue not in waiting:
            pool, hardware = queue
            waiting[queue] = BenchJob.objects.filter(
                status=BenchJob.Status.QUEUED, pool=pool, hardware=hardware
            ).count()
        role: dict[str, Any] = {
            "role": choice.role,
            "words": choice.role_label,
            "pool": choice.pool,
            "queue": waiting[queue] if choice.measures else None,
            "measuring": choice.url.rstrip("/") in measuring,
        }
        shown.append(replace(component, role=role))
    return shown
