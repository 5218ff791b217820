"""Korean-aware lexical ranking and rank fusion (pure)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rag.lexical import BM25Index, bigrams, hangul_share, reciprocal_rank_fusion, terms


def test_korean_runs_become_bigrams_and_latin_words_stay_whole() -> None:
    assert bigrams("프리필은 TTFT를") == ["프리", "리필", "필은", "를", "ttft"]
    assert terms("프리필은 TTFT를", "bigram") == bigrams("프리필은 TTFT를")


def test_korean_becomes_content_morphemes_with_nouns_written_together_joined() -> None:
    found = terms("프리필은 TTFT를 top-k로 줄입니다")
    assert {"프리필", "ttft", "top-k", "줄이다"} <= set(found)
    assert not {"은", "를", "로", "필은"} & set(found)  # particles and endings are left out
    assert "프리필" not in terms("프리픽스 캐싱")


def test_a_question_s_compound_noun_does_not_match_another_compound_on_a_shared_part() -> None:
    """프리필 and 프리픽스 share 프리: the question counts 프리필 whole when the index knows it (before: 프리 too)."""
    index = BM25Index.build(
        {
            "prefix": "프리픽스 캐싱은 앞부분이 같은 프롬프트의 KV 캐시를 다시 씁니다.",
            "prefill": "프리필은 입력 토큰 전체를 한 번에 계산합니다.",
        }
    )
    assert [chunk_id for chunk_id, _ in index.search("프리필이란?", 2)] == ["prefill"]
    assert index.coverage("프리필이란?", "prefix") == 0.0
    # A compound the index lacks still matches on its parts.
    assert index.search("프리필계산이란?", 2)[0][0] == "prefill"


def test_of_two_chunks_matching_alike_the_one_beside_the_matching_passage_comes_first(tmp_path: Path) -> None:
    """A chunk's neighbours in its source lend it a share of their scores (NEIGHBOUR_WEIGHT); saved, it keeps them."""
    chunks = {  # a:1 and b:1 match alike; only a:1 has a neighbour that matches too
        "b:0": "캐시는 앞부분을 다시 씁니다.",
        "b:1": "디코드 속도는 메모리 용량이 정합니다.",
        "a:0": "디코드는 토큰을 하나씩 만듭니다.",
        "a:1": "디코드 속도는 메모리 성능이 정합니다.",
    }
    metadatas = {chunk_id: {"source": chunk_id[0], "chunk_index": int(chunk_id[2])} for chunk_id in chunks}
    alone = BM25Index.build(chunks)  # without sources, no neighbours: a tie, the earlier chunk first
    assert alone.search("디코드 속도", 1)[0][0] == "b:1"
    index = BM25Index.build(chunks, metadatas)
    index.save(tmp_path / "i", stamp="s")
    opened = BM25Index.load(tmp_path / "i", stamp="s")
    assert opened is not None
    for searched in (index, opened):
        assert [chunk_id for chunk_id, _ in searched.search("디코드 속도", 2)] == ["a:1", "b:1"]


def test_an_unknown_tokenizer_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown tokenizer 'words'.*kiwi, bigram"):
        terms("프리필", "words")


def test_a_saved_index_keeps_its_tokenizer_and_the_title_is_searched_but_not_stored(tmp_path: Path) -> None:
    index = BM25Index.build({"a": "입력을 한 번에 계산합니다."}, {"a": {"title": "프리필"}}, tokenizer="bigram")
    index.save(tmp_path / "i", stamp="s")
    opened = BM25Index.load(tmp_path / "i", stamp="s")
    assert opened is not None and opened.tokenizer == "bigram"
    assert opened.search("프리필", 1)[0][0] == "a"
    assert opened.chunk("a") == ("입력을 한 번에 계산합니다.", {"title": "프리필"})


def test_particles_do_not_hide_a_match() -> None:
    index = BM25Index.build(
        {
            "prefill": "프리필은 프롬프트 전체를 한 번에 계산합니다.",
            "decode": "디코드는 토큰을 하나씩 만듭니다.",
        }
    )
    assert index.search("프리필이 뭐야?", k=2)[0][0] == "prefill"
    assert index.search("디코드를 설명해 줘", k=2)[0][0] == "decode"
    assert index.search("zebra", k=2) == []


def test_weighted_fusion_favours_the_heavier_ranking() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]], weights=[0.1, 1.0])
    assert max(fused, key=lambda key: fused[key]) == "b"
    equal = reciprocal_rank_fusion([["a", "b"], ["c"]])
    assert equal["a"] == pytest.approx(1 / 61) and equal["c"] == pytest.approx(1 / 61)


def test_hangul_share() -> None:
    assert hangul_share("프리필 speed") == pytest.approx(3 / 8)
    assert hangul_share("123") == 0.0


def _plain_bm25(documents: dict[str, str], query: str, k: int) -> list[tuple[str, float]]:
    """The textbook formula, one document at a time: what the inverted index must reproduce."""
    import math
    from collections import Counter

    counted = {doc_id: Counter(bigrams(text)) for doc_id, text in documents.items()}
    n = len(counted)
    average = sum(sum(c.values()) for c in counted.values()) / n
    df = Counter(term for c in counted.values() for term in c)
    query_terms = set(bigrams(query))
    scores = []
    for doc_id, c in counted.items():
        score = 0.0
        for term in query_terms:
            if tf := c.get(term, 0):
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * sum(c.values()) / average))
        if score > 0:
            scores.append((doc_id, score))
    return sorted(scores, key=lambda item: -item[1])[:k]


