"""Which half of a hybrid search runs for which question (no Chroma: its two calls are stood in for)."""

from __future__ import annotations

from typing import Any

import pytest

from rag import embeddings, lexical, retrieval, vectorstore

DOCS = {
    "ko-1": "프리필은 프롬프트 전체를 한 번에 계산하는 단계입니다.",
    "ko-2": "디코드는 토큰을 하나씩 만드는 단계입니다.",
    "en-1": "Prefill computes the whole prompt at once.",
    "en-2": "Decode produces one token at a time.",
}


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The questions that were embedded; Chroma answers from DOCS (dense: in reverse order)."""
    embedded: list[str] = []
    index = lexical.BM25Index.build(DOCS)

    def embed(texts: list[str]) -> list[list[float]]:
        embedded.extend(texts)
        return [[1.0, 0.0] for _ in texts]

    def query(name: str, *, embedding: list[float], k: int, where: Any = None) -> list[vectorstore.Hit]:
        return [vectorstore.Hit(i, DOCS[i], {}, distance=0.1 * n) for n, i in enumerate(reversed(DOCS))][:k]

    def get_ids(name: str, ids: list[str], where: Any = None) -> list[vectorstore.Hit]:
        return [vectorstore.Hit(i, DOCS[i], {}, distance=0.0) for i in ids]

    monkeypatch.setattr(embeddings, "embed", embed)
    monkeypatch.setattr(embeddings, "is_bundled_model", lambda: True)
    monkeypatch.setattr(retrieval, "_lexical_index", lambda name, where: index)
    monkeypatch.setattr(vectorstore, "query", query)
    monkeypatch.setattr(vectorstore, "get_ids", get_ids)
    return embedded


def _retrieve(question: str, **options: Any) -> retrieval.RetrievalResult:
    return retrieval.retrieve(question, collection="c", chunk_size=500, top_k=2, **options)


def test_a_korean_question_is_searched_by_bm25_alone_with_the_english_only_bundled_model(searched: list[str]) -> None:
    found = _retrieve("프리필 단계란?")
    assert searched == [] and found.dense_skipped and found.embed_ms is None
    assert found.chunks[0].id == "ko-1"
    assert all(chunk.dense_rank is None and chunk.lexical_rank is not None for chunk in found.chunks)


def test_a_search_by_bm25_alone_takes_the_chunks_from_the_index_and_asks_chroma_for_nothing(
    searched: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_chroma(*args: object, **kwargs: object) -> None:
        raise AssertionError("a lexical search asked Chroma")

    kept = lexical.BM25Index.build(DOCS, {"ko-1": {"title": "프리필", "chunk_index": 3}})
    monkeypatch.setattr(retrieval, "_lexical_index", lambda name, where: kept)
    monkeypatch.setattr(vectorstore, "get_ids", no_chroma)
    monkeypatch.setattr(vectorstore, "query", no_chroma)
    for found in (_retrieve("프리필 단계란?"), _retrieve("프리필 단계란?", mode="lexical")):
        assert [chunk.id for chunk in found.chunks] == ["ko-1", "ko-2"]
        first = found.chunks[0]
        assert first.text == DOCS["ko-1"] and first.metadata == {"title": "프리필", "chunk_index": 3}
        assert found.chunks[0].context_chunk().title == "프리필" and found.chunks[1].metadata == {}


def test_with_chroma_down_a_hybrid_search_answers_from_the_lexical_index_saying_why_and_dense_mode_fails(
    searched: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: object, **kwargs: object) -> list[vectorstore.Hit]:
        raise vectorstore.RetrievalUnavailable("Chroma at http://chroma is unreachable")

    kept = lexical.BM25Index.build(DOCS)
    monkeypatch.setattr(retrieval, "_lexical_index", lambda name, where: kept)
    monkeypatch.setattr(vectorstore, "query", down)
    monkeypatch.setattr(vectorstore, "get_ids", down)
    found = _retrieve("What does prefill compute?")
    assert found.dense_unavailable == "Chroma at http://chroma is unreachable" and found.embed_ms is None
    assert [chunk.id for chunk in found.chunks] == ["en-1"] and found.chunks[0].text == DOCS["en-1"]
    assert found.chunks[0].dense_rank is None and found.chunks[0].lexical_rank == 1
    with pytest.raises(vectorstore.RetrievalUnavailable):
        _retrieve("What does prefill compute?", mode="dense")
    assert not _retrieve("What does prefill compute?", mode="lexical").dense_unavailable


def test_an_english_question_is_embedded_and_both_rankings_are_fused(searched: list[str]) -> None:
    found = _retrieve("What does prefill compute?")
    assert searched == ["What does prefill compute?"] and not found.dense_skipped
    assert any(chunk.dense_rank is not None and chunk.lexical_rank is not None for chunk in found.chunks)


def test_a_multilingual_model_embeds_korean_questions_at_full_weight(
    searched: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embeddings, "is_bundled_model", lambda: False)
    found = _retrieve("프리필 단계란?")
    assert searched == ["프리필 단계란?"] and not found.dense_skipped
    assert retrieval.dense_weight("프리필 단계란?") == 1.0


def test_embedding_can_be_asked_for_and_dense_mode_always_embeds(searched: list[str]) -> None:
    forced = _retrieve("프리필 단계란?", embed=True)
    dense = _retrieve("프리필 단계란?", mode="dense")
    assert searched == ["프리필 단계란?", "프리필 단계란?"]
    assert not forced.dense_skipped and not dense.dense_skipped
    # The dense list alone keeps its own order (its scores are not weighted away).
    assert [chunk.id for chunk in dense.chunks] == ["en-2", "en-1"]
    assert all(chunk.fused_score > 0 for chunk in dense.chunks)
