"""Wrong join codes are counted per client address: sign-up and joining cannot guess codes.

django-axes counts failed sign-ins only. A join code (8 characters of 31, one per class)
lets anyone with it make an account in that class, so a visitor trying codes is stopped
too: after ``JOIN_CODE_FAILURE_LIMIT`` wrong codes within ``JOIN_CODE_FAILURE_WINDOW_S``
from one address, every sign-up or join from it is refused (nothing is checked or made)
until the oldest of those failures is out of the window. The failures' times are a
sliding log in Django's cache (the default cache: one per web process); the address is
the one axes locks sign-ins by.
"""

from __future__ import annotations

import math
import time

from axes.helpers import get_client_ip_address
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils.translation import gettext as _

clock = time.time  # a test replaces it with a scripted clock


def _key(request: HttpRequest) -> str:
    return f"join-code-failures:{get_client_ip_address(request) or 'unknown'}"


def _recent(request: HttpRequest, now: float) -> list[float]:
    window = float(settings.JOIN_CODE_FAILURE_WINDOW_S)
    return [t for t in cache.get(_key(request), []) if now - t < window]


def join_code_wait_s(request: HttpRequest) -> int:
    """Seconds until this address may try a join code again; 0 when it may now."""
    now = clock()
    recent = _recent(request, now)
    limit = int(settings.JOIN_CODE_FAILURE_LIMIT)
    if len(recent) < limit:
        return 0
    return max(1, math.ceil(recent[-limit] + float(settings.JOIN_CODE_FAILURE_WINDOW_S) - now))


def join_code_failed(request: HttpRequest) -> None:
    """Count one wrong (unknown, closed or expired) code from this address."""
    now = clock()
    kept = _recent(request, now)[-int(settings.JOIN_CODE_FAILURE_LIMIT) :]
    cache.set(_key(request), [*kept, now], timeout=int(settings.JOIN_CODE_FAILURE_WINDOW_S))


def join_code_refusal(wait_s: int) -> str:
    minutes = max(1, math.ceil(wait_s / 60))
    return _("가입 코드가 여러 번 틀렸습니다. %(minutes)d분 뒤에 다시 해 보세요.") % {"minutes": minutes}
