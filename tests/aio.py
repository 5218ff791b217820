from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rag.retrieval import RetrievalResult
from rag.vllm import client as vllm_client

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a fresh thread: Playwright's sync API keeps a loop running in this one. The
    loop's shared vLLM clients are closed before it ends."""

    async def closing() -> T:
        try:
            return await coroutine
        finally:
            await vllm_client.close_shared_clients()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, closing()).result()


async def keep_going(done: int, total: int, cell: str) -> bool:
    """A ``ProgressReporter`` callback that never stops the job."""
    return True


def nothing_found(run: object) -> RetrievalResult:
    """A chat search with nothing found: what ``rag.ask.search`` stands in for in tests without
    Chroma or the embedding model."""
    return RetrievalResult(chunks=[])
