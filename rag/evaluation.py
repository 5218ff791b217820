"""Retrieval quality on the Korean evaluation set: recall@k for dense, lexical and hybrid.

A question is answered at rank r when the r-th retrieved chunk comes from the
expected section and its span covers the start of the evidence passage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from labapp.models import ChapterSection
from rag.retrieval import Mode, RetrievalResult, retrieve
from rag.services import CHAPTER_COLLECTION

# The project's questions, then paraphrases written fresh for the tokenizer comparison (short
# chat-style questions such as "프리필이란?"); both are asked, in this order.
_EVAL = Path(__file__).resolve().parent / "eval"
EVAL_SETS = (_EVAL / "chapter_qa_ko.jsonl", _EVAL / "chapter_qa_ko_paraphrases.jsonl")
# Questions written by hand on 2026-12-05 from the chapter's text alone, before any retrieval was run on them,
# and used for nothing but reporting: a change is chosen on EVAL_SETS and read here (`compare_tokenizers
# --held-out`), so that a figure here is not one anybody tuned to. Not asked by ``evaluate``.
HELD_OUT = (_EVAL / "chapter_qa_ko_heldout.jsonl",)


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    slug: str
    evidence: str


@dataclass(frozen=True)
class Recall:
    mode: Mode
    chunk_size: int
    at_1: float
    at_5: float
    questions: int
    misses: list[str]


def load_questions(paths: tuple[Path, ...] = EVAL_SETS) -> list[Question]:
    lines = [line for path in paths for line in path.read_text(encoding="utf-8").splitlines()]
    return [Question(**json.loads(line)) for line in lines if line.strip()]


def answer_rank(result: RetrievalResult, question: Question, evidence_at: int) -> int | None:
    for chunk in result.chunks:
        meta = chunk.metadata
        if meta.get("slug") == question.slug and int(meta["start"]) <= evidence_at < int(meta["end"]):
            return chunk.rank
    return None


def evaluate(*, chunk_size: int, modes: tuple[Mode, ...] = ("dense", "lexical", "hybrid")) -> list[Recall]:
    questions = load_questions()
    texts = {s.slug: f"{s.title}\n\n{s.body}".strip() for s in ChapterSection.objects.filter(language="ko")}
    report: list[Recall] = []
    for mode in modes:
        ranks: list[int | None] = []
        misses: list[str] = []
        for question in questions:
            evidence_at = texts[question.slug].find(question.evidence)
            if evidence_at < 0:
                raise ValueError(f"{question.id}: evidence not found in section {question.slug}")
            result = retrieve(
                question.question,
                collection=CHAPTER_COLLECTION,
                chunk_size=chunk_size,
                top_k=5,
                language="ko",
                mode=mode,
            )
            rank = answer_rank(result, question, evidence_at)
            ranks.append(rank)
            if rank is None:
                misses.append(question.id)
        n = len(questions)
        report.append(
            Recall(
                mode=mode,
                chunk_size=chunk_size,
                questions=n,
                misses=misses,
                at_1=sum(r == 1 for r in ranks) / n,
                at_5=sum(r is not None for r in ranks) / n,
            )
        )
    return report
