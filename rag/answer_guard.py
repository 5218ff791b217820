"""The repeated-line guard: where a streamed answer starts saying again what it already said.

A base model (the packaged Gemma 3 270M) often echoes the question or loops until
``max_tokens``; the stop strings end the loops that restart the prompt template, this
guard the ones that do not. Pure: the chat calls ``repeat_cut`` on the text so far after
every streamed piece and cancels the request at the first verdict.

Four signs, in this order (``repeat_cut``; ``check`` and ``stop_at`` are the chat's hook):

- ``echo``: a finished line or sentence is the question itself;
- ``line``: a finished line or sentence says again what an earlier one said;
- ``loop``: the text ends in the same run of characters three times over (a loop with
  no line or sentence end, e.g. "첫 토큰이 늦게 뜬 경우 첫 토큰이 늦게 뜬 경우 …");
- ``pattern``: the text ends in the same run of words over and over once digits and
  punctuation are set aside, e.g. "# 1. 15 # 2. 15 # 3. 15 …" or "1. KV 캐시 2. KV 캐시 …":
  a base model counting up its own loop, which no exact comparison ever sees twice.
  A numbered list says something new in each item, so its words differ; a table of
  measurements differs in more than a counter, so only runs whose numbers change in
  one place, or only as counters (1, 2, 3 …), count.

Lines and sentences are compared without spaces, punctuation or a leading template
label ("답변:", "Answer:"), so "답변: 15일입니다." repeats "15일입니다".
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Literal

from labapp.said import gettext as _  # its notice is saved with the answer and said again per reader
from rag.vllm.records import RequestRecord

Why = Literal["echo", "line", "loop", "pattern"]
MIN_UNIT_CHARS = 4  # shorter units ("네.", "1.") repeat in honest answers
LOOP_TIMES = 3
LOOP_MIN_CHARS = 4
LOOP_MAX_CHARS = 200
PATTERN_MAX_WORDS = 40  # the longest run of words looked for
# A run with words of its own ("KV 캐시") is a loop the third time; one of digits and marks alone
# ("# 1. 15") the fifth, and over at least 8 words: "1, 2, 3" or "| 1 | 2 |" may be honest.
PATTERN_TIMES = 3
PATTERN_TIMES_BARE = 5
PATTERN_MIN_WORDS_BARE = 8

# A unit ends at a line break or at sentence punctuation followed by a space or the end.
_UNIT_END = re.compile(r"\n+|(?<=[.?!。？！])(?=\s)")
_LABEL = re.compile(r"^\s*(?:답변|답|질문|answer|question)\s*[:：]", re.IGNORECASE)
_NOISE = re.compile(r"[\W_]+")
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Cut:
    """Where to stop: the answer to keep and why the rest is dropped."""

    keep: str
    dropped: str
    why: Why


def _key(unit: str) -> str:
    """A unit's comparison key: no leading label, no spaces or punctuation, lower case."""
    return _NOISE.sub("", _LABEL.sub("", unit)).lower()


def _finished_units(text: str) -> list[tuple[int, str]]:
    """(start offset, text) of each line or sentence that has ended; the unfinished tail is left out."""
    units: list[tuple[int, str]] = []
    start = 0
    for end in _UNIT_END.finditer(text):
        units.append((start, text[start : end.start()]))
        start = end.end()
    return units


