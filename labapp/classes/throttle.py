"""Every rate limit of sign-up and joining, in one place: sliding logs shared by every web process.

django-axes counts failed sign-ins only (in the database). Three more limits live here, each a
``Limit`` (at most ``count`` events within ``window_s`` for one key; the address is the one
axes locks sign-ins by):

- wrong join codes per address (``JOIN_CODE_FAILURE_LIMIT`` per ``JOIN_CODE_FAILURE_WINDOW_S``):
  a visitor guessing codes is stopped; past the limit every sign-up or join from that address
  is refused (nothing is checked or made) until the oldest failure leaves the window;
- new accounts per address (``SIGNUPS_PER_ADDRESS_PER_HOUR``): one valid code cannot become
  an unbounded number of accounts, each with its own per-account limits. A whole class may sit
  behind one NAT address (a campus network), so the default (400) lets a class of 300 sign up
  in one lecture; an operator whose learners come from their own addresses can lower it;
- new members per class (``JOINS_PER_CLASS_PER_MINUTE``, sign-ups and joins by existing
  accounts alike): however many addresses a code leaks to, a class grows by at most that many
  a minute. The default (120) lets 300 learners in within three minutes of the code going up;
  a refused learner reads how many seconds to wait.

The events' times are kept where every web process counts them together: in Redis
(``SIGNUP_LIMITS_REDIS_URL``, the stack's ``REDIS_URL``), one sorted set per key, checked and
counted by one Lua script, which Redis runs as one step whichever process sends it; so N web
processes allow what one does. Without that setting (the unit tests) the times are kept in
Django's default cache, one per process, checked and counted under a lock. With Redis set but
unreachable, sign-up keeps working: the limits are counted in the process's cache meanwhile and
each miss logs a warning naming Redis.

A slot is taken (checked and counted in one step) only for a form that is otherwise valid,
just before the rows are made, so a burst cannot slip past its count.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass

import redis
from axes.helpers import get_client_ip_address
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils.translation import gettext as _

from labapp import addresses
from labapp.models import Classroom

log = logging.getLogger(__name__)
clock = time.time  # a test replaces it with a scripted clock
_taking = threading.Lock()  # the local store's check-and-count is one step for the threads of a process
REDIS_TIMEOUT_S = 2.0  # a Redis that does not answer holds a sign-up this long, then the local count serves


@dataclass(frozen=True)
class Limit:
    """At most ``settings.<count_setting>`` events within ``settings.<window_setting>`` seconds per key."""

    name: str
    count_setting: str
    window_setting: str

    @property
    def count(self) -> int:
        return int(getattr(settings, self.count_setting))

    @property
    def window_s(self) -> float:
        return float(getattr(settings, self.window_setting))

    def key(self, who: str) -> str:
        return f"lab-limits:{self.name}:{who}"

    def wait_s(self, who: str) -> int:
        """Seconds until ``who`` may have one more event; 0 when it may now."""
        refused = _run([(self, who)], check=True, add=False)
        return 0 if refused is None else refused[1]

    def record(self, who: str) -> None:
        """Count one event of ``who``, whatever the count already is."""
        _run([(self, who)], check=False, add=True)


def take(*slots: tuple[Limit, str]) -> tuple[Limit, int] | None:
    """One event for each (limit, key) in one step: counted in all of them when none is full,
    else nothing counted and (the first full limit, seconds until it has room)."""
    return _run(list(slots), check=True, add=True)


# Each key a sorted set of event times. KEYS: the keys; ARGV: now, this event's member, check
# (1/0), add (1/0), then each key's count and window (seconds). Returns {0, "0"} when every key has
# room (and, with add, the event is counted in each), else {i, seconds to wait} for the i-th key.
_SLIDING_LOG = """
local now = tonumber(ARGV[1])
local check, add = ARGV[3] == '1', ARGV[4] == '1'
for i, key in ipairs(KEYS) do
  local count, window = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.6f', now - window))
  if check and redis.call('ZCARD', key) >= count then
    local nth = redis.call('ZRANGE', key, -count, -count, 'WITHSCORES')
    return {i, string.format('%.6f', tonumber(nth[2]) + window - now)}
  end
end
if add then
  for i, key in ipairs(KEYS) do
    local count, window = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
    redis.call('ZADD', key, ARGV[1], ARGV[2])
    redis.call('ZREMRANGEBYRANK', key, 0, -(count + 1))
    redis.call('PEXPIRE', key, math.ceil(window * 1000))
  end
