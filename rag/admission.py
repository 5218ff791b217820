"""Chat admission: whether the chat's engine can start a question's answer soon, decided when it is asked.

vLLM batches, so an engine does not answer one question at a time; but every answer it takes
on slows the others' tokens and the next one's first token, and past a point a class's
questions only pile up inside vLLM until the chat's 120 s time-out fails them (issue 29:
`make load` at full size on one 2-core engine, 7 of 100 answers failed that way after two
minutes of silence). So each engine gets a number of answers in flight (its *slots*,
``CHAT_SLOTS_PER_ENGINE`` per engine behind the address the chat asks: the router's pool
counts each of its engines), and an ask beyond them:

- waits in a bounded line, first come first served, and is told its position and the
  expected wait (the line's position × the median time of the engine's recent answers ÷ its
  slots) as both change; the learner may cancel it from the page;
- or, when the line is full (``CHAT_LINE_MAX``) or the expected wait is over
  ``CHAT_WAIT_MAX_S``, is refused at once with the seconds after which asking again should find
  room ("N초 후에 다시 물어보세요").

A learner holds at most ``CHAT_MAX_CONCURRENT_PER_USER`` places (answering and waiting together).

Every place is a lease: a place not renewed within ``LEASE_S`` is gone. An answer in flight renews
its own (``keep``), a waiting one renews at each look at the line, and every way an answer ends
(done, failed, stopped, refused, its socket closed) gives its place back (``leave``); a web
process killed mid-answer leaves places nobody renews, which come back within ``LEASE_S``.

Where the places are counted: in Redis (``CHAT_ADMISSION_REDIS_URL``, the stack's ``REDIS_URL``),
so every Daphne process of a class server counts the same answers; each step is one Lua script,
one step for Redis whichever process sends it. Without that setting (the unit tests, a laptop
without Redis) the places are counted in this process; with Redis named but unreachable the chat
keeps answering, counted in the process meanwhile, each miss logging a warning naming Redis.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

import redis
from django.conf import settings

from labapp import addresses
from rag.vllm import client as vllm_client

log = logging.getLogger(__name__)
clock = time.time  # a test replaces it with a scripted clock
LEASE_S = 20.0  # a place nobody renews this long is gone (a killed web process's places come back)
RENEW_S = LEASE_S / 4  # an answer in flight renews its place this often
POLL_S = 0.25  # a waiting ask looks at the line this often (at once when a place of this process frees)
RECENT_ANSWERS = 30  # the median of this many recent answers per engine is the expected time of one
REDIS_TIMEOUT_S = 1.0  # a Redis that does not answer holds an ask this long, then the process's count serves
KEYS_IDLE_S = 24 * 3600  # an engine nobody asked for a day: its keys leave Redis

State = Literal["held", "waiting", "full", "mine"]


@dataclass(frozen=True)
class Ticket:
    """One ask's place at one engine (``key``: the address the chat asks), for ``user``."""

    key: str
    user: int
    slots: int
    name: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def member(self) -> str:
        return f"u{self.user}:{self.name}"

    @property
    def prefix(self) -> str:
        return f"u{self.user}:"


@dataclass(frozen=True)
class Line:
    """What one step saw: this ticket's state, its position in the line (1 starts next; 0 when it
    holds a slot), how many hold slots and wait, and the engine's recent answer times (s)."""

    state: State
    position: int
    held: int
    waiting: int
    durations: tuple[float, ...]


@dataclass(frozen=True)
class Place:
    """What the learner is told: ``held`` (the answer starts), ``waiting`` (``position``, about
    ``wait_s`` seconds; None: no answer timed yet on this engine), or ``refused`` (``reason``:
    "full", "slow" or "mine"; ask again after ``retry_s`` seconds, None for "mine": when one of
    their own answers ends)."""

    state: Literal["held", "waiting", "refused"]
    position: int = 0
    wait_s: float | None = None
    retry_s: int | None = None
    reason: str = ""
    slots: int = 0


class Store(Protocol):
    def step(self, ticket: Ticket, now: float, *, line_max: int, per_user: int) -> Line: ...

    def renew(self, ticket: Ticket, now: float) -> bool: ...

    def leave(self, ticket: Ticket, now: float, held_s: float | None) -> None: ...


