"""The chat websocket, thin: authenticate, parse a frame, call the question's ``rag.ask.Ask``, send frames.

Frames from the browser (JSON objects):
  {"type": "ask", "id": "<client id>", "question": "...", "settings": {...},
   "conversation": <id or null>, "parent": <answer id or null>}
  {"type": "stop", "id": "<client id>"}
  {"type": "client_timing", "answer_id": N, "first_token_ms": x, "done_ms": y}
Frames to the browser carry the client id: started (with the engine that answers: the one
picked on the engines page), retrieval, prompt, token, done (with the saved answer), error; and,
when the chat's engine is full (``rag.admission``): queued (position, expected wait in s, slots) as
the line moves, admitted (waited_ms) when its turn comes, or refused (error, reason, retry_s) at once;
a bad frame gets an error frame and the socket stays open. Signing out, and every event that
ends the user's sessions, closes the socket; every frame is refused (the socket closed) once its
session is no longer valid, and an idle socket finds out within ``SOCKET_SESSION_RECHECK_S``; a
user who must change a temporary password gets none (labapp.sockets).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import time
from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

from labapp import sockets
from rag import embeddings, lexical
from rag.ask import Ask, EngineOf, Refused, SpeedsOf, browser_timing, configured_engine, no_speeds, refused_frame

CLOSE_UNAUTHENTICATED = 4401
MAX_FRAME_BYTES = 64 * 1024
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class ChatConsumer(sockets.SessionSocket):
    # Answers stream straight to this socket; no channel layer is needed, so chat
    # keeps working while Redis is down (the sign-out watch is its own, optional listener).
    channel_layer_alias = "no-channel-layer"

    def __init__(
        self, *args: Any, speeds: SpeedsOf = no_speeds, engine: EngineOf = configured_engine, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.speeds, self.engine_of = speeds, engine  # bench's, passed by the project's routing (rag.ask)
        self.in_flight: dict[str, Ask] = {}  # the answers this socket is streaming, by client id
        self._saving: set[asyncio.Task[None]] = set()  # rows of answers that waited in line, being written

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)  # before any work
            return
        if await sockets.password_change_due(self.scope):
            await self.close(code=sockets.CLOSE_PASSWORD_CHANGE)  # a temporary password: change it first
            return
        cookie = (self.scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME, "")
        self.language = cookie if cookie in dict(settings.LANGUAGES) else settings.LANGUAGE_CODE
        self.watch = sockets.SignOutWatch(scope=self.scope, on_sign_out=self.end_session)
        await self.watch.start()
        await self.accept()
        lexical.warm_in_background()  # the Korean analyser's model, read while the learner types
        embeddings.warm_in_background()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "watch"):
            await self.watch.stop()
        await self._stop_answers()

    async def _stop_answers(self) -> None:
        # A closed tab stops its answers; each saves its partial answer as stopped.
        await asyncio.gather(*[ask.stop() for ask in list(self.in_flight.values())], return_exceptions=True)

    async def on_session_end(self) -> None:
        await self._stop_answers()  # frames still in flight are ignored (``session_over``)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        # Every frame is refused once the session no longer signs the user in (an event missed, the layer
        # down, ends it here). An ask's check reads it on the thread its other checks and search go to
        # (``rag.ask``): a thread hop of its own cost each question 10-30 ms at the median under load.
        if self.session_over:
            return
        content, problem = _parsed(text_data)
        if not (isinstance(content, dict) and content.get("type") == "ask") and not await self.session_still_valid():
            return
        if problem:
            await self._error(problem)
            return
        await self.receive_json(content)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        with translation.override(self.language):
            kind = content.get("type")
            if kind == "ask":
                await self._ask(content)
            elif kind == "stop":
                ask = self.in_flight.get(str(content.get("id")))
                if ask is None:
                    await self._error(_("멈출 답변이 없습니다."), content.get("id"))
                else:
                    ask.stop()
            elif kind == "client_timing":
                try:
                    await self.send_json(await browser_timing(user=self.user, content=content))
                except Refused as exc:
                    await self._error(str(exc))
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
            if await self.session_still_valid():
                await self._error(_("id: 영문자, 숫자, -, _ 로 된 40자 이하의 문자열이어야 합니다."))
            return
        if client_id in self.in_flight:
            if await self.session_still_valid():
                await self._error(_("같은 id의 답변이 이미 진행 중입니다."), client_id)
            return
        ask = Ask(
            user=self.user,
            language=self.language,
            client_id=client_id,
            session_key=sockets.scope_session_key(self.scope),
            received_at=received_at,
            send_json=self.send_json,
            engine_of=functools.partial(self.engine_of, sockets.scope_session_key(self.scope)),
            speeds=self.speeds,
            on_end=functools.partial(self.in_flight.pop, client_id, None),
        )
        try:
            await ask.check(content)
            ask.answer()
            self.in_flight[client_id] = ask
            if await ask.admitted() == "waiting":
                # In the admission's line: its place counts against the learner's limit already, and
                # this socket goes on reading frames (a "stop" cancels the wait); the row follows.
                self._saving.add(saving := asyncio.create_task(self._save(ask, client_id)))
                saving.add_done_callback(self._saving.discard)
                return
            # Until the row is written, this socket reads no other frame: its next ask is checked
            # against this answer's row, so asks sent at once cannot pass the limit together.
            await ask.save()
        except sockets.SessionEnded:
            await self.end_session()  # nothing was searched or asked
        except Refused as exc:
            if await self.session_still_valid():  # refused before its check read the session
                await self._refused(exc, client_id)

    async def _save(self, ask: Ask, client_id: str) -> None:
        """The row of an answer that waited in line, written once it is admitted and vLLM asked."""
        try:
            await ask.save()
        except Refused as exc:
            with translation.override(self.language), contextlib.suppress(Exception):  # the socket may be gone
                await self._refused(exc, client_id)

    async def _refused(self, exc: Refused, client_id: str) -> None:
        if exc.place is None:
            await self._error(str(exc), client_id)
        else:  # the admission's: a "refused" frame with the seconds until asking again
            await self.send_json(refused_frame(exc) | {"id": client_id})


def _parsed(text_data: str | None) -> tuple[Any, str]:
    """The frame as JSON, or what is wrong with it (a message for the learner)."""
    if text_data is None or len(text_data.encode()) > MAX_FRAME_BYTES:
        return None, _("프레임은 %(n)d KB 이하의 JSON 텍스트여야 합니다.") % {"n": MAX_FRAME_BYTES // 1024}
    try:
        content = json.loads(text_data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
        return None, _("JSON이 아닙니다: %(why)s") % {"why": exc}
    if not isinstance(content, dict):
        return None, _("메시지는 JSON 객체여야 합니다.")
    return content, ""
