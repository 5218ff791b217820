"""The chat admission (rag/admission.py): slots per engine, the line in arrival order, refusals with a
retry time, places given back on every way out, leases that end; in this process's store (the unit
tests) and in a real Redis shared by two admissions, as two web processes share it (integration).
The socket's side (queued frames, cancel, refused) is in test_chat.py's admission tests."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis

from labapp.ops import scripted
from rag import admission, answer_guard
from rag.admission import Admission, LocalStore, Place, RedisStore, Ticket
from tests import aio


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    scripted = Clock()
    monkeypatch.setattr(admission, "clock", scripted)
    return scripted


@pytest.fixture
def limits(settings: Any) -> Any:
    settings.CHAT_SLOTS_PER_ENGINE = 2
    settings.CHAT_LINE_MAX = 3
    settings.CHAT_WAIT_MAX_S = 60
    settings.CHAT_MAX_CONCURRENT_PER_USER = 2
    settings.LAB_ROUTER = False
    return settings


def _tickets(gate: Admission, key: str, users: list[int]) -> list[Ticket]:
    return [Ticket(key=key, user=u, slots=2) for u in users]


def _enter(gate: Admission, ticket: Ticket) -> Place:
    return aio.run(gate.enter(ticket))


def _admission_behaves(one: Admission, two: Admission, clock: Clock) -> None:
    """The same rules whichever admission (process) a learner's socket is on: ``one`` and ``two``
    count the same places when they share a store."""
    key = f"http://engine-{uuid.uuid4().hex}:8000"  # a store shared with other tests: keys of this test's own
    a, b, c, d, e, f = _tickets(one, key, [1, 2, 3, 4, 5, 6])
    # Two slots: the first two answers start at once, whichever process they came through.
    assert _enter(one, a).state == "held"
    assert _enter(two, b).state == "held"
    # Then the line, in arrival order, with positions; no answer timed yet: the wait is unknown.
    assert _enter(one, c) == Place("waiting", position=1, slots=2)
    assert _enter(two, d) == Place("waiting", position=2, slots=2)
    assert _enter(one, e) == Place("waiting", position=3, slots=2)
    # The line is full (3): refused at once, with a retry time (a guess until an answer was timed).
    full = _enter(two, f)
    assert (full.state, full.reason, full.retry_s) == ("refused", "full", 10)
    # An answer that held its slot 10 s leaves: the first in line (not a later one) takes the slot.
    aio.run(one.leave(a, 10.0))
    assert _enter(two, d).state == "waiting"  # still behind c
    assert _enter(one, c).state == "held"
    assert _enter(two, d) == Place("waiting", position=1, wait_s=5.0, slots=2)  # 1 × 10 s ÷ 2 slots
    # A learner holds at most CHAT_MAX_CONCURRENT_PER_USER places (answering and waiting together).
    mine = Ticket(key=key, user=4, slots=2)
    assert _enter(one, mine).state == "waiting"  # user 4's second place
    third = _enter(two, Ticket(key=key, user=4, slots=2))
    assert (third.state, third.reason, third.retry_s) == ("refused", "mine", None)
    aio.run(two.leave(mine, None))  # cancelled while waiting: its place is free again
    # The lease: b's process died (nobody renews it); after LEASE_S its slot is back, d takes it.
    clock.now += admission.LEASE_S / 2
    for alive in (c, d, e):
        _enter(one, alive)  # c answers (renews), d and e look at the line (renew)
    clock.now += admission.LEASE_S / 2 + 1
    assert _enter(two, d).state == "held"
    assert _enter(one, e) == Place("waiting", position=1, wait_s=5.0, slots=2)
    # Every place given back: the engine is free again, and new answers start at once.
    for gone in (c, d, e):
        aio.run(one.leave(gone, 20.0))
    assert _enter(two, f).state == "held"
    assert _enter(one, Ticket(key=key, user=7, slots=2)).state == "held"


def test_the_admission_gives_slots_then_a_line_in_order_refuses_and_takes_places_back(
    limits: Any, clock: Clock
) -> None:
    store = LocalStore()
    _admission_behaves(Admission(store), Admission(store), clock)


def test_a_wait_over_the_limit_is_refused_at_once_with_a_retry_time_and_leaves_no_place(
    limits: Any, clock: Clock
) -> None:
    store = LocalStore()
    gate = Admission(store)
    limits.CHAT_LINE_MAX = 100
    limits.CHAT_WAIT_MAX_S = 25
    key = "http://e:8000"
    holders = _tickets(gate, key, [1, 2])
    for t in holders:
        assert _enter(gate, t).state == "held"
    aio.run(gate.leave(holders[0], 20.0))  # the engine's answers take 20 s: the line moves one every 10 s
    assert _enter(gate, holders[0]).state == "held"
    waits = [_enter(gate, t) for t in _tickets(gate, key, [3, 4])]
    assert [(p.position, p.wait_s) for p in waits] == [(1, 10.0), (2, 20.0)]
    slow = _enter(gate, Ticket(key=key, user=5, slots=2))  # third in line: 30 s > 25 s
    assert (slow.state, slow.reason, slow.wait_s, slow.retry_s) == ("refused", "slow", 30.0, 5)
    assert len(store.engines[key].line) == 2, "the refused ask kept its place in line"


def test_slots_are_per_engine_and_the_routers_pool_counts_each_of_its_engines(settings: Any) -> None:
    settings.CHAT_SLOTS_PER_ENGINE = 3
    settings.LAB_ROUTER = False
    assert admission.slots_at(settings.VLLM_BASE_URL) == 3
    settings.LAB_ROUTER = True
    settings.LAB_ROUTER_ENGINES = ["http://a:8000", "http://b:8000"]
    assert admission.slots_at(settings.ROUTER_URL) == 6
    assert admission.slots_at("http://registered:9000") == 3


def test_a_waiting_ask_hears_each_new_position_and_starts_as_soon_as_a_slot_of_its_process_frees(
    limits: Any, clock: Clock
) -> None:
    gate = Admission(LocalStore())
    key = "http://e:8000"
    a, b, c, d = _tickets(gate, key, [1, 2, 3, 4])

    async def go() -> list[Any]:
        told: list[Any] = []
        for t in (a, b):
            await gate.enter(t)
        first, second = await gate.enter(c), await gate.enter(d)

        async def heard(place: Place) -> None:
            told.append(place.position)

        waiting = asyncio.ensure_future(gate.wait(d, second, heard))
        await asyncio.sleep(0.01)
        await gate.leave(a, 4.0)
        assert (await gate.enter(c)).state == "held"  # c's look at the line: first in line, it takes the slot
        await asyncio.sleep(admission.POLL_S * 2)
        assert not waiting.done()
        started = asyncio.get_running_loop().time()
        await gate.leave(b, 4.0)  # d's turn: at once, not at the next poll
        place = await waiting
        told.append((place.state, asyncio.get_running_loop().time() - started < admission.POLL_S / 2))
        assert first.position == 1
        return told

    assert aio.run(go()) == [2, 1, ("held", True)]


def test_with_redis_named_but_unreachable_the_chat_is_admitted_counting_in_the_process(
    limits: Any, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    limits.CHAT_ADMISSION_REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    gate = Admission()
    assert _enter(gate, Ticket(key="http://e:8000", user=1, slots=2)).state == "held"
    assert gate.local.engines["http://e:8000"].held
    assert "chat admission: Redis at redis://127.0.0.1:9/0 unreachable" in caplog.text


def test_two_web_processes_share_one_count_in_redis(redis_server: str, limits: Any, clock: Clock) -> None:
    """Two admissions, each with its own Redis client (two Daphne processes as far as Redis can tell),
    count the same places: the rules above hold across them."""
    _admission_behaves(Admission(RedisStore(redis_server)), Admission(RedisStore(redis_server)), clock)


@pytest.mark.parametrize("make", [LocalStore, RedisStore], ids=["process", "redis"])
def test_a_place_renewed_lasts_another_lease_and_one_gone_is_not_renewed(
    make: Any, redis_server: str, limits: Any
) -> None:
    """Renewing is what keeps an answering (or waiting) place while its answer runs. Redis's renew script
    named a variable ``until``, a Lua keyword: it never compiled, and the first renewal of every answer
    sent every web process back to counting alone ("counting in this process only")."""
    store = make(redis_server) if make is RedisStore else make()
    key = f"http://engine-{uuid.uuid4().hex}:8000"
    held, waiting, gone = (Ticket(key=key, user=u, slots=1) for u in (1, 2, 3))
    assert store.step(held, 100.0, line_max=3, per_user=2).state == "held"
    assert store.step(waiting, 100.0, line_max=3, per_user=2).state == "waiting"
    later = 100.0 + admission.LEASE_S - 1
    assert store.renew(held, later) and store.renew(waiting, later)
    assert not store.renew(gone, later)
    # Renewed, both outlive their first lease: the holder keeps its slot, the next in line its place.
    after = 100.0 + admission.LEASE_S + 1
    assert store.step(held, after, line_max=3, per_user=2).state == "held"
    assert store.step(waiting, after, line_max=3, per_user=2).position == 1


def test_the_admission_named_redis_by_the_settings_counts_there(redis_server: str, limits: Any, clock: Clock) -> None:
    limits.CHAT_ADMISSION_REDIS_URL = redis_server
    one, two = Admission(), Admission()
    key = f"http://engine-{uuid.uuid4().hex}:8000"
    a, b, c = _tickets(one, key, [1, 2, 3])
    assert [_enter(one, a).state, _enter(two, b).state] == ["held", "held"]
    assert _enter(one, c) == Place("waiting", position=1, slots=2)
    held = redis.Redis.from_url(redis_server).zcard(f"lab:chat-admission:{key}:held")
    assert held == 2 and not one.local.engines, "the places were not counted in Redis"


def test_the_long_answers_the_admission_tests_script_last_their_whole_length_through_the_repeat_guard() -> None:
    """The socket and browser tests hold an engine's one slot with a scripted answer of many pieces.
    Counted pieces (" 조각0 조각1 …") the repeat guard cuts after six as a base model's counted loop:
    the first answer then gave its slot back within half a second, and the second learner was
    answered at once instead of waiting in line. ``plain_words`` are never cut."""
    counted = "".join(f" 조각{n}" for n in range(6))
    assert answer_guard.repeat_cut(counted) is not None
    pieces = scripted.plain_words(200)
    assert len(set(pieces)) == len(pieces)
    text = ""
    for piece in pieces:
        text += piece
        assert answer_guard.repeat_cut(text) is None, f"cut at {text!r}"
