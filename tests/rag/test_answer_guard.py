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


# Loops as the packaged base model writes them (from chat answers on the chapter; digits count up
# or stay, so no two repeats are the same characters).
BASE_MODEL_LOOPS = [
    " 프리필과 디코드의 차이는 다음과 같습니다. # 1. 15 # 2. 15 # 3. 15 # 4. 15 # 5. 15 # 6. 15 # 7. 15 # 8. 15",
    " KV 캐시는 다음과 같습니다.\n1. KV 캐시\n2. KV 캐시\n3. KV 캐시\n4. KV 캐시\n",
    " TTFT는 1초입니다. 단계 1: 토큰 10개를 처리합니다. 단계 2: 토큰 10개를 처리합니다."
    " 단계 3: 토큰 10개를 처리합니다.",
    " 15 15 15 15 15 15 15 15 15",
    " 처리량은 요청 1개 2개 3개 4개 5개 6개 7개 8개 9개",
    " Prefill: 1. 15 ms 2. 15 ms 3. 15 ms 4. 15 ms 5. 15 ms 6. 15 ms",
    " ## 1\n## 2\n## 3\n## 4\n## 5\n## 6\n## 7\n## 8\n## 9\n",
]


@pytest.mark.parametrize("text", BASE_MODEL_LOOPS)
def test_a_loop_that_only_changes_its_numbers_is_cut_early(text: str) -> None:
    cut = repeat_cut(text, question=QUESTION)
    assert cut is not None, text
    assert len(cut.keep) < len(text) / 2 + 20 and cut.dropped.strip()


def test_the_counting_loop_keeps_what_came_before_it_and_its_first_item() -> None:
    cut = repeat_cut(BASE_MODEL_LOOPS[0], question=QUESTION)
    assert cut is not None and cut.why == "pattern"
    assert cut.keep == " 프리필과 디코드의 차이는 다음과 같습니다. # 1. 15"


def test_the_counting_loop_is_stopped_after_a_few_repeats_while_streaming() -> None:
    """Fed as the stream feeds it, one piece at a time: the guard answers within the first repeats,
    not at max_tokens."""
    pieces = [" 답은"] + [f" # {n}. 15" for n in range(1, 200)]
    text, fed = "", 0
    for piece in pieces:
        text, fed = text + piece, fed + 1
        if repeat_cut(text, question=QUESTION) is not None:
            break
    assert fed <= 8


@pytest.mark.parametrize(
    "text",
    [
        " 단계는 세 가지입니다.\n1. 프리필: 입력을 한 번에 계산합니다.\n2. 디코드: 토큰을 하나씩 만듭니다."
        "\n3. 캐시: KV를 저장합니다.\n",
        " 요청 1: 120 ms\n요청 2: 135 ms\n요청 3: 128 ms\n요청 4: 141 ms\n",
        " | 동시성 | TTFT |\n| 1 | 120 |\n| 2 | 135 |\n| 4 | 180 |\n| 8 | 260 |\n",
        " 처리량은 동시 요청 1개에서 12 tok/s, 4개에서 40 tok/s, 8개에서 71 tok/s입니다.",
        " 1, 2, 3 순서로 진행합니다.",
        " 2025년 3월 15일에 vLLM 0.8.5가 나왔고 2025년 5월 20일에 0.9.0이 나왔습니다.",
        " KV 캐시 블록은 16 토큰, 32 토큰, 64 토큰 중에서 고릅니다.",
    ],
)
def test_honest_answers_with_lists_and_numbers_are_not_cut(text: str) -> None:
    assert repeat_cut(text, question=QUESTION) is None


def test_the_notice_names_a_numbers_only_loop() -> None:
    record = RequestRecord(generated_text=BASE_MODEL_LOOPS[0], output_tokens=40)
    with pytest.raises(answer_guard.Repeated) as raised:
        answer_guard.check(record, question=QUESTION)
    assert "숫자만 바꿔" in answer_guard.stop_at(record, raised.value.cut)
