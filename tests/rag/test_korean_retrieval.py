"""Korean retrieval on the real chapter: morphemes (kiwipiepy) find the right section first (no services)."""

from __future__ import annotations

import pytest

from labapp.ops.measures.compare_tokenizers import measure, pieces, sections
from rag import lexical
from rag.chunking import CHUNK_SIZES
from rag.evaluation import load_questions


@pytest.fixture(scope="module")
def chapter() -> dict[str, str]:
    return sections()


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_prefill_is_found_in_the_prefill_section_not_in_prefix_caching(chapter: dict[str, str], size: int) -> None:
    found = pieces(chapter, size)
    index = lexical.BM25Index.build({p.id: p.text for p in found}, {p.id: {"title": p.title} for p in found})
    first = index.search("프리필이란?", 1)[0][0]
    assert first.startswith("prefill-decode:"), first
    # The former character bigrams shared 프리 with 프리픽스 and put prefix caching first.
    bigrams = lexical.BM25Index.build({p.id: p.text for p in found}, tokenizer="bigram")
    assert size == 200 or bigrams.search("프리필이란?", 1)[0][0].startswith("prefix-caching:")


def test_morphemes_find_more_answers_first_than_bigrams_did_at_200_characters(chapter: dict[str, str]) -> None:
    """On the enlarged set (98 questions) bigrams without titles found 0.52 first and 0.78 in the top 5."""
    questions = load_questions()
    assert len(questions) >= 98
    row = measure("kiwi", 200, 0.0, questions, chapter)
    assert row.at_1 >= 0.58 and row.at_5 >= 0.9, row


def test_the_paraphrases_point_at_passages_that_exist(chapter: dict[str, str]) -> None:
    for question in load_questions():
        assert chapter[question.slug].find(question.evidence) >= 0, question.id
