from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from rag.retrieval import RetrievalResult

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a fresh thread: Playwright's sync API keeps a loop running in this one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def found_nothing() -> Future[RetrievalResult]:
    """A chat search already over with nothing found: what ``rag.chat.retrieval_submit`` returns in
    tests without Chroma or the embedding model."""
    searching: Future[RetrievalResult] = Future()
    searching.set_result(RetrievalResult(chunks=[]))
    return searching
