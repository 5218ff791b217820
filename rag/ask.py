"""One question asked on the chat socket, as one object: check -> search -> ask vLLM -> save -> stream,
then finish, stop or fail.

The consumer (rag/consumers.py) only translates frames to calls on an ``Ask``: ``check`` the ask
frame, start its ``answer``, ``save`` it (the "started" frame), ``stop`` it. The work of each step
(retrieval's outcome, the prompt, the stream, the timings) is in ``rag.chat``; the order of the
steps, and the speed-ups that depend on it, are here:

- The check runs on a search thread and the search follows it there, with no hop in between.
- vLLM is asked as soon as the search is in and the prompt built; the answer's row is written only
  then (``AnswerRun.asked``): written beside the search, its thread held the GIL when the search
  ended and the event loop waited for it (1-2 ms of the chat's own steps under `make perf`).
- The answer's frames are held until "started" (which carries the row's id) is out.
- The engine the learner picked is read beside the search, on a thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import close_old_connections
from django.utils import translation
from django.utils.translation import gettext as _

from labapp import request_numbers, said, sockets
from rag import access, admission, chat, conversations, keeper, prompting, retrieval
from rag.models import Answer

log = logging.getLogger(__name__)
Frame = dict[str, Any]
# Where an answer's engine and the learner's speeds for its estimate come from: the project's routing
# (labapp.asgi) passes bench's (the engines page's pick, Lab 1 runs), which rag, below bench, does not import.
# The learner's speeds on an engine (its base URL), from their Lab 1 runs there; None: none yet.
SpeedsOf = Callable[[AbstractBaseUser, str], chat.Speeds | None]
# The engine the learner picked (from their session's key; None: no session): the chat answers there.
EngineOf = Callable[[str | None], chat.Engine]
FIELDS = {"type", "id", "question", "settings", "conversation", "parent"}


def no_speeds(user: AbstractBaseUser, engine_url: str) -> chat.Speeds | None:
    return None


def configured_engine(session_key: str | None) -> chat.Engine:
    return chat.Engine()


def session_of(user: AbstractBaseUser) -> str:
    """The learner's routing session, sent as X-Session-ID with each answer: vllm-router's consistent_hash
    keeps one learner's answers on one engine of its pool (whose prefix cache holds their earlier
    prompts) while that engine is healthy. The learner's, not the conversation's: a new conversation
    has no id yet when its first question is sent (its row is written while vLLM reads the prompt), and
    a prompt carries no earlier turns, so a conversation shares no more of the cache with itself than
    with its learner's other questions."""
    return f"learner-{user.pk}"


class Refused(Exception):
    """What is wrong with an ask, in the learner's words; nothing of it is saved or streamed.
    ``place``: refused by the chat's admission (``rag.admission``): why, and when to ask again."""

    def __init__(self, message: str, place: admission.Place | None = None) -> None:
        super().__init__(message)
        self.place = place


# Where questions are searched: not the one thread Channels keeps for the ORM, so a search never waits
# behind page renders and other answers' database work, nor they behind it. Two at a time: under
# `make load` (50 sockets, 30 browsers) eight threads fighting the event loop for the GIL made page
# latency p50/p95 777/3489 ms, two make it 267/2048 ms.
_search_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chat-retrieval")
Searching = concurrent.futures.Future[retrieval.RetrievalResult | None]  # None: the ask failed its check


def search(run: chat.AnswerRun) -> retrieval.RetrievalResult:
    """Search for ``run``'s question, on a search thread (it blocks)."""
    s = run.settings
    try:
        return retrieval.retrieve(
            run.question,
            collection=run.collection.name,
            chunk_size=s.chunk_size,
            top_k=s.top_k,
            language=run.language if run.collection.by_language else None,
            min_relevance=s.threshold,
        )
    finally:
        close_old_connections()  # what Channels does around its own database calls
        run.mark("searched")  # in the search's thread: "retrieved" is when the answer task has it


def _check_then_search(
    check: Callable[[], chat.AnswerRun],
) -> tuple[concurrent.futures.Future[chat.AnswerRun], Searching]:
    """``check`` on a search thread and, if it passes, the search right there: no hop to another
    thread between the two. ``check`` reads the database (Django's connection of that thread) and
    returns the run, or raises what is wrong with the ask; the first future says which as soon as it
    is known, the second has the search (None for no chunks)."""
    checked: concurrent.futures.Future[chat.AnswerRun] = concurrent.futures.Future()

    def check_then_search() -> retrieval.RetrievalResult | None:
        close_old_connections()  # as Channels does before a database call
        try:
            run = check()
        except BaseException as exc:
            checked.set_exception(exc)
            close_old_connections()
            return None
        checked.set_result(run)
        return search(run) if run.settings.top_k else None

    return checked, _search_pool.submit(check_then_search)


