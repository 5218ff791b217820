"""Whole numbers read from a request: a query string, a form field, a websocket frame, a collection name.

One parser for all of them. ``str.isdigit()`` is true for "²" and "٣", which ``int()`` then
refuses or reads, and ``int()`` of 5 000 digits raises; a number past a 64-bit column overflows
the database. ``whole`` accepts only ASCII digits, at most 18 of them, within the bounds given, and
answers None for anything else, so a caller treats a bad number as absent, never as an error page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_DIGITS = 18  # below 2**63: every id and count column holds it
_WHOLE = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}")


def whole(value: object, *, low: int = 0, high: int = 10**MAX_DIGITS - 1) -> int | None:
    """``value`` as an int when it is a whole number written in ASCII digits within [low, high]."""
    if isinstance(value, bool) or value is None:
        return None
    text = str(value).strip()
    if not _WHOLE.fullmatch(text):
        return None
    number = int(text)
    return number if low <= number <= high else None


def wholes(values: Iterable[object], *, low: int = 0, high: int = 10**MAX_DIGITS - 1) -> list[int]:
    """The values that are whole numbers within [low, high] (``whole``), in order; the rest left out."""
    return [n for n in (whole(v, low=low, high=high) for v in values) if n is not None]
