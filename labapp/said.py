"""Texts that can be said again in another language.

A lab's checks are sentences made with gettext and numbers ("프리필 %(p).0f tok/s …"). A hand-in
keeps them, and an English reader must read them in English, whoever handed in and in whatever
language. ``gettext`` here returns a ``Said``: the translated string, which is what every caller
sees, that also remembers how it was made (msgid and values, and the pieces it was joined from).
``stored`` turns it into JSON for the database; ``render`` says the stored text again in the
active language. A plain string (an older hand-in, or text that is only numbers) stays as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.translation import gettext as _gettext

# A piece of a text: literal text, or [msgid, values] (values None: the msgid alone, not formatted).
Piece = str | tuple[str, Any]


class Said(str):
    """A translated string that remembers its msgid, its values and the pieces it was joined from."""

    pieces: tuple[Piece, ...]

    def __new__(cls, text: str, pieces: tuple[Piece, ...]) -> Said:
        made = super().__new__(cls, text)
        made.pieces = pieces
        return made

    def __getnewargs__(self) -> tuple[str, tuple[Piece, ...]]:  # type: ignore[override]  # copy and pickle
        return str.__str__(self), self.pieces

    def __str__(self) -> Said:  # str(said) keeps what it remembers (``not_applicable`` calls str())
        return self

    def __mod__(self, values: Any) -> Said:
        only = self.pieces[0] if len(self.pieces) == 1 else None
        formatted = str.__mod__(self, values)
        if not isinstance(only, tuple) or only[1] is not None:
            return Said(formatted, (formatted,))  # formatting a formatted text: keep the result
        return Said(formatted, ((only[0], values),))

    def __add__(self, other: str) -> Said:
        return Said(str.__add__(self, other), self.pieces + _pieces(other))

    def __radd__(self, other: str) -> Said:
        return Said(str.__add__(other, self), _pieces(other) + self.pieces)


def gettext(msgid: str) -> str:
    """``django.utils.translation.gettext`` that remembers the msgid (typed ``str``: callers need no more)."""
    return Said(_gettext(msgid), ((msgid, None),))


def join(separator: str, texts: Iterable[str]) -> str:
    """``separator.join(texts)`` keeping each text's pieces."""
    joined = Said("", ())
    for index, text in enumerate(texts):
        joined = joined + separator + text if index else joined + text
    return joined


def _pieces(text: str) -> tuple[Piece, ...]:
    return text.pieces if isinstance(text, Said) else (str(text),)


def _stored_value(value: Any) -> Any:
    if isinstance(value, Said):
        return stored(value)
    if isinstance(value, Mapping):
        return {str(k): _stored_value(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_stored_value(v) for v in value]
    return value if isinstance(value, int | float | bool | type(None)) else str(value)


def stored(text: str) -> Any:
    """What the database keeps: ``{"said": [pieces]}`` for a Said, the string itself otherwise."""
    if not isinstance(text, Said):
        return str(text)
    pieces = [p if isinstance(p, str) else [p[0], _stored_value(p[1])] for p in text.pieces]
    return {"said": pieces}


def _rendered_value(value: Any) -> Any:
    if isinstance(value, dict) and "said" in value:
        return render(value)
    if isinstance(value, dict):
        return {k: _rendered_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_rendered_value(v) for v in value)
    return value


def _rendered_piece(piece: Any) -> str:
    if isinstance(piece, str):
        return piece
    msgid, values = piece
    if values is None:
        return _gettext(msgid)
    values = _rendered_value(values)
    try:
        return str(_gettext(msgid) % values)
    except (KeyError, TypeError, ValueError):  # a translation whose placeholders do not match: the original
        return str(str(msgid) % values)


def render(value: Any) -> str:
    """A stored text in the active language (a plain string comes back as it was)."""
    if isinstance(value, dict) and isinstance(value.get("said"), list):
        return "".join(_rendered_piece(piece) for piece in value["said"])
    return "" if value is None else str(value)