class _HeldFrames:
    """An answer's frames, held until its "started" frame is out: the answer runs (and asks vLLM)
    while its row is still being written, and the browser learns the row's id from "started"."""

    def __init__(self, send_json: Callable[[Frame], Awaitable[None]]) -> None:
        self.send_json = send_json
        self.held: list[Frame] = []
        self.opened_at: float | None = None  # perf_counter when the held frames were out; None: holding

    async def send(self, frame: Frame) -> None:
        if self.opened_at is not None:
            await self.send_json(frame)
        else:
            self.held.append(frame)

    async def open_with(self, first: Frame) -> float:
        """Send ``first``, then what was held, in order; from then on frames go straight out. When
        the held frames were out (perf_counter)."""
        await self.send_json(first)
        while self.held:  # frames held while these were sent join the end of the line
            await self.send_json(self.held.pop(0))
        self.opened_at = time.perf_counter()
        return self.opened_at


class Ask:
    """One ask frame's question, from its check to its saved answer. Call ``check``, then ``answer``
    (the answer's task: the consumer may ``stop`` it from then on), then ``save``; each raises
    ``Refused`` with what to tell the learner. The answer's row is finished whatever happens."""

    run: chat.AnswerRun  # from check on
    searching: Searching
    retrieving: asyncio.Future[list[prompting.ContextChunk]]  # from answer on
    picking: asyncio.Future[None]  # the engine picked: run.engine is set once this is done
    saving: asyncio.Future[Answer]
    task: asyncio.Task[None]
    # "held" once the answer has its slot at the engine (or ended before admission), "waiting" while it
    # waits in line; ``Refused`` when the admission turned it away (``rag.admission``).
    admitting: asyncio.Future[str]

    def __init__(
        self,
        *,
        user: AbstractBaseUser,
        language: str,
        client_id: str,
        session_key: str | None,
        received_at: float,
        send_json: Callable[[Frame], Awaitable[None]],
        engine_of: Callable[[], chat.Engine],
        speeds: SpeedsOf,
        on_end: Callable[[], object],
    ) -> None:
        self.user, self.language, self.client_id, self.session_key = user, language, client_id, session_key
        self.received_at = received_at  # the panel's server-side clock starts at the frame's arrival
        self.engine_of, self.speeds, self.on_end = engine_of, speeds, on_end
        self.most = int(settings.CHAT_MAX_CONCURRENT_PER_USER)
        self.frames = _HeldFrames(lambda frame: send_json(frame | {"id": client_id}))
        self.send_json = send_json  # the line's frames go straight out, never held (``_send_now``)
        self.gate = admission.gate
        self.refusal: Refused | None = None
        self.conversation_id: int | None = None
        self.parent_id: int | None = None
        self.keeper: keeper.Keeper | None = None  # the row kept current while the answer streams

    async def check(self, content: Frame) -> None:
        """Check: the frame's fields here; then, on a search thread, what needs the database. The
        search follows there at once (``searching``)."""
        try:
            unknown = sorted(set(content) - FIELDS)
            if unknown:
                raise prompting.SettingsError(_("알 수 없는 필드: %(f)s") % {"f": ", ".join(unknown)})
            question = prompting.question_clean(content.get("question"))
            self.conversation_id = _optional_id(content.get("conversation"), "conversation")
            self.parent_id = _optional_id(content.get("parent"), "parent")
            checked, self.searching = _check_then_search(
                functools.partial(self._check_reads, question, content.get("settings"))
            )
            self.run = await asyncio.wrap_future(checked)
        except (prompting.SettingsError, conversations.TooMany, conversations.NotFound) as exc:
            raise Refused(str(exc)) from exc

    def _check_reads(self, question: str, raw: Any) -> chat.AnswerRun:
        """What must be read before searching, on the search's own thread: that the socket's session still
        signs the learner in (``sockets.SessionEnded`` if not: the socket's check of this frame, made here
        rather than on a thread hop of its own before the frame is read); a first check of the limit
        of answers at once (``answer_start`` checks it again under a lock), so an ask over it is
        refused before any retrieval is spent on it; for a follow-up, that its conversation and parent
        are the learner's; and the collection asked for, if this learner may search it (the chapter
        and their own need no query)."""
        if not sockets.session_valid(self.session_key, self.user):
            raise sockets.SessionEnded
        with translation.override(self.language):
            conversations.streaming_check(self.user, self.most)
            conversations.follow_up_check(self.user, self.conversation_id, self.parent_id)
            chat_settings = prompting.settings_parse(raw)
            try:
                collection = access.collection_resolve(self.user, chat_settings.collection)
            except access.CollectionNotFound:
                keys = [ref.key for ref in access.collections_for(self.user)]
                raise prompting.SettingsError(prompting.collection_unknown(chat_settings.collection, keys)) from None
        run = chat.AnswerRun(
            question=question,
            settings=chat_settings,
            collection=collection,
            language=self.language,
            stall_timeout_s=float(settings.CHAT_TIMEOUT_S),
            received_at=self.received_at,
            session=session_of(self.user),
        )
        run.mark("checked")
        return run

    def answer(self) -> asyncio.Task[None]:
        """Start the answer: the search's outcome (begun by ``check``), the engine picked (read
        beside it, on a thread of its own, at every ask: a pick made after the tab opened counts),
        the row's write (once vLLM is asked) and the answer's task, which asks vLLM and streams."""
        self.retrieving = asyncio.ensure_future(chat.retrieved(self.run, self.searching))
        self.picking = asyncio.ensure_future(self._pick_engine())
        self.saving = asyncio.ensure_future(self._save_when_asked())
        self.admitting = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._answer())
        return self.task

    async def admitted(self) -> str:
        """Once the admission has decided: "held" (the answer runs now) or "waiting" (in line; the
        "queued" frames say where); ``Refused`` with the retry time when it was turned away."""
        return await asyncio.shield(self.admitting)

    def stop(self) -> asyncio.Task[None]:
        """Stop: cancelling the task closes the HTTP stream to vLLM, which aborts the request; the
        partial answer is saved as stopped."""
        self.task.cancel()
        return self.task

    async def _pick_engine(self) -> None:
        self.run.engine = await database_sync_to_async(self.engine_of, thread_sensitive=False)()

    async def _save_when_asked(self) -> Answer:
        """The answer's row, written once vLLM is asked (or the answer ended before asking); none for an
        ask the admission refused (the learner was told at once, nothing was asked)."""
        await self.run.asked.wait()
        if self.refusal is not None:
            raise self.refusal
        answer: Answer = await database_sync_to_async(self._write_row)()
        self.keeper = keeper.Keeper(answer.pk, self.run.row_fields)  # before anyone can see the row saved
        self.keeper.start()
        return answer

    def _write_row(self) -> Answer:
        return conversations.answer_start(
            user=self.user,
            question=self.run.question,
            settings=self.run.settings.as_dict(),
            conversation_id=self.conversation_id,
            parent_id=self.parent_id,
            most_streaming=self.most,
        )

    async def save(self) -> None:
        """Save: the answer's row, then the "started" frame (with its id) and the frames held till
        then. A row refused (the limit of answers at once, checked again under a lock, or a
        conversation that is not the learner's) stops the answer and the request sent to vLLM."""
        try:
            answer = await self.saving
        except Refused:
            self.task.cancel()
            raise
        except (conversations.NotFound, conversations.TooMany) as exc:
            self.task.cancel()  # its held frames are dropped
            raise Refused(str(exc)) from exc
        except BaseException:  # the database failed: no answer without its row
            self.task.cancel()
            raise
        self.run.mark("saved")
        await self.picking
        opened_at = await self.frames.open_with(
            {
                "type": "started",
                "id": self.client_id,
                "answer_id": answer.pk,
                "conversation": answer.conversation_id,
                "parent_id": answer.parent_id,
                "question": self.run.question,
                "settings": answer.settings,
                "engine": self.run.engine.shown(),
            }
        )
        # Token frames that waited for "started" reached the socket only now: the panel's
        # forwarding times say when they went out, not when they were made.
        run = self.run
        if run.first_forward_at is not None:
            run.first_forward_at = max(run.first_forward_at, opened_at)
        if run.last_forward_at is not None:
            run.last_forward_at = max(run.last_forward_at, opened_at)

    async def _answer(self) -> None:
        """Ask vLLM once the search is in and the prompt is built, and stream (``rag.chat``); then
        the estimate, and finish: done, failed (``fail``) or stopped (cancelled)."""
        run = self.run
        status = Answer.Status.FAILED
        ticket: admission.Ticket | None = None
        keeping: asyncio.Task[None] | None = None
        held_at: float | None = None
        try:
            with translation.override(self.language):
                await self.picking
                ticket = self.gate.ticket(run.engine.request_url, int(self.user.pk))
                await self._admit(ticket)
                held_at = time.perf_counter()
                keeping = asyncio.create_task(self.gate.keep(ticket))
                await chat.answer_run(run, self._send, self.retrieving)
            status = Answer.Status.FAILED if run.error else Answer.Status.DONE
        except asyncio.CancelledError:
            status = Answer.Status.STOPPED
            if held_at is None and run.queue is not None:
                with translation.override(self.language):
                    queue_cancelled(run)
        except Refused:
            pass  # the admission's refusal: the learner was told at once; no row, nothing asked
        except Exception as exc:
            self.fail(exc)
        finally:
            if keeping is not None:
                keeping.cancel()
            if ticket is not None:  # every way out gives the place back (a killed process: its lease ends)
                took = None if held_at is None else time.perf_counter() - held_at
                await asyncio.shield(self.gate.leave(ticket, took))
            if not self.admitting.done():
                self.admitting.set_result("held")  # ended before the admission: the row says how
            run.asked.set()  # an answer that ended before asking vLLM still gets its row
            self._discard_retrieval()
            self.on_end()
            await asyncio.shield(self._estimate_then_finish(status))

    async def _send(self, frame: Frame) -> None:
        """An answer's frame to the learner; new text is also kept on its row (``rag.keeper``)."""
        await self.frames.send(frame)
        if frame["type"] == "token" and self.keeper is not None:
            self.keeper.nudge()

    async def _admit(self, ticket: admission.Ticket) -> None:
        """A slot at the engine for this answer: at once, or after waiting in line (each new position
        and wait sent as a "queued" frame, then "admitted"); ``Refused`` at once when the line is full
        or the wait too long, with when to ask again."""
        run = self.run
        place = await self.gate.enter(ticket)
        if place.state == "waiting":
            run.queue = {"position": place.position, "slots": place.slots, "wait_ms": None}
            queued_at = time.perf_counter()
            self.admitting.set_result("waiting")
            place = await self.gate.wait(ticket, place, self._tell_place)
            if place.state == "held":
                waited = time.perf_counter() - queued_at
                run.queue["wait_ms"] = round(waited * 1000, 1)
                run.queued_s = waited
                await self._send_now({"type": "admitted", "waited_ms": run.queue["wait_ms"]})
        if place.state == "refused":
            self.refusal = Refused(_refusal(place), place)
            if not self.admitting.done():
                self.admitting.set_exception(self.refusal)
                self.admitting.exception()  # read here: the consumer may already have stopped listening
            else:  # refused while waiting (its place was lost and the line is full now)
                await self._send_now(refused_frame(self.refusal))
            raise self.refusal
        run.mark("admitted")
        if not self.admitting.done():
            self.admitting.set_result("held")

    async def _tell_place(self, place: admission.Place) -> None:
        wait_s = None if place.wait_s is None else round(place.wait_s)
        await self._send_now({"type": "queued", "position": place.position, "wait_s": wait_s, "slots": place.slots})

    async def _send_now(self, frame: Frame) -> None:
        with contextlib.suppress(Exception):  # the socket may be gone (closed tab): its answer is cancelled
            await self.send_json(frame | {"id": self.client_id})

    async def _estimate_then_finish(self, status: Answer.Status) -> None:
        """The estimate, after the stream so it never delays the first token, for a stopped answer
        too (it has a shape and the learner's speeds exist whether or not it ran to its end); then
        finish."""
        run = self.run
        if chat.needs_speeds(run):
            try:
                with translation.override(self.language):
                    speeds = await database_sync_to_async(self.speeds)(self.user, run.engine.base_url)
                chat.estimate_set(run, speeds)
            except Exception as exc:  # the answer is saved without an estimate, never lost
                log.warning("chat answer %s: no estimate (%s)", self.client_id, exc)
        await self.finish(status)

    def fail(self, exc: Exception) -> None:
        """Fail: recorded on the answer (its msgid and values: ``labapp.said``) and reported, never lost silently."""
        log.error("chat answer %s failed", self.client_id, exc_info=exc)
        self.run.error = said.gettext("답을 만들다가 오류가 났습니다: %(why)s") % {"why": said.exception(exc)}

    def _discard_retrieval(self) -> None:
        """A retrieval the answer did not wait for: stopped, or its outcome read so that an error in it
        is not reported as never retrieved."""
        if not self.retrieving.done():
            self.retrieving.cancel()
        elif not self.retrieving.cancelled():
            self.retrieving.exception()

    async def finish(self, status: Answer.Status) -> None:
        """Finish: the answer's row completed and the "done" frame sent; nothing when the row was
        refused (``save`` has reported why)."""
        try:
            answer = await self.saving
        except Exception:  # refused or failed: save reported it, there is no row to finish
            return
        if self.keeper is not None:
            await self.keeper.stop()  # its last write lands before the final one, never after
        with translation.override(self.language):
            chat.explain_empty(self.run, stopped=status == Answer.Status.STOPPED)
        saved = await database_sync_to_async(conversations.answer_finish)(
            answer_id=answer.pk, run=self.run, status=status
        )
        with contextlib.suppress(Exception):  # the socket may be gone (closed tab)
            await self.frames.send({"type": "done", "answer": conversations.answer_payload(saved)})


