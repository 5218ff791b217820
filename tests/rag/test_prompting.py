"""Chat settings validation, prompt assembly and trimming, the relevance score, the estimator."""

from __future__ import annotations

import pytest

from rag import lexical, prompting
from rag.estimator import gen_seconds
from rag.prompting import ContextChunk, SettingsError


def chunk(cid: str, source: str, position: int, rank: int, text: str = "본문") -> ContextChunk:
    return ContextChunk(id=cid, text=text, title=f"제목 {cid}", source=source, position=position, rank=rank)


def test_settings_default_when_absent_and_keep_given_values() -> None:
    assert prompting.settings_parse(None) == prompting.ChatSettings()
    parsed = prompting.settings_parse(
        {"top_k": 8, "chunk_size": 1000, "threshold": 0.3, "brief": True, "max_tokens": 64, "temperature": 0.7}
    )
    assert (parsed.top_k, parsed.chunk_size, parsed.brief, parsed.max_tokens) == (8, 1000, True, 64)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"colour": 1}, "알 수 없는 설정 'colour'"),
        ({"top_k": 21}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"chunk_size": 300}, "chunk_size: 200, 500, 1000 중 하나"),
        ({"threshold": "nan"}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"brief": "yes"}, "brief"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"collection": 7}, "collection: 자료 모음의 키"),
        ({"collection": ""}, "collection: 자료 모음의 키"),
        ({"collection": "x" * 41}, "collection: 자료 모음의 키"),
        ("top_k=3", "settings: JSON 객체"),
    ],
)
def test_unknown_or_out_of_range_settings_are_named_in_the_error(raw: object, words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        prompting.settings_parse(raw)


@pytest.mark.parametrize(("raw", "words"), [("", "비어"), ("  \n\t ", "비어"), ("가" * 2001, "2001"), (7, "글이어야")])
def test_empty_blank_overlong_or_non_text_questions_are_refused(raw: object, words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        prompting.question_clean(raw)


def test_the_prompt_is_instructions_then_chunks_in_source_order_then_the_question() -> None:
    chunks = [chunk("b", "chapter/ko/b", 0, rank=1), chunk("a", "chapter/ko/a", 3, rank=2)]
    prompt = prompting.prompt_build("프리필이란?", chunks, brief=False)
    text = prompt.text
    assert text.startswith(prompt.instructions)
    assert text.index("제목 a") < text.index("제목 b")  # source order, not rank order
    assert text.endswith("질문: 프리필이란?\n답변:")
    # Same chunks in another rank order make the same text: the prefix cache can reuse it.
    swapped = [chunk("b", "chapter/ko/b", 0, rank=2), chunk("a", "chapter/ko/a", 3, rank=1)]
    assert prompting.prompt_build("다른 질문", swapped, brief=False).text.startswith(
        prompt.instructions + prompt.context
    )


def test_brief_changes_only_the_instructions_and_no_chunks_says_so() -> None:
    brief = prompting.prompt_build("q", [], brief=True)
    assert "짧게" in brief.instructions and "(자료 없음)" in brief.context
    english = prompting.prompt_build("q", [], brief=True, language="en")
    assert "one short line" in english.instructions and english.question.startswith("Question: q")


def test_stops_end_a_restarted_template_and_a_brief_answer_at_its_line_end() -> None:
    plain = prompting.prompt_build("q", [], brief=False)
    assert plain.stop == ["질문:", "답변:", "\n[자료"]
    assert prompting.prompt_build("q", [], brief=True).stop == [*plain.stop, "\n"]
    assert prompting.prompt_build("q", [], brief=False, language="en").stop[:2] == ["Question:", "Answer:"]


@pytest.mark.parametrize(
    ("model", "base"),
    [
        ("gemma-3-270m", True),
        ("/data/models/gemma-3-270m", True),
        ("google/gemma-3-270m-it", False),
        ("Qwen2.5", False),
    ],
)
def test_only_the_packaged_base_model_gets_the_notice(model: str, base: bool) -> None:
    assert prompting.is_packaged_base_model(model) is base


def test_chat_messages_carry_the_same_parts() -> None:
    prompt = prompting.prompt_build("q", [chunk("a", "s", 0, 1)], brief=False)
    system, user = prompt.messages()
    assert system["role"] == "system" and system["content"] == prompt.instructions.strip()
    assert user["content"].startswith("[자료 1]") and user["content"].endswith("답변:")


def test_only_prompts_that_might_not_fit_are_counted() -> None:
    assert prompting.fits_without_counting("가" * 100, max_tokens=100, max_model_len=1024)
    assert not prompting.fits_without_counting("가" * 400, max_tokens=100, max_model_len=1024)


def test_trimming_drops_the_least_relevant_chunks_first() -> None:
    chunks = [chunk("a", "s", 0, rank=1), chunk("b", "s", 1, rank=2), chunk("c", "s", 2, rank=3)]
    dropped = prompting.chunks_to_drop(chunks, overflow_tokens=150, chunk_tokens={"a": 100, "b": 100, "c": 100})
    assert dropped == ["c", "b"]


def test_relevance_is_the_weighted_share_of_question_terms_in_the_chunk() -> None:
    index = lexical.BM25Index.build(
        {"hit": "프리필은 입력 토큰을 한 번에 처리한다", "miss": "디코드는 한 토큰씩 만든다"}
    )
    assert index.coverage("프리필", "hit") == pytest.approx(1.0)
    assert index.coverage("프리필", "miss") == 0.0
    assert 0.0 < index.coverage("프리필 디코드", "hit") < 1.0
    assert index.coverage("", "hit") == 0.0


def test_the_estimator_reproduces_the_chapters_rows() -> None:
    assert gen_seconds(100, 50, 1000, 50) == (0.1, 1.0)
    assert gen_seconds(1500, 50, 1000, 50) == (1.5, 1.0)
    assert gen_seconds(100, 500, 1000, 50) == (0.1, 10.0)
    with pytest.raises(ValueError):
        gen_seconds(1, 1, 0, 1)


def test_the_settings_errors_read_in_english_on_an_english_page() -> None:
    from django.utils import translation

    with translation.override("en"), pytest.raises(SettingsError, match="question: the question is empty"):
        prompting.question_clean(" ")
    with translation.override("en"), pytest.raises(SettingsError, match="top_k: must be a whole number from 0 to 20"):
        prompting.settings_parse({"top_k": 99})


def test_an_example_sits_right_before_the_question_in_every_variant() -> None:
    """Worked answers (Lab 6's answer shape) come after the material, next to the question, the same
    text with and without the brief instruction; without one the prompt is as before."""
    shape = "[예시]\n질문: q?\n답변: a.\n- 이유.\n\n"
    for brief in (False, True):
        prompt = prompting.prompt_build("q", [], brief=brief, example=shape)
        assert prompt.text.endswith("(자료 없음)\n\n" + shape + "질문: q\n답변:")
        assert shape in prompt.messages()[1]["content"]
    plain = prompting.prompt_build("q", [], brief=False)
    assert plain.text == plain.instructions + plain.context + plain.question