# KEYS: held (member -> lease end), line (member -> arrival number), line leases (member -> lease end),
# the arrival counter, recent answer times. ARGV: now, member, its user's prefix, slots, line max,
# per-user places, lease seconds, seconds an idle engine's keys are kept.
# Returns {state, position, held, waiting, durations}.
_STEP = """
local now = tonumber(ARGV[1])
local member, prefix = ARGV[2], ARGV[3]
local slots, line_max, per_user = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local lease, idle = tonumber(ARGV[7]), tonumber(ARGV[8])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], idle) end
local durations = redis.call('LRANGE', KEYS[5], 0, -1)
local held, waiting = redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])
if redis.call('ZSCORE', KEYS[1], member) then
  redis.call('ZADD', KEYS[1], now + lease, member)
  return {'held', 0, held, waiting, durations}
end
local rank = redis.call('ZRANK', KEYS[2], member)
if not rank then
  local mine = 0
  for k = 1, 2 do
    for _, m in ipairs(redis.call('ZRANGE', KEYS[k], 0, -1)) do
      if string.sub(m, 1, #prefix) == prefix then mine = mine + 1 end
    end
  end
  if mine >= per_user then return {'mine', 0, held, waiting, durations} end
  if waiting >= line_max and held >= slots then return {'full', waiting + 1, held, waiting, durations} end
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), member)
  waiting = waiting + 1
  rank = waiting - 1
end
if rank < slots - held then
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZADD', KEYS[1], now + lease, member)
  return {'held', 0, held + 1, waiting - 1, durations}
end
redis.call('ZADD', KEYS[3], now + lease, member)
return {'waiting', rank + 1, held, waiting, durations}
"""

# KEYS: held, line leases. ARGV: now, member, lease seconds. 1 when the place was still there.
_RENEW = """
local lease_end = tonumber(ARGV[1]) + tonumber(ARGV[3])
for k = 1, 2 do
  local score = redis.call('ZSCORE', KEYS[k], ARGV[2])
  if score and tonumber(score) > tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[k], lease_end, ARGV[2])
    return 1
  end
end
return 0
"""

# KEYS: held, line, line leases, recent answer times. ARGV: member, the answer's time ("" : none),
# how many times to keep, idle seconds.
_LEAVE = """
local was_held = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if was_held == 1 and ARGV[2] ~= '' then
  redis.call('LPUSH', KEYS[4], ARGV[2])
  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[3]) - 1)
  redis.call('EXPIRE', KEYS[4], tonumber(ARGV[4]))
end
return was_held
"""


def _keys(key: str) -> list[str]:
    base = f"lab:chat-admission:{key}"
    return [f"{base}:held", f"{base}:line", f"{base}:line-leases", f"{base}:arrivals", f"{base}:durations"]


