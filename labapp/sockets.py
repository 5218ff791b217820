"""Websockets end with the session that opened them.

Signing out sends ``user.signed_out`` to the user's channel-layer group ``user-<id>``.
Every socket of that user (chat, job progress) is in the group; it closes with
``CLOSE_SIGNED_OUT`` when the event names its session, when the event names none (every
socket of the user: ``labapp.session_ends``, after a password change, a reset, a role
change, a removal from a class, a deactivation or a deletion), or when its own session
is no longer valid. A socket of the same user's other, still signed-in browser stays
open. No socket opens while a temporary password set by an instructor is unchanged.

Events are hints: each socket also re-checks its session (``session_valid``: the session
still stored, the user still active, its password hash unchanged) on every frame it receives,
and every ``SOCKET_SESSION_RECHECK_S`` seconds while it receives none (``SessionSocket``, the
base of the chat and job-progress consumers), so an event lost while the channel layer was
down leaves no socket working past that time. When Redis is down, signing out still succeeds
and chat keeps working without the watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils.crypto import constant_time_compare

from labapp import accounts

log = logging.getLogger(__name__)

CLOSE_SIGNED_OUT = 1008  # WebSocket "policy violation": this session may no longer use the socket
CLOSE_PASSWORD_CHANGE = 4403  # signed in with a temporary password that is not changed yet
SIGNED_OUT = "user.signed_out"
LAYER_TIMEOUT_S = 2.0  # sign-out and connect never wait longer than this on an unreachable layer
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0  # a watch whose layer failed tries again after 0.5, 1, 1.5 … 5 s


class SessionEnded(Exception):
    """The socket's session no longer signs its user in: found by a check made on a thread beside other
    reads (``rag.ask``'s check of a question); the consumer ends the socket (``end_session``)."""


def user_group(user_id: object) -> str:
    return f"user-{user_id}"


@receiver(user_logged_out, dispatch_uid="labapp.sockets.sign_out")
def sockets_close_on_sign_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None or user.pk is None:
        return
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    sockets_close(user_id=user.pk, session_key=session_key)


def sockets_close(*, user_id: object, session_key: str | None = None) -> None:
    """Close the user's sockets of this session, or every one of them (``session_key=None``)."""
    event = {"type": SIGNED_OUT, "session": session_key}
    try:
        async_to_sync(_group_send)(user_group(user_id), event)
    except Exception as exc:  # the layer is a hint: sign-out itself must succeed
        log.warning("sign-out of user %s: open sockets not told (%s: %s)", user_id, type(exc).__name__, exc)


async def password_change_due(scope: dict[str, Any]) -> bool:
    """Whether the socket's user must first change a temporary password (``labapp.accounts``).

    Every consumer asks this before any work and closes with ``CLOSE_PASSWORD_CHANGE``: the
    pages lead such a user to the password change, and a socket must not be a way around it.
    """
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return False
    return bool(await database_sync_to_async(accounts.password_change_due)(scope.get("session"), user))


async def _group_send(group: str, event: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await asyncio.wait_for(layer.group_send(group, event), LAYER_TIMEOUT_S)


async def ends_session(event: dict[str, Any], scope: dict[str, Any]) -> bool:
    """Whether a ``user.signed_out`` event ends the socket of ``scope``: it names this
    socket's session, or none (every socket of the user), or this session is no longer valid."""
    session_key = scope_session_key(scope)
    if session_key is None or event.get("session") in (None, session_key):
        return True
    return not await still_signed_in(scope)


def session_valid(session_key: str | None, user: Any) -> bool:
    """Whether the session ``session_key`` still signs ``user`` in, read afresh: still stored
    and unexpired, for this user, who is still active, with the password hash it was made
    with (Django's own rule for a page, made here without flushing anything).

    Two primary-key reads; every socket asks it for every frame it receives."""
    if session_key is None or user is None or not user.is_authenticated:
        return False
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()  # {} when gone
    if data.get(SESSION_KEY) != str(user.pk):
        return False
    now = get_user_model()._default_manager.filter(pk=user.pk, is_active=True).only("password").first()
    stored = data.get(HASH_SESSION_KEY)
    return now is not None and isinstance(stored, str) and constant_time_compare(stored, now.get_session_auth_hash())


async def still_signed_in(scope: dict[str, Any]) -> bool:
    """``session_valid`` for a socket's scope, off the event loop."""
    return bool(await database_sync_to_async(session_valid)(scope_session_key(scope), scope.get("user")))


def scope_session_key(scope: dict[str, Any]) -> str | None:
    session = scope.get("session")
    key = getattr(session, "session_key", None)
    return key if isinstance(key, str) else None


class SignOutWatch:
    """For a consumer without a channel layer of its own (chat): its own channel in the
    user's group, listened to by a task, calling ``on_sign_out`` when the session ends.

    Never raises: without a reachable layer at connect the socket simply has no watch; a
    layer failing later is retried until the socket closes.
    """

    def __init__(self, *, scope: dict[str, Any], on_sign_out: Callable[[], Awaitable[None]]):
        self.group = user_group(scope["user"].pk)
        self.scope = scope
        self.on_sign_out = on_sign_out
        self.layer = get_channel_layer()
        self.channel = ""
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Join the group before returning, so a sign-out right after connect is not missed."""
        if self.layer is None:
            return
        try:
            self.channel = await self.layer.new_channel()
            await asyncio.wait_for(self.layer.group_add(self.group, self.channel), LAYER_TIMEOUT_S)
        except Exception as exc:
            log.warning("socket sign-out watch unavailable (%s: %s)", type(exc).__name__, exc)
            self.channel = ""
            return
        self.task = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        assert self.layer is not None
        failures = 0
        while True:
            try:
                event = await self.layer.receive(self.channel)
                failures = 0
                if event.get("type") == SIGNED_OUT and await ends_session(event, self.scope):
                    await self.on_sign_out()
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A slow or restarted Redis (read timeouts under load): wait, join the group
                # again (a restarted Redis forgot it) and go on watching.
                failures += 1
                if failures == 1:
                    log.warning("socket sign-out watch: %s: %s; retrying", type(exc).__name__, exc)
                await asyncio.sleep(min(RETRY_MAX_S, RETRY_FIRST_S * failures))
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.layer.group_add(self.group, self.channel), LAYER_TIMEOUT_S)

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.layer is not None and self.channel:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.layer.group_discard(self.group, self.channel), LAYER_TIMEOUT_S)
            self.channel = ""


class SessionSocket(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # Channels ships no types
    """The base of every socket that belongs to a signed-in session (chat, job progress).

    From ``accept`` on, a timer re-reads the session every ``settings.SOCKET_SESSION_RECHECK_S``
    seconds: a socket that receives no frame and no push, whose close event was lost (the layer
    down, a query-set ``update()``), still ends within that time. Frames and pushes re-check
    sooner (``session_still_valid``). The end is one step, ``end_session``: the socket closes
    with ``CLOSE_SIGNED_OUT`` once, then ``on_session_end`` drops what it was doing.
    """

    session_over = False  # closed because its session ended: later frames and events are dropped
    _session_timer: asyncio.Task[None] | None = None

    async def on_session_end(self) -> None:
        """What the socket drops when its session ends, after it is closed (nothing by default)."""

    async def accept(self, subprotocol: str | None = None, headers: Any = None) -> None:
        await super().accept(subprotocol, headers)
        self._session_timer = asyncio.create_task(self._recheck_session_periodically())

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        await self._session_timer_stop()
        await super().websocket_disconnect(message)

    async def session_still_valid(self) -> bool:
        """Whether the session still signs the socket's user in; if not, the socket ends now."""
        if not self.session_over and not await still_signed_in(self.scope):
            await self.end_session()
        return not self.session_over

    async def end_session(self) -> None:
        if self.session_over:
            return
        self.session_over = True
        await self._session_timer_stop()
        await self.close(code=CLOSE_SIGNED_OUT)
        await self.on_session_end()

    async def _recheck_session_periodically(self) -> None:
        while not self.session_over:
            await asyncio.sleep(float(settings.SOCKET_SESSION_RECHECK_S))
            try:
                await self.session_still_valid()
            except Exception as exc:  # the database unreachable for a moment: the next period tries again
                log.warning("socket session re-check failed (%s: %s); trying again", type(exc).__name__, exc)

    async def _session_timer_stop(self) -> None:
        timer, self._session_timer = self._session_timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
