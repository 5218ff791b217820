"""The repeated-line guard: where a base model's answer starts repeating itself or the question."""

from __future__ import annotations

from typing import Any

import pytest

from rag import answer_guard
from rag.answer_guard import repeat_cut
from rag.vllm.records import RequestRecord

QUESTION = "연차는 며칠인가요?"


def test_an_answer_that_echoes_the_question_is_cut_before_the_echo() -> None:
    cut = repeat_cut(" 연차는 며칠인가요? 답변: 연차는", question=QUESTION)
    assert cut is not None and cut.why == "echo" and cut.keep == ""


def test_a_sentence_said_again_is_dropped_and_what_came_before_is_kept() -> None:
    cut = repeat_cut(" 연차는 15일입니다. 신청은 포털에서 합니다. 연차는 15일입니다. ", question=QUESTION)
    assert cut is not None and cut.why == "line"
    assert cut.keep == " 연차는 15일입니다. 신청은 포털에서 합니다."
    assert cut.dropped.strip() == "연차는 15일입니다."


def test_a_line_said_again_after_a_template_label_is_a_repeat() -> None:
    cut = repeat_cut("TTFT가 늘어납니다\n답변: TTFT가 늘어납니다\n", question="왜 늦나요?")
    assert cut is not None and cut.why == "line" and cut.keep == "TTFT가 늘어납니다"


def test_a_loop_without_line_ends_is_cut_to_its_first_time() -> None:
    text = "첫 토큰이 늦게 뜬 경우 " * 3
    cut = repeat_cut(text, question="x")
    assert cut is not None and cut.why == "loop" and cut.keep == "첫 토큰이 늦게 뜬 경우"


@pytest.mark.parametrize(
    "text",
    [
        " 프리필은 입력을 한 번에 계산합니다. 디코드는 토큰을 하나씩 만듭니다.",
        "1. 프리필\n2. 디코드\n",
        "네.\n네.\n",  # too short to call a repeat
        " 연차는 15일입니다. 연차는 15일",  # the second sentence has not ended yet
        "",
    ],
)
def test_answers_that_do_not_repeat_are_left_alone(text: str) -> None:
    assert repeat_cut(text, question=QUESTION) is None


def test_the_hook_raises_and_the_record_keeps_the_answer_without_the_repeat() -> None:
    record = RequestRecord(generated_text=" 15일입니다. 15일입니다.\n", output_tokens=12, finish_reason=None)
    with pytest.raises(answer_guard.Repeated) as raised:
        answer_guard.check(record, question=QUESTION)
    notice = answer_guard.stop_at(record, raised.value.cut)
    assert record.generated_text == " 15일입니다."
    assert record.finish_reason == "repeat" and record.success and record.output_tokens == 12
    assert "되풀이" in notice


def test_the_hook_lets_an_honest_answer_through() -> None:
    answer_guard.check(RequestRecord(generated_text=" 15일입니다."), question=QUESTION)


def test_the_model_notice_shows_for_the_packaged_base_model_only(settings: Any) -> None:
    from django.template.loader import render_to_string

    settings.VLLM_MODEL = ""
    settings.VLLM_EMBEDDED = True
    shown = render_to_string("model_notice.html")
    assert 'id="model-notice"' in shown and "gemma-3-270m" in shown and "VLLM_MODEL" in shown
    settings.VLLM_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
    assert "model-notice" not in render_to_string("model_notice.html")