def _refusal(place: admission.Place) -> str:
    """Why the admission turned an ask away, and when to ask again, in the learner's words."""
    if place.reason == "mine":
        return _(
            "기다리거나 답변 중인 질문이 이미 %(most)d개입니다 (한 사람이 동시에 %(most)d개까지). "
            "하나가 끝나면 다시 물어보세요."
        ) % {"most": int(settings.CHAT_MAX_CONCURRENT_PER_USER)}
    if place.reason == "slow":
        return _(
            "지금은 엔진이 바빠서 약 %(wait)d초를 기다려야 합니다 (%(most)d초까지만 기다리게 합니다). "
            "%(retry)d초 후에 다시 물어보세요."
        ) % {"wait": round(place.wait_s or 0), "most": int(settings.CHAT_WAIT_MAX_S), "retry": place.retry_s}
    return _("대기 줄이 꽉 찼습니다 (엔진마다 %(line)d명까지). %(retry)d초 후에 다시 물어보세요.") % {
        "line": int(settings.CHAT_LINE_MAX),
        "retry": place.retry_s,
    }


def queue_cancelled(run: chat.AnswerRun) -> None:
    """The notice of an answer stopped (or its tab closed) while it waited in the admission's line:
    saved with the answer (its msgid: ``labapp.said``), whose card says why it has no text."""
    run.notice("queue_cancelled", said.gettext("차례를 기다리다가 취소했습니다. vLLM에는 보내지 않았습니다."))