class RedisStore:
    """The places in one Redis, shared by every process that names it."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        self.steps = self.client.register_script(_STEP)
        self.renews = self.client.register_script(_RENEW)
        self.leaves = self.client.register_script(_LEAVE)

    def step(self, ticket: Ticket, now: float, *, line_max: int, per_user: int) -> Line:
        args: list[str | int | float] = [
            f"{now:.6f}", ticket.member, ticket.prefix, ticket.slots, line_max, per_user, LEASE_S, KEYS_IDLE_S
        ]  # fmt: skip
        state, position, held, waiting, durations = self.steps(keys=_keys(ticket.key), args=args)
        return Line(
            state=cast(State, state.decode() if isinstance(state, bytes) else state),
            position=int(position),
            held=int(held),
            waiting=int(waiting),
            durations=tuple(float(d) for d in durations),
        )

    def renew(self, ticket: Ticket, now: float) -> bool:
        held, _line, leases, _arrivals, _durations = _keys(ticket.key)
        return bool(self.renews(keys=[held, leases], args=[f"{now:.6f}", ticket.member, LEASE_S]))

    def leave(self, ticket: Ticket, now: float, held_s: float | None) -> None:
        held, line, leases, _arrivals, durations = _keys(ticket.key)
        took = "" if held_s is None else f"{held_s:.3f}"
        self.leaves(keys=[held, line, leases, durations], args=[ticket.member, took, RECENT_ANSWERS, KEYS_IDLE_S])


@dataclass
class _Engine:
    held: dict[str, float] = field(default_factory=dict)  # member -> lease end
    line: dict[str, float] = field(default_factory=dict)  # member -> lease end, in arrival order
    durations: list[float] = field(default_factory=list)  # newest first


class LocalStore:
    """The places in this process only: the same steps as ``RedisStore``'s scripts, under a lock."""

    def __init__(self) -> None:
        self.engines: dict[str, _Engine] = {}
        self.lock = threading.Lock()

    def _engine(self, key: str, now: float) -> _Engine:
        engine = self.engines.setdefault(key, _Engine())
        engine.held = {m: t for m, t in engine.held.items() if t > now}
        engine.line = {m: t for m, t in engine.line.items() if t > now}
        return engine

    def step(self, ticket: Ticket, now: float, *, line_max: int, per_user: int) -> Line:
        with self.lock:
            e = self._engine(ticket.key, now)
            durations = tuple(e.durations)
            member = ticket.member
            if member in e.held:
                e.held[member] = now + LEASE_S
                return Line("held", 0, len(e.held), len(e.line), durations)
            if member not in e.line:
                mine = sum(m.startswith(ticket.prefix) for m in [*e.held, *e.line])
                if mine >= per_user:
                    return Line("mine", 0, len(e.held), len(e.line), durations)
                if len(e.line) >= line_max and len(e.held) >= ticket.slots:
                    return Line("full", len(e.line) + 1, len(e.held), len(e.line), durations)
                e.line[member] = now + LEASE_S
            rank = list(e.line).index(member)
            if rank < ticket.slots - len(e.held):
                del e.line[member]
                e.held[member] = now + LEASE_S
                return Line("held", 0, len(e.held), len(e.line), durations)
            e.line[member] = now + LEASE_S
            return Line("waiting", rank + 1, len(e.held), len(e.line), durations)

    def renew(self, ticket: Ticket, now: float) -> bool:
        with self.lock:
            e = self._engine(ticket.key, now)
            for places in (e.held, e.line):
                if ticket.member in places:
                    places[ticket.member] = now + LEASE_S
                    return True
            return False

    def leave(self, ticket: Ticket, now: float, held_s: float | None) -> None:
        with self.lock:
            e = self.engines.setdefault(ticket.key, _Engine())
            was_held = e.held.pop(ticket.member, None) is not None
            e.line.pop(ticket.member, None)
            if was_held and held_s is not None:
                e.durations = [held_s, *e.durations][:RECENT_ANSWERS]


def slots_at(url: str) -> int:
    """The answers at once the chat lets ``url`` have: ``CHAT_SLOTS_PER_ENGINE`` for each engine behind
    it (the router's pool: each of ``LAB_ROUTER_ENGINES``; an engine itself: one)."""
    per_engine = int(settings.CHAT_SLOTS_PER_ENGINE)
    routed = bool(settings.LAB_ROUTER) and url.rstrip("/") == vllm_client.chat_url().rstrip("/")
    return per_engine * (len(settings.LAB_ROUTER_ENGINES) if routed else 1)


