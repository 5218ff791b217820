"""Sources shown as readable text: a chunk's markdown marks dropped for the card, the prompt's text untouched."""

from __future__ import annotations

import pytest

from rag import chat, retrieval
from rag.access import CollectionRef
from rag.plaintext import readable


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        (
            "## KV 캐시란\n\nKV 캐시는 **이전 토큰**의 `key`와 value를 저장합니다.",
            "KV 캐시란\nKV 캐시는 이전 토큰의 key와 value를 저장합니다.",
        ),
        ("*프리필*은 [입력](https://example.org)을 한 번에 읽습니다.", "프리필은 입력을 한 번에 읽습니다."),
        ("- 하나\n- 둘\n", "하나\n둘"),
        ("| 동시성 | TTFT |\n|---|---|\n| 1 | 120 |\n", "동시성 · TTFT\n1 · 120"),
        ("```\nvllm serve model\n```\n", "vllm serve model"),
        ("의 **끝부분이 잘린 강조", "의 끝부분이 잘린 강조"),  # a chunk cut inside an emphasis
        ("C# 예제와 2 * 3 = 6", "C# 예제와 2 * 3 = 6"),  # marks that are prose stay
    ],
)
def test_markdown_is_shown_as_the_words_a_reader_sees(markdown: str, shown: str) -> None:
    assert readable(markdown) == shown


def test_a_chat_source_is_shown_readable_while_the_prompt_keeps_the_chunk_as_it_is() -> None:
    text = "## KV 캐시란\n\n**KV 캐시**는 디코드를 빠르게 합니다."
    chunk = retrieval.RetrievedChunk(
        id="chapter/ko/kv:500:0",
        text=text,
        metadata={"title": "## KV 캐시란", "source": "chapter/ko/kv"},
        rank=1,
        fused_score=0.03,
        dense_score=None,
        dense_rank=None,
        lexical_score=2.0,
        lexical_rank=1,
        relevance=0.8,
    )
    source = chat._source(chunk, CollectionRef("chapter", "chapter", "챕터", by_language=True))
    assert source["shown"] == "KV 캐시란\nKV 캐시는 디코드를 빠르게 합니다." and source["title"] == "KV 캐시란"
    assert source["text"] == text and chunk.context_chunk().text == text
