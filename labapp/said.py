"""Texts stored now and said later, in the reader's language: the one owner of that idea.

A lab's checks are sentences made with gettext and numbers ("프리필 %(p).0f tok/s …"); a job's,
a document's or an answer's error is one too ("요청 %(count)d개가 실패했습니다: %(reasons)s"), and
so is why an engine did not answer its probe. They are kept (a hand-in, a row, the cache) and read
later by someone else, who must read them in their own language, whoever made them in whatever
language. ``gettext`` here returns a ``Said``: the translated string, which is what every caller
sees, that also remembers how it was made (msgid and values, and the pieces it was joined from).

- ``stored`` turns it into JSON (``{"said": [pieces]}``); ``render`` says it again in the active
  language. A plain string (an older hand-in, text that is only numbers) stays as it is.
- ``kept`` is what a row or a cache keeps of such a text: that form without an address's
  credentials, and the text as the site says it (logs, the admin); ``shown`` reads it back.
- ``KeepsError`` gives a model with ``error`` and a JSON field for its form the one way to save an
  error (``error_fields``) and to read it (``error_shown``). Every place that saves one is walked, in
  Korean and in English, by ``tests/site/test_saved_texts.py``, which also fails on a new place
  that writes an error field some other way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _gettext

from labapp import addresses

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


def exception(exc: BaseException) -> str:
    """``exc`` as part of a text to keep: its class and message, the message still ours (its msgid
    and values) when it was made with ``gettext``."""
    return type(exc).__name__ + ": " + str(exc)


KEPT_CHARS = 2000  # the most of a text a row keeps as written


@dataclass(frozen=True)
class Kept:
    """What is kept of a text: ``form``, ``stored``'s form to say it again ({} for a text that is not
    ours: an older row's), and ``text``, as the site says it (``LANGUAGE_CODE``: logs, the admin), at
    most ``KEPT_CHARS`` characters. Neither holds an address's credentials (an engine's error names it)."""

    text: str
    form: dict[str, Any]


def kept(text: str) -> Kept:
    """What to keep of ``text``, made with ``gettext`` (``_("…%(why)s") % {"why": …}``, joined or not)."""
    form = stored(text)
    if not isinstance(form, dict):
        return Kept(addresses.scrubbed(form)[:KEPT_CHARS], {})
    form = addresses.scrubbed_data(form)
    with translation.override(settings.LANGUAGE_CODE):
        return Kept(addresses.scrubbed(render(form))[:KEPT_CHARS], form)


def shown(text: str, form: Any) -> str:
    """A kept text in the active language (``text`` as written when there is no form: a row kept
    before forms were), without an address's credentials (a row saved before they were scrubbed)."""
    return addresses.scrubbed(render(form) if form else text or "")


class KeepsError:
    """A model whose ``error`` (a TextField) is said in each reader's language: the JSON field named
    ``error_form_field`` keeps its form. ``error_fields`` is how such a row's error is saved
    (``Model.objects.filter(…).update(**Model.error_fields(text))``), ``error_shown`` how it is read."""

    error_form_field: ClassVar[str]
    error: str

    @classmethod
    def error_fields(cls, text: str = "") -> dict[str, Any]:
        """The row's fields for ``text``; without one, the fields of no error."""
        made = kept(text)
        return {"error": made.text, cls.error_form_field: made.form}

    @property
    def error_shown(self) -> str:
        return shown(self.error, getattr(self, self.error_form_field))