class Admission:
    """The chat's admission: ``enter`` an answer's ticket (held, waiting in line or refused),
    ``wait`` for its turn, ``keep`` its place while it answers, ``leave`` on every way out."""

    def __init__(self, store: Store | None = None) -> None:
        self.fixed = store  # a test's store; else chosen per call from the settings (``store``)
        self.local = LocalStore()
        self.shared: dict[str, RedisStore] = {}  # one client (and its connection pool) per Redis address
        self.nudges: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    # --- where the places are counted -----------------------------------------------------------

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """One step on the store: Redis when one is named, else (or while it is unreachable) this process's."""
        if self.fixed is not None:
            return getattr(self.fixed, name)(*args, **kwargs)
        url = str(settings.CHAT_ADMISSION_REDIS_URL or "")
        if url:
            try:
                if url not in self.shared:
                    self.shared[url] = RedisStore(url)
                return getattr(self.shared[url], name)(*args, **kwargs)
            except redis.RedisError as exc:
                log.warning(
                    "chat admission: Redis at %s unreachable (%s: %s); counting in this process only meanwhile",
                    addresses.shown(url), type(exc).__name__, exc,
                )  # fmt: skip
        return getattr(self.local, name)(*args, **kwargs)

    async def _off_loop(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.fixed is not None or not settings.CHAT_ADMISSION_REDIS_URL:
            return self._call(name, *args, **kwargs)  # in memory: no I/O to keep off the loop
        return await asyncio.to_thread(self._call, name, *args, **kwargs)

    # --- the steps ------------------------------------------------------------------------------

    def ticket(self, url: str, user: int) -> Ticket:
        return Ticket(key=url.rstrip("/"), user=user, slots=slots_at(url))

    async def enter(self, ticket: Ticket) -> Place:
        """Take a slot, or a place in the line, or be refused (nothing kept)."""
        line = await self._step(ticket)
        place = self.place(ticket, line)
        if place.state == "refused" and line.state == "waiting":
            await self.leave(ticket, None)  # in line, but the wait is over the limit: out at once
        return place

    async def _step(self, ticket: Ticket) -> Line:
        """The ticket's turn in the store now: held, in line, or refused, under the configured limits."""
        line: Line = await self._off_loop(
            "step",
            ticket,
            clock(),
            line_max=int(settings.CHAT_LINE_MAX),
            per_user=int(settings.CHAT_MAX_CONCURRENT_PER_USER),
        )
        return line

    def place(self, ticket: Ticket, line: Line) -> Place:
        """What ``line`` means for the learner: the expected wait, and a refusal with its retry time."""
        slots = ticket.slots
        each = statistics.median(line.durations) if line.durations else None
        pace = None if each is None else each / slots  # seconds between two starts, the line's pace
        if line.state == "held":
            return Place("held", slots=slots)
        if line.state == "mine":
            return Place("refused", reason="mine", slots=slots)
        if line.state == "full":
            over = line.waiting - int(settings.CHAT_LINE_MAX) + 1  # places the line must move
            return Place("refused", reason="full", retry_s=_whole(over * (pace or UNKNOWN_PACE_S)), slots=slots)
        wait_s = None if pace is None else line.position * pace
        most = float(settings.CHAT_WAIT_MAX_S)
        if wait_s is not None and wait_s > most:
            return Place("refused", reason="slow", wait_s=wait_s, retry_s=_whole(wait_s - most), slots=slots)
        return Place("waiting", position=line.position, wait_s=wait_s, slots=slots)

    async def wait(self, ticket: Ticket, place: Place, on_place: Callable[[Place], Awaitable[None]]) -> Place:
        """Wait in the line from ``place`` until the ticket holds a slot (or is refused: its lease was
        lost and the line is full now), calling ``on_place`` with each new position or wait. Cancel
        it to leave the line (then ``leave``)."""
        told: tuple[int, int | None] | None = None
        loop = asyncio.get_running_loop()
        nudge = asyncio.Event()
        waiters = self.nudges.setdefault(ticket.key, set())
        waiters.add((loop, nudge))
        try:
            while place.state == "waiting":
                shown = (place.position, None if place.wait_s is None else round(place.wait_s))
                if shown != told:
                    told = shown
                    await on_place(place)
                nudge.clear()
                try:
                    await asyncio.wait_for(nudge.wait(), POLL_S)
                except TimeoutError:
                    pass
                line = await self._step(ticket)
                place = self.place(ticket, line)
                if place.state == "refused" and place.reason == "slow":
                    place = Place("waiting", line.position, place.wait_s, slots=place.slots)  # in line already
            return place
        finally:
            waiters.discard((loop, nudge))

    async def keep(self, ticket: Ticket) -> None:
        """Renew the ticket's lease every ``RENEW_S`` while its answer runs (cancel it when the answer ends)."""
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                await self._off_loop("renew", ticket, clock())
            except Exception as exc:  # a renewal missed: the place lasts until its lease ends
                log.warning("chat admission: could not renew %s (%s)", ticket.member, exc)

    async def leave(self, ticket: Ticket, held_s: float | None) -> None:
        """Give the place back (held or waiting; ``held_s``: how long the answer held its slot, counted
        into the engine's recent times), and tell this process's waiting asks at once."""
        try:
            await self._off_loop("leave", ticket, clock(), held_s)
        except Exception as exc:  # its lease ends it within LEASE_S
            log.warning("chat admission: could not give back %s (%s)", ticket.member, exc)
        for loop, nudge in list(self.nudges.get(ticket.key, ())):
            loop.call_soon_threadsafe(nudge.set)


UNKNOWN_PACE_S = 10.0  # a full line's retry time before any answer was timed on the engine: a guess, said as one


def _whole(seconds: float) -> int:
    return max(1, math.ceil(seconds))


gate = Admission()  # the chat's one admission, shared by every socket of this process
