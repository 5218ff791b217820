"""Recall of the lexical ranking's variants tried for Korean, each beside the kept one, on both question sets.

What was tried to raise recall@1 (docs/performance.md, issue 27's "right section first"), kept as a
command so each figure can be made again: BM25's k1 and b, the section title weighted twice, each
chunk's sub-heading indexed, a section's score (its best two chunks) added to each of its chunks,
the neighbours' scores added (kept), question words dropped from the question, the chapter's own questions
to the reader ("생각해 볼 질문 …?") left out of the index, and the question's morphemes widened by
kiwipiepy's own similar morphemes. The chunks are ``compare_tokenizers``' (the chapter cut by
``rag.chunking.split``, titles indexed), scored by the textbook BM25 over the kept morphemes; a
question is judged as ``compare_tokenizers`` judges it. The kept variant is what ``rag.lexical`` runs
(``NEIGHBOUR_WEIGHT``); every other changes one thing from the ranking before it.

    python manage.py retrieval_variants [--json]
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandParser

from labapp.ops.measures.compare_tokenizers import Piece, pieces, sections
from labapp.ops.report import emit
from rag import chunking, lexical
from rag.evaluation import EVAL_SETS, Question, load_questions

_HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)
_ASKED = re.compile(r"[^.?!\n]*\?")
# Question words and light verbs: what a question says about itself, not about its subject.
_QUESTION_WORDS = frozenset(
    {"무엇", "것", "거", "때", "수", "어떻다", "얼마", "하다", "되다", "있다", "없다", "주다", "같다"}
)


@dataclass(frozen=True)
class Variant:
    name: str
    k1: float = 1.2
    b: float = 0.75
    title_times: int = 1
    heading: bool = False
    section_weight: float = 0.0  # times the section's best two chunk scores, added to each of its chunks
    neighbour_weight: float = 0.0  # times the scores of the chunks before and after, in the same section
    drop_question_words: bool = False
    drop_asked: bool = False  # sentences ending in "?" left out of the index
    similar_weight: float = 0.0  # kiwipiepy's similar morphemes (similarity ≥ 0.6), at this share


BEFORE = Variant("before: BM25 k1 1.2, b 0.75, title once")
KEPT = replace(BEFORE, name="kept: neighbours' scores added", neighbour_weight=lexical.NEIGHBOUR_WEIGHT)
VARIANTS = (
    BEFORE,
    KEPT,
    replace(BEFORE, name="neighbours' scores ×0.3 added", neighbour_weight=0.3),
    replace(BEFORE, name="k1 0.9, b 0.4", k1=0.9, b=0.4),
    replace(BEFORE, name="k1 1.5, b 0.9", k1=1.5, b=0.9),
    replace(BEFORE, name="title twice", title_times=2),
    replace(BEFORE, name="sub-heading indexed", heading=True),
    replace(BEFORE, name="section's best two chunks added", section_weight=1.0),
    replace(BEFORE, name="question words dropped", drop_question_words=True),
    replace(BEFORE, name="questions to the reader not indexed", drop_asked=True),
    replace(BEFORE, name="similar morphemes ×0.5 added", similar_weight=0.5),
)


@dataclass(frozen=True)
class Row:
    variant: str
    chunk_size: int
    at_1: float
    at_5: float
    section_at_1: float
    by_set: dict[str, list[float]]


def _indexed(piece: Piece, text: str, variant: Variant) -> str:
    """What one chunk is indexed as under ``variant``."""
    headings = _HEADING.findall(text[: piece.start + 1]) if variant.heading else []
    body = _ASKED.sub(" ", piece.text) if variant.drop_asked else piece.text
    return "\n".join([piece.title] * variant.title_times + headings[-1:] + [body])


class _Ranker:
    """The textbook BM25 over the chunks at one size, with a variant's changes."""

    def __init__(self, found: list[Piece], texts: dict[str, str], variant: Variant) -> None:
        self.variant = variant
        counted = [Counter(t) for t in lexical.terms_of([_indexed(p, texts[p.slug], variant) for p in found])]
        self.counts = counted
        self.lengths = np.asarray([sum(c.values()) for c in counted], dtype=np.float64)
        self.df = Counter(term for c in counted for term in c)
        self.sections: dict[str, list[int]] = {}
        for at, piece in enumerate(found):
            self.sections.setdefault(piece.slug, []).append(at)

    def _bm25(self, term: str) -> np.ndarray:
        scores = np.zeros(len(self.counts))
        n, df = len(self.counts), self.df.get(term, 0)
        if not df:
            return scores
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        k1, b, average = self.variant.k1, self.variant.b, float(self.lengths.mean())
        for at, counts in enumerate(self.counts):
            if tf := counts.get(term, 0):
                scores[at] = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.lengths[at] / average))
        return scores

    def _similar(self, question: str) -> list[tuple[str, float]]:
        """Morphemes of the index that kiwipiepy's model finds close to the question's (similarity ≥ 0.6)."""
        found: list[tuple[str, float]] = []
        for token in lexical._kiwi().tokenize(question.lower()):
            if token.tag not in ("NNG", "NNP", "VV", "VA", "XR"):
                continue
            try:
                near = lexical._kiwi().most_similar_morphemes((token.form, token.tag), top_n=10)
            except ValueError:  # a morpheme the model has no vector for
                continue
            for m in near:
                term = m.form + ("다" if m.tag.startswith(("VV", "VA")) else "")
                if m.score >= 0.6 and self.df.get(term):
                    found.append((term, m.score))
        return found

    def _aggregated(self, scores: np.ndarray) -> np.ndarray:
        final = scores.copy()
        for members in self.sections.values():
            best = sorted(scores[members], reverse=True)[:2]
            final[members] += self.variant.section_weight * sum(best)
            for at, member in enumerate(members):
                nearby = members[max(0, at - 1) : at] + members[at + 1 : at + 2]
                final[member] += self.variant.neighbour_weight * float(scores[nearby].sum())
        return final

    def ranked(self, question: str) -> list[int]:
        wanted = lexical.query_terms(question, "kiwi", self.df.__contains__)
        if self.variant.drop_question_words:
            wanted -= _QUESTION_WORDS
        scores = sum((self._bm25(term) for term in wanted), np.zeros(len(self.counts)))
        if self.variant.similar_weight:
            for term, similarity in self._similar(question):
                scores += self.variant.similar_weight * similarity * self._bm25(term)
        return [int(at) for at in np.argsort(-self._aggregated(scores), kind="stable")[:5]]