end
return {0, '0'}
"""


class RedisLog:
    """The sliding logs in one Redis, shared by every process that names it."""

    def __init__(self, url: str):
        self.client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        self.script = self.client.register_script(_SLIDING_LOG)

    def run(self, slots: list[tuple[Limit, str]], now: float, *, check: bool, add: bool) -> tuple[int, float] | None:
        """(index of the full slot, seconds to wait), or None: every slot had room (and was counted, with ``add``)."""
        sizes = [str(n) for limit, _who in slots for n in (limit.count, limit.window_s)]
        member = f"{now:.6f}:{uuid.uuid4().hex}"
        args = [f"{now:.6f}", member, "1" if check else "0", "1" if add else "0", *sizes]
        index, wait = self.script(keys=[limit.key(who) for limit, who in slots], args=args)
        return None if int(index) == 0 else (int(index) - 1, float(wait))


class LocalLog:
    """The sliding logs in Django's default cache: this process's own count."""

    def run(self, slots: list[tuple[Limit, str]], now: float, *, check: bool, add: bool) -> tuple[int, float] | None:
        with _taking:
            recent = [[t for t in cache.get(limit.key(who), []) if now - t < limit.window_s] for limit, who in slots]
            for index, ((limit, _who), times) in enumerate(zip(slots, recent, strict=True)):
                if check and len(times) >= limit.count:
                    return index, times[-limit.count] + limit.window_s - now
            for (limit, who), times in zip(slots, recent, strict=True) if add else ():
                cache.set(limit.key(who), [*times[-limit.count :], now], timeout=math.ceil(limit.window_s))
        return None


_local = LocalLog()
_shared: dict[str, RedisLog] = {}  # one client (and its connection pool) per Redis address


def _run(slots: list[tuple[Limit, str]], *, check: bool, add: bool) -> tuple[Limit, int] | None:
    refused = _counted(slots, clock(), check=check, add=add)
    if refused is None:
        return None
    index, wait = refused
    return slots[index][0], max(1, math.ceil(wait))


def _counted(slots: list[tuple[Limit, str]], now: float, *, check: bool, add: bool) -> tuple[int, float] | None:
    """In Redis when one is named, else (or while it is unreachable) in this process's cache."""
    url = str(settings.SIGNUP_LIMITS_REDIS_URL or "")
    if url:
        try:
            if url not in _shared:
                _shared[url] = RedisLog(url)
            return _shared[url].run(slots, now, check=check, add=add)
        except redis.RedisError as exc:
            log.warning(
                "sign-up limits: Redis at %s unreachable (%s: %s); counting in this process only meanwhile",
                addresses.shown(url), type(exc).__name__, exc,
            )  # fmt: skip
    return _local.run(slots, now, check=check, add=add)


JOIN_CODE_FAILURES = Limit("join-code-failures", "JOIN_CODE_FAILURE_LIMIT", "JOIN_CODE_FAILURE_WINDOW_S")
SIGNUPS_PER_ADDRESS = Limit("signups-per-address", "SIGNUPS_PER_ADDRESS_PER_HOUR", "SIGNUP_ADDRESS_WINDOW_S")
JOINS_PER_CLASS = Limit("joins-per-class", "JOINS_PER_CLASS_PER_MINUTE", "CLASS_JOIN_WINDOW_S")


def address(request: HttpRequest) -> str:
    return get_client_ip_address(request) or "unknown"


def join_code_wait_s(request: HttpRequest) -> int:
    """Seconds until this address may try a join code again; 0 when it may now."""
    return JOIN_CODE_FAILURES.wait_s(address(request))


def join_code_failed(request: HttpRequest) -> None:
    """Count one wrong (unknown, closed or expired) code from this address."""
    JOIN_CODE_FAILURES.record(address(request))


def join_code_refusal(wait_s: int) -> str:
    minutes = max(1, math.ceil(wait_s / 60))
    return _("가입 코드가 여러 번 틀렸습니다. %(minutes)d분 뒤에 다시 해 보세요.") % {"minutes": minutes}


def signup_refusal(request: HttpRequest, classroom: Classroom) -> str | None:
    """Take one new account for this address and one new member for ``classroom``, or say why not (nothing taken)."""
    refused = take((SIGNUPS_PER_ADDRESS, address(request)), (JOINS_PER_CLASS, str(classroom.pk)))
    if refused is None:
        return None
    limit, wait_s = refused
    if limit is JOINS_PER_CLASS:
        return _class_full_refusal(wait_s, signing_up=True)
    minutes = max(1, math.ceil(wait_s / 60))
    return _(
        "이 네트워크 주소에서 새 계정이 너무 많이 만들어졌습니다 (한 시간에 %(limit)d개까지). "
        "%(minutes)d분 뒤에 다시 가입해 주세요. 적은 내용은 남아 있으니 비밀번호만 다시 적으면 됩니다."
    ) % {"limit": SIGNUPS_PER_ADDRESS.count, "minutes": minutes}


def join_refusal(classroom: Classroom) -> str | None:
    """Take one new member for ``classroom`` (an existing account joining), or say why not (nothing taken)."""
    refused = take((JOINS_PER_CLASS, str(classroom.pk)))
    return None if refused is None else _class_full_refusal(refused[1], signing_up=False)


def _class_full_refusal(wait_s: int, *, signing_up: bool) -> str:
    values = {"limit": JOINS_PER_CLASS.count, "seconds": wait_s}
    if signing_up:
        return (
            _(
                "지금 이 수업에 들어오는 사람이 많습니다 (1분에 %(limit)d명까지). %(seconds)d초 뒤에 다시 해 보세요. "
                "적은 내용은 남아 있으니 비밀번호만 다시 적으면 됩니다."
            )
            % values
        )
    return (
        _("지금 이 수업에 들어오는 사람이 많습니다 (1분에 %(limit)d명까지). %(seconds)d초 뒤에 다시 해 보세요.")
        % values
    )
