"""Korean-aware lexical ranking and rank fusion (pure)."""

from __future__ import annotations

import pytest

from rag.lexical import BM25Index, hangul_share, reciprocal_rank_fusion, terms


def test_korean_runs_become_bigrams_and_latin_words_stay_whole() -> None:
    assert terms("프리필은 TTFT를") == ["프리", "리필", "필은", "를", "ttft"]


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