def _share(hits: list[bool]) -> float:
    return round(sum(hits) / len(hits), 2) if hits else 0.0


def measure(variant: Variant, size: int, questions: list[Question], texts: dict[str, str]) -> Row:
    found = pieces(texts, size)
    ranker = _Ranker(found, texts, variant)
    ranks: dict[str, int | None] = {}
    right_section: list[bool] = []
    for question in questions:
        at = texts[question.slug].find(question.evidence)
        top = [found[i] for i in ranker.ranked(question.question)]
        hits = [r for r, p in enumerate(top, start=1) if p.slug == question.slug and p.start <= at < p.end]
        ranks[question.id] = hits[0] if hits else None
        right_section.append(bool(top) and top[0].slug == question.slug)
    by_set = {}
    for path in EVAL_SETS:
        mine = [ranks[q.id] for q in load_questions((path,)) if q.id in ranks]
        by_set[path.stem] = [_share([r == 1 for r in mine]), _share([r is not None for r in mine])]
    every = list(ranks.values())
    at_1, at_5 = _share([r == 1 for r in every]), _share([r is not None for r in every])
    return Row(variant.name, size, at_1, at_5, _share(right_section), by_set)


class Command(BaseCommand):
    help = "Recall@1 / @5 of each lexical variant tried for Korean, at every chunk size, on both question sets."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        texts, questions = sections(), load_questions()
        rows = [asdict(measure(v, size, questions, texts)) for v in VARIANTS for size in chunking.CHUNK_SIZES]

        def text_lines() -> Iterator[str]:
            yield f"{len(questions)} questions; per set: recall@1 / @5"
            for row in rows:
                sets = ", ".join(f"{name} {at_1:.2f} / {at_5:.2f}" for name, (at_1, at_5) in row["by_set"].items())
                yield (
                    f"{row['variant']:<38} {row['chunk_size']:>5}  recall@1 {row['at_1']:.2f}  recall@5 "
                    f"{row['at_5']:.2f}  section@1 {row['section_at_1']:.2f}  ({sets})"
                )

        emit(self.stdout, rows, json_wanted=options["json"], lines=text_lines)
