"""Every rate limit of sign-up and joining, in one place: sliding logs in Django's cache.

django-axes counts failed sign-ins only. Three more limits live here, each a ``Limit``
(at most ``count`` events within ``window_s`` for one key; the events' times are a sliding
log in the default cache, one per web process; the address is the one axes locks sign-ins by):

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

A slot is taken (checked and counted under one lock) only for a form that is otherwise valid,
just before the rows are made, so a burst in one process cannot slip past its count.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from axes.helpers import get_client_ip_address
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils.translation import gettext as _

from labapp.models import Classroom

clock = time.time  # a test replaces it with a scripted clock
_taking = threading.Lock()  # check-and-count is one step for the threads of a process


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

    def _key(self, who: str) -> str:
        return f"{self.name}:{who}"

    def _recent(self, who: str, now: float) -> list[float]:
        return [t for t in cache.get(self._key(who), []) if now - t < self.window_s]

    def wait_s(self, who: str) -> int:
        """Seconds until ``who`` may have one more event; 0 when it may now."""
        now = clock()
        recent = self._recent(who, now)
        if len(recent) < self.count:
            return 0
        return max(1, math.ceil(recent[-self.count] + self.window_s - now))

    def record(self, who: str) -> None:
        now = clock()
        kept = self._recent(who, now)[-self.count :]
        cache.set(self._key(who), [*kept, now], timeout=math.ceil(self.window_s))


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
    who = address(request)
    with _taking:
        if wait_s := SIGNUPS_PER_ADDRESS.wait_s(who):
            minutes = max(1, math.ceil(wait_s / 60))
            return _(
                "이 네트워크 주소에서 새 계정이 너무 많이 만들어졌습니다 (한 시간에 %(limit)d개까지). "
                "%(minutes)d분 뒤에 다시 가입해 주세요. 적은 내용은 남아 있으니 비밀번호만 다시 적으면 됩니다."
            ) % {"limit": SIGNUPS_PER_ADDRESS.count, "minutes": minutes}
        if refusal := _class_full_refusal(classroom, signing_up=True):
            return refusal
        SIGNUPS_PER_ADDRESS.record(who)
        JOINS_PER_CLASS.record(str(classroom.pk))
    return None


def join_refusal(classroom: Classroom) -> str | None:
    """Take one new member for ``classroom`` (an existing account joining), or say why not (nothing taken)."""
    with _taking:
        if refusal := _class_full_refusal(classroom, signing_up=False):
            return refusal
        JOINS_PER_CLASS.record(str(classroom.pk))
    return None


def _class_full_refusal(classroom: Classroom, *, signing_up: bool) -> str | None:
    if not (wait_s := JOINS_PER_CLASS.wait_s(str(classroom.pk))):
        return None
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