def _loop(text: str) -> Cut | None:
    """The text ends in one run of characters ``LOOP_TIMES`` times over: keep its first time."""
    longest = min(LOOP_MAX_CHARS, len(text) // LOOP_TIMES)
    for period in range(LOOP_MIN_CHARS, longest + 1):
        run = text[-period:]
        if len(_key(run)) < MIN_UNIT_CHARS:
            continue
        if all(text[-period * (n + 1) : len(text) - period * n] == run for n in range(1, LOOP_TIMES)):
            cut = len(text) - period * (LOOP_TIMES - 1)
            return Cut(text[:cut].rstrip(), text[cut:], "loop")
    return None


def _word_key(word: str) -> str:
    """A word's comparison key: digits as one "0", no punctuation (a word of marks alone is its marks)."""
    counted = _DIGITS.sub("0", word.lower())
    return _NOISE.sub("", counted) or counted


def _counts_up(values: list[int]) -> bool:
    """Whether ``values`` go up or down by one fixed step, as a loop's counter does."""
    steps = {b - a for a, b in itertools.pairwise(values)}
    return len(steps) == 1 and 0 not in steps


def _numbers_loop(numbers: list[list[tuple[str, ...]]]) -> bool:
    """Whether the numbers of the repeats (per repeat, per word) change as a loop's do: in one place
    at most, or only as counters."""
    changing = []
    for per_word in zip(*numbers, strict=False):
        for per_place in zip(*per_word, strict=False):
            if len(set(per_place)) > 1:
                changing.append([int(n) for n in per_place])
    return len(changing) <= 1 or all(_counts_up(values) for values in changing)


def _pattern(text: str) -> Cut | None:
    """The text ends in one run of words said again and again, digits and punctuation aside: keep
    its first time."""
    words = list(_WORD.finditer(text))
    keys = [_word_key(w.group()) for w in words]
    for size in range(1, min(PATTERN_MAX_WORDS, len(keys) // PATTERN_TIMES) + 1):
        run = keys[-size:]
        times = 1
        while len(keys) >= size * (times + 1) and keys[-size * (times + 1) : -size * times] == run:
            times += 1
        bare = len(_DIGITS.sub("", "".join(run))) < MIN_UNIT_CHARS
        needed = max(PATTERN_TIMES_BARE, -(-PATTERN_MIN_WORDS_BARE // size)) if bare else PATTERN_TIMES
        if times < needed:
            continue
        first = len(words) - size * times
        numbers = [
            [tuple(_DIGITS.findall(w.group())) for w in words[first + size * n : first + size * (n + 1)]]
            for n in range(times)
        ]
        if _numbers_loop(numbers):
            cut = words[first + size - 1].end()
            return Cut(text[:cut].rstrip(), text[cut:], "pattern")
    return None


def repeat_cut(text: str, *, question: str = "") -> Cut | None:
    """The first place where ``text`` (an answer so far) repeats itself or the question; None if it does not."""
    asked = _key(question)
    seen: set[str] = set()
    for start, unit in _finished_units(text):
        key = _key(unit)
        if len(key) < MIN_UNIT_CHARS:
            continue
        if key == asked or key in seen:
            why: Why = "echo" if key == asked else "line"
            return Cut(text[:start].rstrip(), text[start:], why)
        seen.add(key)
    return _loop(text) or _pattern(text)


class Repeated(Exception):
    """Raised from a stream's text callback to cancel the request at ``cut``."""

    def __init__(self, cut: Cut) -> None:
        super().__init__(cut.why)
        self.cut = cut


FINISH_REASON = "repeat"


def check(record: RequestRecord, *, question: str) -> None:
    """Raise ``Repeated`` when the answer so far repeats itself or the question (a stream's callback)."""
    cut = repeat_cut(record.generated_text, question=question)
    if cut is not None:
        raise Repeated(cut)


def stop_at(record: RequestRecord, cut: Cut) -> str:
    """Finish the cancelled ``record`` at ``cut`` and return the notice that says so.

    The record keeps the answer without its repeated part and ``finish_reason``
    "repeat"; its token counts and times stay what the engine did, repeats included.
    """
    record.generated_text = cut.keep
    record.finish_reason = FINISH_REASON
    record.success = True
    record.error = None
    reasons = {
        "echo": _("답이 질문을 그대로 되풀이해서"),
        "line": _("답이 앞에서 쓴 문장을 되풀이해서"),
        "loop": _("답이 같은 말을 반복해서"),
        "pattern": _("답이 숫자만 바꿔 가며 같은 말을 반복해서"),
    }
    return _("%(why)s 요청을 일찍 멈췄습니다. 되풀이한 부분(%(n)d자)은 답에서 뺐습니다.") % {
        "why": reasons[cut.why],
        "n": len(cut.dropped.strip()),
    }
