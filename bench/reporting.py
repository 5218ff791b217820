"""What a measuring job kind is given to report through: the job run implements it.

A kind calls ``progress`` after every request (and before each cell) and stops when it
returns False (cancelled, timed out or lost); ``partial`` hands over the cells
finished so far, so a page can draw them while the job runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Reporter(Protocol):
    async def progress(self, done: int, total: int, cell: str) -> bool:
        """Requests done of total, the cell being measured; False: stop after this request."""
        ...

    async def partial(self, results: dict[str, Any]) -> None:
        """The results measured so far (``{"cells": [...], "partial": True}``)."""
        ...


class ProgressReporter:
    """Progress through a function (a progress bar, a test's script); partial results are not kept."""

    def __init__(self, progress: Callable[[int, int, str], Awaitable[bool]]) -> None:
        self._progress = progress

    async def progress(self, done: int, total: int, cell: str) -> bool:
        return await self._progress(done, total, cell)

    async def partial(self, results: dict[str, Any]) -> None:
        return None
