"""An answer's row kept current while it streams, so that a web process killed mid-answer leaves what
it had streamed.

The answer's text is otherwise written once, when the answer ends (``conversations.answer_finish``), by
the process that streamed it. A process killed mid-answer (a crash, an out-of-memory kill, the class
rehearsal's web fault) never gets there: its row would stay "streaming" with no text. So while an answer
streams, its ``Keeper`` writes the row as far as it has come (``AnswerRun.row_fields``: the text so far,
the prompt, the sources and the timings measured yet; the first token at once, then at most every
``TEXT_GAP_S``; each write sends only the fields changed since the last, so the prompt and sources once)
and the liveness stamp ``beat_at`` (at least every ``BEAT_S``, tokens or not: vLLM may
still be reading a long prompt). A row whose stamp is older than ``ORPHAN_S`` lost its process;
``conversations.answers_orphaned_stop`` saves it stopped with the text it has and a notice saying why.

At most the last ``TEXT_GAP_S`` of tokens before a kill are shown on the learner's page and missing
from the row. The writes go through the thread Channels keeps for the ORM, as every other write of the
chat does: one small UPDATE (the text and timings) at most every ``TEXT_GAP_S`` per answer streaming.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from rag.models import Answer

log = logging.getLogger(__name__)

TEXT_GAP_S = 0.5  # new text waits at most this long after the last write
BEAT_S = 2.0  # the stamp is written at least this often while the answer streams
ORPHAN_S = 10.0  # a "streaming" row whose stamp is this old lost its process (5 stamps missed)
_UNSET = object()  # a field the keeper has not written yet


def _write(answer_id: int, fields: dict[str, Any]) -> int:
    """The row so far and a new stamp; a row already finished (or saved stopped) is left as it is."""
    return Answer.objects.filter(pk=answer_id, status=Answer.Status.STREAMING).update(**fields, beat_at=timezone.now())


class Keeper:
    """Keeps one answer's row current from ``start`` until ``stop`` (awaited before the answer is
    finished, so that no write of the keeper lands after the final one). ``nudge`` after new text.
    ``row`` gives the fields to write, read when each write starts (``AnswerRun.row_fields``)."""

    def __init__(self, answer_id: int, row: Callable[[], dict[str, Any]]) -> None:
        self.answer_id, self.row = answer_id, row
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.writing: asyncio.Future[int] | None = None
        self.stopping = False
        self.writes = 0
        self.written: dict[str, Any] = {}  # each field as last written: a write sends only what changed since

    def start(self) -> None:
        """Keep the row from now on, starting with the text streamed before it was made."""
        self.changed.set()
        self.task = asyncio.create_task(self._keep())

    def nudge(self) -> None:
        self.changed.set()

    async def stop(self) -> None:
        """No more writes: the keeper stops at once, and a write already under way is waited for."""
        self.stopping = True
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        if self.writing is not None:
            with contextlib.suppress(Exception):
                await self.writing

    async def _keep(self) -> None:
        while not self.stopping:
            # Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancel that comes as the event is
            # set (the keeper wrote on for 15 s after its answer ended, tests/rag/test_chat.py).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(BEAT_S):
                    await self.changed.wait()
            if self.stopping:
                return
            self.changed.clear()
            began, fields = time.monotonic(), self.row()
            changed = {name: value for name, value in fields.items() if self.written.get(name, _UNSET) != value}
            self.writing = asyncio.ensure_future(database_sync_to_async(_write)(self.answer_id, changed))
            try:
                if not await asyncio.shield(self.writing):
                    return  # the row is no longer streaming (finished, or saved stopped): nothing to keep
                self.writes += 1
                self.written.update(copy.deepcopy(changed))  # a copy: the run changes its sources in place
            except asyncio.CancelledError:
                raise
            except Exception:  # the database down: the answer goes on streaming; the next tick tries again
                log.warning("answer %s: its text so far could not be written", self.answer_id, exc_info=True)
            if fields.get("text"):  # a stamp alone (no text yet) holds back no first token
                await asyncio.sleep(max(0.0, TEXT_GAP_S - (time.monotonic() - began)))
