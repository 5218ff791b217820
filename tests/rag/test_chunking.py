from __future__ import annotations

import itertools

import pytest

from rag.chunking import split

KOREAN = ("프리필은 입력 토큰을 한 번에 계산합니다. 디코드는 출력 토큰을 하나씩 만듭니다. " * 30).strip()


@pytest.mark.parametrize("size", [200, 500, 1000])
def test_chunks_stay_within_size_and_cover_the_text(size: int) -> None:
    chunks = split(KOREAN, size=size)
    assert all(len(c.text) <= size for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(KOREAN)
    for earlier, later in itertools.pairwise(chunks):
        assert later.start <= earlier.end  # overlapping or touching: nothing is skipped


def test_cuts_prefer_sentence_ends() -> None:
    chunks = split(KOREAN, size=200)
    assert all(c.text.endswith("다.") for c in chunks[:-1])


def test_it_rejects_impossible_settings() -> None:
    with pytest.raises(ValueError, match="at least 20"):
        split("text", size=5)
    with pytest.raises(ValueError, match="overlap"):
        split("text", size=100, overlap=60)