def refused_frame(exc: Refused) -> Frame:
    """The frame for an ask the admission refused: the message, why, and the seconds until asking again."""
    place = exc.place
    assert place is not None
    return {"type": "refused", "error": str(exc), "reason": place.reason, "retry_s": place.retry_s}


async def browser_timing(*, user: AbstractBaseUser, content: Frame) -> Frame:
    """The "overhead" frame for a "client_timing" frame: what the browser measured, stored on the
    answer, and the websocket's own cost it implies. ``Refused`` for a bad frame or an unknown answer."""
    answer_id = content.get("answer_id")
    first, done = content.get("first_token_ms"), content.get("done_ms")
    valid = _frame_id(answer_id) is not None and all(
        v is None or (isinstance(v, int | float) and 0 <= v < 86_400_000) for v in (first, done)
    )
    if not valid:
        raise Refused(_("client_timing: answer_id(정수)와 0 이상의 ms 값이 필요합니다."))
    timings = await database_sync_to_async(conversations.answer_browser_timing)(
        user=user, answer_id=answer_id, first_token_ms=first, done_ms=done
    )
    if timings is None:
        raise Refused(_("답변 %(id)s을(를) 찾을 수 없습니다.") % {"id": answer_id})
    return {
        "type": "overhead",
        "answer_id": answer_id,
        "websocket_overhead_ms": timings.get("websocket_overhead_ms"),
        "browser": timings.get("browser"),
    }


def _frame_id(value: Any) -> int | None:
    """An id in a frame: a JSON whole number (not a string, not true) within ``request_numbers``' bounds."""
    return request_numbers.whole(value, low=1) if isinstance(value, int) else None


def _optional_id(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if (found := _frame_id(value)) is None:
        raise prompting.SettingsError(_("%(name)s: 양의 정수 또는 null이어야 합니다.") % {"name": name})
    return found
