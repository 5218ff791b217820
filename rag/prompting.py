"""Chat settings and prompt assembly (pure: no I/O, so it is unit-tested directly).

The prompt's order is fixed so that vLLM's prefix cache can reuse it:
instructions first (identical for every question), then the retrieved chunks in
a stable order (by source and position, not by score, so the same chunks make
the same text whatever their ranks), then the question last.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from labapp.said import gettext as _  # a settings error can be an answer's saved error
from rag.chunking import CHUNK_SIZES

MAX_QUESTION_CHARS = 2000
PACKAGED_BASE_MODEL = "gemma-3-270m"


def is_packaged_base_model(model: str) -> bool:
    """Whether ``model`` names the packaged Gemma 3 270M base model (not its "-it" instruction-tuned
    sibling): good for timing, poor for answers, so the chat and Lab 6 say so."""
    name = model.lower().replace("_", "-")
    return PACKAGED_BASE_MODEL in name and "-it" not in name


class SettingsError(ValueError):
    """A question or a setting the chat cannot use; the message says which and why."""


@dataclass(frozen=True)
class ChatSettings:
    collection: str = "chapter"
    top_k: int = 4
    chunk_size: int = 500
    threshold: float = 0.0  # minimum relevance (fused score relative to the best possible), 0..1
    brief: bool = False
    max_tokens: int = 128
    temperature: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(raw: dict[str, Any], key: str, low: float, high: float, default: float, *, whole: bool = False) -> float:
    """A number in [low, high] (a whole one if ``whole``); JSON numbers or numeric strings."""
    value = raw.get(key, default)
    if whole:
        message = _("%(key)s: %(low)s부터 %(high)s까지의 정수여야 합니다 (받은 값: %(value)s).")
    else:
        message = _("%(key)s: %(low)s부터 %(high)s까지의 수여야 합니다 (받은 값: %(value)s).")
    shown = {"key": key, "low": _shown(low), "high": _shown(high), "value": _shown(value)}
    problem = SettingsError(message % shown)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise problem
    try:
        number = float(value)
    except (ValueError, OverflowError):  # OverflowError: a whole number past float's range
        raise problem from None
    if not low <= number <= high or (whole and number != int(number)):  # NaN fails the range test
        raise problem
    return number


def _integer(raw: dict[str, Any], key: str, low: int, high: int, default: int) -> int:
    return int(_number(raw, key, low, high, default, whole=True))


def settings_parse(raw: Any) -> ChatSettings:
    """Validate the settings of one message; unknown keys and values are errors, not ignored.
    The collection need only be a short string here: whether this user may search it is the
    access layer's to say (``rag.access.collection_resolve``), with ``collection_unknown``'s message."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SettingsError(_("settings: JSON 객체여야 합니다."))
    known = set(ChatSettings.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SettingsError(
            _("알 수 없는 설정 %(name)s (있는 설정: %(known)s)")
            % {"name": _shown(unknown[0]), "known": ", ".join(sorted(known))}
        )
    collection = raw.get("collection", "chapter")
    if not (isinstance(collection, str) and 0 < len(collection) <= 40):
        raise SettingsError(
            _("collection: 자료 모음의 키여야 합니다 (받은 값: %(value)s).") % {"value": _shown(collection)}
        )
    chunk_size = _integer(raw, "chunk_size", min(CHUNK_SIZES), max(CHUNK_SIZES), 500)
    if chunk_size not in CHUNK_SIZES:
        raise SettingsError(
            _("chunk_size: %(choices)s 중 하나여야 합니다 (받은 값: %(value)s).")
            % {"choices": ", ".join(map(str, CHUNK_SIZES)), "value": chunk_size}
        )
    brief = raw.get("brief", False)
    if not isinstance(brief, bool):
        raise SettingsError(_("brief: true 또는 false여야 합니다 (받은 값: %(value)s).") % {"value": _shown(brief)})
    return ChatSettings(
        collection=str(collection),
        top_k=_integer(raw, "top_k", 0, 20, 4),
        chunk_size=chunk_size,
        threshold=_number(raw, "threshold", 0.0, 1.0, 0.0),
        brief=brief,
        max_tokens=_integer(raw, "max_tokens", 1, 2048, 128),
        temperature=_number(raw, "temperature", 0.0, 2.0, 0.0),
    )


def collection_unknown(collection: Any, collections: list[str]) -> str:
    return _("collection: %(value)s은(는) 고를 수 있는 자료 모음(%(keys)s)이 아닙니다.") % {
        "value": _shown(collection),
        "keys": ", ".join(collections),
    }


def _shown(value: Any) -> str:
    """A value from the browser as an error message quotes it: short, and a string in quotes."""
    return repr(value)[:60] if isinstance(value, str) else str(value)[:60]


def question_clean(raw: Any) -> str:
    if not isinstance(raw, str):
        raise SettingsError(_("question: 글이어야 합니다."))
    question = raw.strip()
    if not question:
        raise SettingsError(_("question: 질문이 비어 있습니다."))
    if "\x00" in question:  # never text; PostgreSQL refuses to store it
        raise SettingsError(_("question: NUL 문자는 쓸 수 없습니다."))
    if len(question) > MAX_QUESTION_CHARS:
        raise SettingsError(
            _("question: %(n)d자는 한도 %(most)d자를 넘습니다.") % {"n": len(question), "most": MAX_QUESTION_CHARS}
        )
    return question


@dataclass(frozen=True)
class ContextChunk:
    id: str
    text: str
    title: str
    source: str
    position: int  # chunk index inside its source
    rank: int  # 1 = most relevant


_INSTRUCTIONS = {
    "ko": (
        "당신은 vLLM 서빙 실습의 조교입니다. 아래 자료만 근거로 질문에 한국어로 답하세요. "
        "자료에 답이 없으면 모른다고 답하세요."
    ),
    "en": (
        "You are the teaching assistant of a vLLM serving lab. Answer the question using only the "
        "material below. If the material does not contain the answer, say you do not know."
    ),
}
# A base model ignores "answer briefly" (Gemma 3 270M wrote up to the cap with or without it);
# a one-line format with a stop at the line's end (``Prompt.stop``) keeps it short.
_BRIEF = {"ko": "답은 한 줄로 짧게 씁니다.", "en": "The answer is one short line."}
_LABELS = {
    "ko": {"material": "자료", "none": "(자료 없음)", "question": "질문", "answer": "답변"},
    "en": {"material": "Material", "none": "(no material)", "question": "Question", "answer": "Answer"},
}


@dataclass(frozen=True)
class Prompt:
    instructions: str
    context: str
    question: str
    chunks: list[ContextChunk] = field(default_factory=list)
    language: str = "ko"
    brief: bool = False
    example: str = ""  # worked questions and answers between the material and the question

    @property
    def text(self) -> str:
        """The plain-completion prompt (our template, for models without a chat template)."""
        return self.instructions + self.context + self.example + self.question

    def messages(self) -> list[dict[str, str]]:
        """The same content for a model with a chat template."""
        return [
            {"role": "system", "content": self.instructions.strip()},
            {"role": "user", "content": (self.context + self.example + self.question).strip()},
        ]

    @property
    def stop(self) -> list[str]:
        """Where a base model starts the template again (a question, an answer, a material block);
        a brief answer is one line, so it also ends at the line's end."""
        labels = _LABELS[self.language]
        stops = [f"{labels['question']}:", f"{labels['answer']}:", f"\n[{labels['material']}"]
        return [*stops, "\n"] if self.brief else stops


def stable_order(chunks: list[ContextChunk]) -> list[ContextChunk]:
    return sorted(chunks, key=lambda c: (c.source, c.position, c.id))


def prompt_build(
    question: str,
    chunks: list[ContextChunk],
    *,
    brief: bool,
    language: str = "ko",
    keep_order: bool = False,
    example: str = "",
) -> Prompt:
    """Instructions, the chunks in a stable order (``keep_order``: as given, for Lab 5's reordering
    experiment), ``example`` (worked questions and answers that show a base model the answer's shape,
    next to the question it is to answer alike), then the question."""
    language = language if language in _INSTRUCTIONS else "ko"
    labels = _LABELS[language]
    instructions = _INSTRUCTIONS[language] + (" " + _BRIEF[language] if brief else "") + "\n\n"
    ordered = list(chunks) if keep_order else stable_order(chunks)
    if ordered:
        blocks = [f"[{labels['material']} {n}] {c.title}\n{c.text}" for n, c in enumerate(ordered, start=1)]
        context = "\n\n".join(blocks) + "\n\n"
    else:
        context = f"{labels['none']}\n\n"
    return Prompt(
        instructions=instructions,
        context=context,
        question=f"{labels['question']}: {question}\n{labels['answer']}:",
        chunks=ordered,
        language=language,
        brief=brief,
        example=example,
    )


def fits_without_counting(prompt_text: str, *, max_tokens: int, max_model_len: int) -> bool:
    """True when the prompt surely fits: a token is never less than one UTF-8 byte.

    Only prompts that might not fit are counted with the engine's tokenizer, so
    the common case adds no round trip before the request.
    """
    return len(prompt_text.encode()) + 8 + max_tokens <= max_model_len


def chunks_to_drop(chunks: list[ContextChunk], *, overflow_tokens: int, chunk_tokens: dict[str, int]) -> list[str]:
    """Ids of the least relevant chunks whose removal frees at least ``overflow_tokens``."""
    dropped: list[str] = []
    freed = 0
    for chunk in sorted(chunks, key=lambda c: -c.rank):
        if freed >= overflow_tokens:
            break
        dropped.append(chunk.id)
        freed += chunk_tokens.get(chunk.id, 0) + 4  # the block's label and blank lines
    return dropped
