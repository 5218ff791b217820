"""labapp.said: a text made with gettext is stored as msgids and values and said again in the reader's language."""

from __future__ import annotations

import copy
import json
import pickle

from django.utils import translation

from labapp import said


def _made_in_korean() -> str:
    with translation.override("ko"):
        why = said.gettext("잰 칸이 없음")
        text = said.gettext("해당 없음: %(why)s") % {"why": why}
        text += " · " + said.join(", ", [said.gettext("%(size)s자: %(slope).2f ms/토큰") % {"size": 500, "slope": 1.5}])
        return text


def test_a_text_is_the_translated_string_and_renders_again_in_each_language() -> None:
    text = _made_in_korean()
    assert text == "해당 없음: 잰 칸이 없음 · 500자: 1.50 ms/토큰"  # what every caller sees
    kept = json.loads(json.dumps(said.stored(text)))
    with translation.override("en"):
        english = said.render(kept)
    assert english == "not applicable: No cells measured · 500 chars: 1.50 ms/token", english
    assert "500 chars: 1.50 ms/token" in english and " · " in english, english
    with translation.override("ko"):
        assert said.render(kept) == text


def test_str_copy_and_pickle_keep_what_a_text_remembers() -> None:
    text = _made_in_korean()
    for kept in (str(text), copy.deepcopy(text), pickle.loads(pickle.dumps(text))):  # noqa: S301 - our own bytes
        assert isinstance(kept, said.Said) and kept == text and said.stored(kept) == said.stored(text)


def test_plain_strings_and_older_hand_ins_stay_as_they_were() -> None:
    assert said.stored("1408 → 3192 ms") == "1408 → 3192 ms"
    assert said.render("실패 없음") == "실패 없음" and said.render(None) == ""
    with translation.override("en"):  # a msgid the catalogue no longer has: the Korean, with its values
        assert said.render({"said": [["%(n)d칸 %(m)s", {"n": 2, "m": "x"}]]}) == "2칸 x"
