"""The chat websocket: thin — authenticate, validate, save, hand off to rag.chat.

Frames from the browser (JSON objects):
  {"type": "ask", "id": "<client id>", "question": "...", "settings": {...},
   "conversation": <id or null>, "parent": <answer id or null>}
  {"type": "stop", "id": "<client id>"}
  {"type": "client_timing", "answer_id": N, "first_token_ms": x, "done_ms": y}
Frames to the browser carry the client id: started (with the engine that answers: the one
picked on the engines page), retrieval, prompt, token, done (with the saved answer), error;
a bad frame gets an error frame and the socket stays open. Signing out closes the socket, and
a user who must change a temporary password gets none (labapp.sockets).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import translation
from django.utils.translation import gettext as _

from labapp import sockets
from rag import access, chat, conversations, embeddings, prompting
from rag.models import Answer

log = logging.getLogger(__name__)
CLOSE_UNAUTHENTICATED = 4401
MAX_FRAME_BYTES = 64 * 1024
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
# The learner's speeds on an engine (its base URL), from their Lab 1 runs there; None: none yet.
SpeedsOf = Callable[[AbstractBaseUser, str], chat.Speeds | None]
# The engine the learner picked (from their session's key; None: no session): the chat answers there.
EngineOf = Callable[[str | None], chat.Engine]


def no_speeds(user: AbstractBaseUser, engine_url: str) -> chat.Speeds | None:
    return None


def configured_engine(session_key: str | None) -> chat.Engine:
    return chat.Engine()


class HeldFrames:
    """An answer's frames, held until its "started" frame is out: the answer runs (and asks vLLM)
    while its row is still being written, and the browser learns the row's id from "started"."""

    def __init__(self, send_json: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.send_json = send_json
        self.held: list[dict[str, Any]] = []
        self.opened_at: float | None = None  # perf_counter when the held frames were out; None: holding

    async def send(self, frame: dict[str, Any]) -> None:
        if self.opened_at is not None:
            await self.send_json(frame)
        else:
            self.held.append(frame)

    async def open_with(self, first: dict[str, Any]) -> None:
        """Send ``first``, then what was held, in order; from then on frames go straight out."""
        await self.send_json(first)
        while self.held:  # frames held while these were sent join the end of the line
            await self.send_json(self.held.pop(0))
        self.opened_at = time.perf_counter()


class ChatConsumer(AsyncJsonWebsocketConsumer):
    # Answers stream straight to this socket; no channel layer is needed, so chat
    # keeps working while Redis is down (the sign-out watch is its own, optional listener).
    channel_layer_alias = "no-channel-layer"

    def __init__(
        self, *args: Any, speeds: SpeedsOf = no_speeds, engine: EngineOf = configured_engine, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        # Where an answer's engine and the learner's speeds for its estimate come from: the
        # project's routing passes bench's (the engines page's pick, Lab 1 runs), which rag,
        # below bench, does not import.
        self.speeds = speeds
        self.engine_of = engine

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)  # before any work
            return
        if await sockets.password_change_due(self.scope):
            await self.close(code=sockets.CLOSE_PASSWORD_CHANGE)  # a temporary password: change it first
            return
        self.language = self._language()
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.signed_out = False
        self.watch = sockets.SignOutWatch(
            user_id=self.user.pk, session_key=sockets.scope_session_key(self.scope), on_sign_out=self._signed_out
        )
        await self.watch.start()
        await self.accept()
        embeddings.warm_in_background()

    def _language(self) -> str:
        cookie = (self.scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME, "")
        return cookie if cookie in dict(settings.LANGUAGES) else settings.LANGUAGE_CODE

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "watch"):
            await self.watch.stop()
        await self._stop_answers()

    async def _stop_answers(self) -> None:
        # A closed tab stops its answers: cancelling the task closes the HTTP stream to
        # vLLM, which aborts the request; each task saves its partial answer as stopped.
        tasks = list(getattr(self, "in_flight", {}).values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _signed_out(self) -> None:
        self.signed_out = True  # frames still in flight are ignored
        await self.close(code=sockets.CLOSE_SIGNED_OUT)
        await self._stop_answers()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        if self.signed_out:
            return
        if text_data is None or len(text_data.encode()) > MAX_FRAME_BYTES:
            await self._error(_("프레임은 %(n)d KB 이하의 JSON 텍스트여야 합니다.") % {"n": MAX_FRAME_BYTES // 1024})
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
            await self._error(_("JSON이 아닙니다: %(why)s") % {"why": exc})
            return
        if not isinstance(content, dict):
            await self._error(_("메시지는 JSON 객체여야 합니다."))
            return
        await self.receive_json(content)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        with translation.override(self.language):
            kind = content.get("type")
            if kind == "ask":
                await self._ask(content)
            elif kind == "stop":
                task = self.in_flight.get(str(content.get("id")))
                if task is None:
                    await self._error(_("멈출 답변이 없습니다."), content.get("id"))
                else:
                    task.cancel()
            elif kind == "client_timing":
                await self._client_timing(content)
            else:
                await self._error(_("알 수 없는 메시지 종류: %(kind)r") % {"kind": kind})

    async def _error(self, message: str, client_id: Any = None) -> None:
        frame: dict[str, Any] = {"type": "error", "error": message}
        if isinstance(client_id, str) and _CLIENT_ID.match(client_id):
            frame["id"] = client_id
        await self.send_json(frame)

    async def _ask(self, content: dict[str, Any]) -> None:
        received_at = time.perf_counter()  # the panel's server-side clock starts at the frame's arrival
        client_id = content.get("id")
        if not isinstance(client_id, str) or not _CLIENT_ID.match(client_id):
            await self._error(_("id: 영문자, 숫자, -, _ 로 된 40자 이하의 문자열이어야 합니다."))
            return
        if client_id in self.in_flight:
            await self._error(_("같은 id의 답변이 이미 진행 중입니다."), client_id)
            return
        most = int(settings.CHAT_MAX_CONCURRENT_PER_USER)
        try:
            run, searching, conversation_id, parent_id = await self._ask_read(content, most, received_at)
        except (prompting.SettingsError, conversations.TooMany, conversations.NotFound) as exc:
            await self._error(str(exc), client_id)
            return
        # The search began the moment the ask was checked, on a thread of its own. The answer starts
        # now too: vLLM is asked as soon as the search is in and the prompt built. The answer's row
        # is written after that (``run.asked``): written beside the search, its thread held the GIL
        # when the search ended and the event loop waited for it (1-2 ms of the chat's own steps
        # under `make perf`). The answer's frames wait for "started" (which carries the row's id); a
        # row refused here (the limit of answers at once, checked again under a lock, or a
        # conversation that is not the learner's) stops the answer and the request sent to vLLM.
        retrieving = chat.retrieval_start(run, searching)
        # The engine that answers, read at every ask (a pick made on the engines page after this tab
        # opened counts), beside the search: on a thread of its own, not behind other database work.
        engine = asyncio.ensure_future(
            database_sync_to_async(self.engine_of, thread_sensitive=False)(sockets.scope_session_key(self.scope))
        )
        frames = HeldFrames(lambda frame: self.send_json(frame | {"id": client_id}))
        saving = asyncio.ensure_future(self._save_when_asked(run, conversation_id, parent_id, most))
        answering = self.in_flight[client_id] = asyncio.create_task(
            self._answer(client_id, saving, frames, run, retrieving, engine)
        )
        # Until the row is written, this socket reads no other frame: its next ask is checked
        # against this answer's row, so asks sent at once cannot pass the limit together.
        try:
            answer = await saving
        except (conversations.NotFound, conversations.TooMany) as exc:
            answering.cancel()  # its held frames are dropped
            await self._error(str(exc), client_id)
            return
        except BaseException:  # the database failed: no answer without its row
            answering.cancel()
            raise
        run.mark("saved")
        run.engine = await engine
        await self._started(client_id, answer, run, frames)

    async def _started(self, client_id: str, answer: Answer, run: chat.AnswerRun, frames: HeldFrames) -> None:
        """The "started" frame (the answer's row is written), then the answer's frames held till now."""
        await frames.open_with(
            {
                "type": "started",
                "id": client_id,
                "answer_id": answer.pk,
                "conversation": answer.conversation_id,
                "parent_id": answer.parent_id,
                "question": run.question,
                "settings": answer.settings,
                "engine": run.engine.shown(),
            }
        )
        # Token frames that waited for "started" reached the socket only now: the panel's
        # forwarding times say when they went out, not when they were made.
        for moment in ("first_forward_at", "last_forward_at"):
            if getattr(run, moment) is not None:
                setattr(run, moment, max(getattr(run, moment), frames.opened_at))

    async def _ask_read(
        self, content: dict[str, Any], most: int, received_at: float
    ) -> tuple[chat.AnswerRun, chat.Searching | None, int | None, int | None]:
        """An ask frame checked, as the run it asks for and its search (already begun), with its
        conversation and parent ids; ``SettingsError``, ``TooMany`` or ``NotFound`` says what is wrong."""
        unknown = sorted(set(content) - {"type", "id", "question", "settings", "conversation", "parent"})
        if unknown:
            raise prompting.SettingsError(_("알 수 없는 필드: %(f)s") % {"f": ", ".join(unknown)})
        question = prompting.question_clean(content.get("question"))
        conversation_id = _optional_id(content.get("conversation"), "conversation")
        parent_id = _optional_id(content.get("parent"), "parent")
        checked, searching = chat.retrieval_submit_checked(
            functools.partial(
                self._ask_check, question, content.get("settings"), most, received_at, (conversation_id, parent_id)
            )
        )
        run = await asyncio.wrap_future(checked)
        return run, searching, conversation_id, parent_id

    def _ask_check(
        self, question: str, raw: Any, most: int, received_at: float, follows: tuple[int | None, int | None]
    ) -> chat.AnswerRun:
        """What must be read before searching, on the search's own thread (the search follows there):
        a first check of the limit of answers at once (``answer_start`` checks it again under a lock),
        so an ask over it is refused before any retrieval is spent on it, and the collection asked
        for, if this learner may search it (the chapter and their own need no query); for a follow-up,
        that its conversation and parent are the learner's (``follows``)."""
        with translation.override(self.language):
            conversations.streaming_check(self.user, most)
            conversations.follow_up_check(self.user, *follows)
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
            received_at=received_at,
        )
        run.mark("checked")
        return run

    async def _save_when_asked(
        self, run: chat.AnswerRun, conversation_id: int | None, parent_id: int | None, most: int
    ) -> Answer:
        """The answer's row, written once vLLM is asked (or the answer ended before asking)."""
        await run.asked.wait()
        answer: Answer = await database_sync_to_async(self._ask_save)(
            run.question, run.settings, conversation_id, parent_id, most
        )
        return answer

    def _ask_save(
        self,
        question: str,
        chat_settings: prompting.ChatSettings,
        conversation_id: int | None,
        parent_id: int | None,
        most: int,
    ) -> Answer:
        """The answer's row, once vLLM is asked (``_save_when_asked``)."""
        return conversations.answer_start(
            user=self.user,
            question=question,
            settings=chat_settings.as_dict(),
            conversation_id=conversation_id,
            parent_id=parent_id,
            most_streaming=most,
        )

    async def _answer(
        self,
        client_id: str,
        saving: asyncio.Future[Answer],
        frames: HeldFrames,
        run: chat.AnswerRun,
        retrieving: asyncio.Task[Any] | None = None,
        engine: asyncio.Future[chat.Engine] | None = None,
    ) -> None:
        send = frames.send  # held until "started" (with the answer's id) is out

        status = Answer.Status.FAILED
        try:
            with translation.override(self.language):
                if engine is not None:
                    run.engine = await engine
                await chat.answer_run(run, send, retrieving)
                if not run.error:  # after the stream, so it never delays the first token
                    speeds = await database_sync_to_async(self.speeds)(self.user, run.engine.base_url)
                    run.estimate = chat.estimate(run.record, speeds)
            status = Answer.Status.FAILED if run.error else Answer.Status.DONE
        except asyncio.CancelledError:
            status = Answer.Status.STOPPED
        except Exception as exc:  # recorded and reported, never lost silently
            log.exception("chat answer %s failed", client_id)
            run.error = f"{type(exc).__name__}: {exc}"
        finally:
            run.asked.set()  # an answer that ended before asking vLLM still gets its row
            if retrieving is not None:
                chat.retrieval_discard(retrieving)
            self.in_flight.pop(client_id, None)
            await asyncio.shield(self._answer_finish(saving, run, status, send))

    async def _answer_finish(
        self, saving: asyncio.Future[Answer], run: chat.AnswerRun, status: Answer.Status, send: Callable[..., Any]
    ) -> None:
        """The answer's row completed and the "done" frame sent; nothing when the row was refused
        (``_ask`` has reported why)."""
        try:
            answer = await saving
        except Exception:  # refused or failed: _ask reported it, there is no row to finish
            return
        saved = await database_sync_to_async(conversations.answer_finish)(answer_id=answer.pk, run=run, status=status)
        with contextlib.suppress(Exception):  # the socket may be gone (closed tab)
            await send({"type": "done", "answer": conversations.answer_payload(saved)})

    async def _client_timing(self, content: dict[str, Any]) -> None:
        answer_id = content.get("answer_id")
        first, done = content.get("first_token_ms"), content.get("done_ms")
        valid = isinstance(answer_id, int) and all(
            v is None or (isinstance(v, int | float) and 0 <= v < 86_400_000) for v in (first, done)
        )
        if not valid:
            await self._error(_("client_timing: answer_id(정수)와 0 이상의 ms 값이 필요합니다."))
            return
        timings = await database_sync_to_async(conversations.answer_browser_timing)(
            user=self.user, answer_id=answer_id, first_token_ms=first, done_ms=done
        )
        if timings is None:
            await self._error(_("답변 %(id)s을(를) 찾을 수 없습니다.") % {"id": answer_id})
            return
        await self.send_json(
            {
                "type": "overhead",
                "answer_id": answer_id,
                "websocket_overhead_ms": timings.get("websocket_overhead_ms"),
                "browser": timings.get("browser"),
            }
        )


def _optional_id(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise prompting.SettingsError(_("%(name)s: 양의 정수 또는 null이어야 합니다.") % {"name": name})
    return value
