"""Recall@1, recall@5 and search p50 of each Korean tokenizer, alone and fused with the dense half.

Self-contained, so the tokenizers are compared on equal terms without Chroma: the Korean chapter
is read from its Markdown files, cut by ``rag.chunking.split`` at every chunk size and indexed
as ``rag.retrieval`` indexes it (``BM25Index.build`` with each chunk's section title); the dense
half embeds the chunks with the configured embedding model and ranks by cosine similarity (what
Chroma's exact search would return), fused by ``reciprocal_rank_fusion`` at ``--dense-weight``.
Every question of the evaluation sets (``rag.evaluation.EVAL_SETS``) is asked; the p50 is the
lexical search of one question (its analysis included), on this process's clock.

    python manage.py compare_tokenizers [--dense-weight 0 --dense-weight 0.3] [--without-titles] [--json]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandParser

from labapp.chapter.services import CONTENT_DIR, parse_section
from labapp.ops.report import emit
from rag import chunking, embeddings, lexical
from rag.evaluation import EVAL_SETS, Question, load_questions


@dataclass(frozen=True)
class Row:
    tokenizer: str
    dense_weight: float
    chunk_size: int
    at_1: float
    at_5: float
    search_p50_ms: float
    missed_first: list[str]
    # The first chunk from the expected section, whether or not it holds the passage (a diagnostic, not recall).
    section_at_1: float
    # Recall@1 and @5 of each question set apart (file stem → [at_1, at_5]): the project's questions and the
    # paraphrases written later, so a change tuned on one set can be read on the other.
    by_set: dict[str, list[float]]


@dataclass(frozen=True)
class Piece:
    id: str
    slug: str
    index: int
    start: int
    end: int
    text: str
    title: str


def sections() -> dict[str, str]:
    """Each Korean section's text as the chapter index reads it (title, blank line, body)."""
    found: dict[str, str] = {}
    for path in sorted(CONTENT_DIR.glob("*.ko.md")):
        fields = parse_section(path)
        found[str(fields["slug"])] = f"{fields['title']}\n\n{fields['body']}".strip()
    return found


def pieces(texts: dict[str, str], size: int) -> list[Piece]:
    return [
        Piece(f"{slug}:{chunk.index}", slug, chunk.index, chunk.start, chunk.end, chunk.text, text.splitlines()[0])
        for slug, text in texts.items()
        for chunk in chunking.split(text, size=size)
    ]


def _unit(vectors: list[list[float]]) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float64)
    unit: np.ndarray = array / np.linalg.norm(array, axis=1, keepdims=True)
    return unit


def _share(hits: list[bool]) -> float:
    return round(sum(hits) / len(hits), 2) if hits else 0.0


def _by_set(questions: list[Question], ranks: list[int | None]) -> dict[str, list[float]]:
    """Recall@1 and @5 of each evaluation set's questions among ``questions``."""
    rank_of = {q.id: r for q, r in zip(questions, ranks, strict=True)}
    found: dict[str, list[float]] = {}
    for path in EVAL_SETS:
        mine = [rank_of[q.id] for q in load_questions((path,)) if q.id in rank_of]
        if mine:
            found[path.stem] = [_share([r == 1 for r in mine]), _share([r is not None for r in mine])]
    return found


def _rank(ranked: list[str], question: Question, at: int, by_id: dict[str, Piece]) -> int | None:
    for rank, chunk_id in enumerate(ranked[:5], start=1):
        piece = by_id[chunk_id]
        if piece.slug == question.slug and piece.start <= at < piece.end:
            return rank
    return None


def measure(
    tokenizer: str, size: int, weight: float, questions: list[Question], texts: dict[str, str], *, titles: bool = True
) -> Row:
    """One row: ``titles=False`` indexes the chunks without their section titles (as before 2026-12-04)."""
    found = pieces(texts, size)
    by_id = {piece.id: piece for piece in found}
    metadatas: dict[str, dict[str, Any]] = {p.id: {"source": p.slug, "chunk_index": p.index} for p in found}
    if titles:
        metadatas = {chunk_id: meta | {"title": by_id[chunk_id].title} for chunk_id, meta in metadatas.items()}
    index = lexical.BM25Index.build({p.id: p.text for p in found}, metadatas, tokenizer=tokenizer)
    chunk_vectors = _unit(embeddings.embed([p.text for p in found])) if weight else None
    question_vectors = _unit(embeddings.embed([q.question for q in questions])) if weight else None
    ranks: list[int | None] = []
    right_section: list[bool] = []
    times: list[float] = []
    for at, question in enumerate(questions):
        started = time.perf_counter()
        lexical_ids = [chunk_id for chunk_id, _ in index.search(question.question, 30)]
        times.append((time.perf_counter() - started) * 1000)
        ranked = lexical_ids
        if chunk_vectors is not None and question_vectors is not None:
            nearest = np.argsort(-(chunk_vectors @ question_vectors[at]))[:30]
            fused = lexical.reciprocal_rank_fusion([[found[i].id for i in nearest], lexical_ids], [weight, 1.0])
            ranked = sorted(fused, key=lambda chunk_id: -fused[chunk_id])
        ranks.append(_rank(ranked, question, texts[question.slug].find(question.evidence), by_id))
        right_section.append(bool(ranked) and by_id[ranked[0]].slug == question.slug)
    at_1, at_5 = _share([r == 1 for r in ranks]), _share([r is not None for r in ranks])
    missed = [q.id for q, r in zip(questions, ranks, strict=True) if r != 1]
    p50 = round(statistics.median(times), 2)
    return Row(tokenizer, weight, size, at_1, at_5, p50, missed, _share(right_section), _by_set(questions, ranks))


class Command(BaseCommand):
    help = "Compare the Korean tokenizers (recall@1, recall@5, search p50) at every chunk size."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dense-weight", type=float, action="append", help="0: the lexical half alone")
        parser.add_argument("--without-titles", action="store_true", help="index the chunks without their titles")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        texts, questions = sections(), load_questions()
        lexical.terms("프리필")  # the analyser's model read once, before anything is timed
        rows = [
            asdict(measure(tokenizer, size, weight, questions, texts, titles=not options["without_titles"]))
            for tokenizer in lexical.TOKENIZERS
            for weight in options["dense_weight"] or [0.0]
            for size in chunking.CHUNK_SIZES
        ]

        def text_lines() -> Iterator[str]:
            yield f"{len(questions)} questions"
            sets = list(rows[0]["by_set"]) if rows else []
            yield f"{'tokenizer':<9} {'dense':>5} {'chunk':>6} {'recall@1':>9} {'recall@5':>9} {'p50 ms':>7} " + (
                f"{'section@1':>9} " + " ".join(f"{name} @1/@5" for name in sets)
            )
            for row in rows:
                yield (
                    f"{row['tokenizer']:<9} {row['dense_weight']:>5} {row['chunk_size']:>6} "
                    f"{row['at_1']:>9.2f} {row['at_5']:>9.2f} {row['search_p50_ms']:>7.2f} {row['section_at_1']:>9.2f} "
                    + " ".join(f"{'{:.2f} / {:.2f}'.format(*row['by_set'][name]):>{len(name) + 6}}" for name in sets)
                )

        emit(self.stdout, rows, json_wanted=options["json"], lines=text_lines)