def test_the_inverted_index_ranks_exactly_as_the_plain_formula_ties_included() -> None:
    import random

    rng = random.Random(11)
    words = "프리필 디코드 토큰 캐시 프롬프트 검색 청크 지연 TTFT TPOT KV top-k 1600".split()
    documents = {f"d{i}": " ".join(rng.choices(words, k=rng.randint(1, 40))) for i in range(600)}
    documents |= {"twin-a": "캐시 지연", "twin-b": "캐시 지연"}  # equal scores: the earlier one first
    # The arithmetic is what is checked, on the cheaper tokenizer (the formula tokenizes every text per query).
    index = BM25Index.build(documents, tokenizer="bigram")
    for _ in range(60):
        query = " ".join(rng.choices(words, k=rng.randint(1, 5)))
        for k in (0, 1, 5, 30):
            got, plain = index.search(query, k), _plain_bm25(documents, query, k)
            assert [doc for doc, _ in got] == [doc for doc, _ in plain], (query, k)
            assert [score for _, score in got] == pytest.approx([score for _, score in plain])
    twins = [doc for doc, _ in index.search("캐시 지연", 700) if doc.startswith("twin")]
    assert twins == ["twin-a", "twin-b"]

    def idf(term: str) -> float:
        df = sum(term in bigrams(text) for text in documents.values())
        return math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))

    assert index.coverage("캐시 TTFT", "twin-a") == pytest.approx(idf("캐시") / (idf("캐시") + idf("ttft")))


def test_a_saved_index_opens_memory_mapped_and_ranks_as_the_built_one(tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path)) / "index"
    documents = {
        "prefill": "프리필은 프롬프트 전체를 한 번에 계산합니다.",
        "decode": "디코드는 토큰을 하나씩 만듭니다. TTFT와 TPOT",
        "kv": "KV 캐시는 디코드가 다시 계산하지 않게 합니다.",
    }
    metadatas = {"prefill": {"title": "프리필", "chunk_index": 0}, "kv": {"title": "KV 캐시", "chunk_index": 2}}
    built = BM25Index.build(documents, metadatas)
    built.save(folder, stamp="3:2026-12-01")
    opened = BM25Index.load(folder, stamp="3:2026-12-01")
    assert opened is not None and opened.all_ids() == built.ids and opened.size == 3
    assert opened.ids == [] and opened._doc_at == {}  # the ids are not read into a list or a dict
    for question in ("프리필이 뭐야?", "디코드와 KV 캐시", "TTFT", "zebra"):
        assert opened.search(question, 3) == built.search(question, 3)
        assert opened.coverage(question, "decode") == built.coverage(question, "decode")
    assert type(opened._positions).__name__ == "memmap"  # the postings are read from the file when touched
    # The chunks' texts and metadata are kept too (so a lexical search needs nothing from Chroma).
    for doc_id, text in documents.items():
        assert opened.chunk(doc_id) == built.chunk(doc_id) == (text, metadatas.get(doc_id, {}))
    assert opened.chunk("nowhere") is None and type(opened._texts).__name__ == "memmap"
    assert BM25Index.load(folder, stamp="4:2026-12-02") is None  # built from something else: rebuild
    assert BM25Index.load(Path(str(tmp_path)) / "nothing", stamp="") is None
    built.save(folder, stamp="again")  # replaced whole, no partial folder left beside it
    assert BM25Index.load(folder, stamp="again") is not None
    assert sorted(p.name for p in folder.parent.iterdir()) == ["index"]


def test_an_empty_index_saves_and_opens() -> None:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        BM25Index.build({}).save(Path(folder) / "empty")
        opened = BM25Index.load(Path(folder) / "empty")
        assert opened is not None and opened.search("프리필", 3) == [] and opened.chunk("a") is None


def test_an_opened_index_finds_every_chunk_by_its_id_without_a_table_of_ids(tmp_path: object) -> None:
    """An opened index finds a chunk's position by a binary search over its ids in order (no list or
    dict of 100k ids read at every opening): every id is found, in any script, and no other."""
    import random
    from pathlib import Path

    rng = random.Random(3)
    ids = [f"{rng.choice(['chapter/ko', 'user-7', 'Z', '프리필'])}/{rng.randrange(10**6)}:{n}" for n in range(500)]
    documents = {doc_id: f"프리필 디코드 문서 {n} " + "캐시 " * (n % 4) for n, doc_id in enumerate(ids)}
    built = BM25Index.build(documents)
    folder = Path(str(tmp_path)) / "index"
    built.save(folder)
    opened = BM25Index.load(folder)
    assert opened is not None
    assert [opened._position(doc_id) for doc_id in ids] == list(range(len(ids)))
    assert [opened.chunk(doc_id) for doc_id in ids[:20]] == [built.chunk(doc_id) for doc_id in ids[:20]]
    for missing in ("", "chapter/ko", ids[0] + "x", "\uffff"):
        assert opened._position(missing) is None and opened.chunk(missing) is None
    assert opened.search("프리필 캐시", 7) == built.search("프리필 캐시", 7)
