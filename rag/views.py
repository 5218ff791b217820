"""Chat pages: a new conversation, a saved one reopened, the history, one passage."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from labapp import addresses
from rag import access, conversations, prompting, vectorstore
from rag.chunking import CHUNK_SIZES
from rag.models import Conversation


def chat_labels() -> dict[str, Any]:
    """The chat script's words, translated here so the page stays in one language."""
    return (
        {
            "connected": _("연결됨"),
            "disconnected": _("연결 끊김: 다시 연결하는 중…"),
            "stop": _("멈추기"),
            "ask_again": _("다른 설정으로 다시 묻기"),
            "streaming": _("답변 중"),
            "done": _("완료"),
            "stopped": _("멈춤 (부분 답변 저장됨)"),
            "failed": _("실패"),
            "retrieving": _("검색 중…"),
            "prefilling": _("프리필 중 (첫 토큰 기다림)"),
            "decoding": _("디코드 중"),
            "retrieval": _("검색"),
            "queue": _("대기열"),
            "prefill": _("프리필"),
            "decode": _("디코드"),
            "server": _("vLLM 보고"),
            "client": _("클라이언트 측정"),
            "ttft": _("TTFT (첫 토큰까지)"),
            "first_chunk": _("첫 청크 (vllm bench serve 기준)"),
            "e2el": _("전체 지연"),
            "tpot": _("TPOT (토큰당 시간)"),
            "prompt_tokens": _("프롬프트 토큰"),
            "split": _("지시문 / 검색 자료 / 질문"),
            "cached_tokens": _("캐시된 토큰"),
            "output_tokens": _("출력 토큰"),
            "tokens_per_s": _("토큰/초 (디코드)"),
            "finish_reason": _("종료 이유"),
            "websocket": _("웹소켓 오버헤드"),
            "websocket_help": _("브라우저에서 잰 첫 토큰 시간 − 서버에서 잰 첫 토큰 전송 시간"),
            "prep": _("질문 수신 → vLLM 요청"),
            "sources": _("검색된 자료"),
            "no_sources": _("자료 없음"),
            "prompt": _("최종 프롬프트 보기"),
            "rank": _("순위"),
            "relevance": _("관련도"),
            "fused": "RRF",
            "dense": _("코사인 유사도"),
            "lexical": "BM25",
            "tokens": _("토큰"),
            "not_in_prompt": _("길이 초과로 뺌"),
            "prefill_basis_server": _("프리필 = vLLM 보고값"),
            "prefill_basis_client": _("프리필 = 클라이언트 TTFT"),
            "api_completions": _("completions API (우리 템플릿)"),
            "api_chat": _("chat completions API (모델의 채팅 템플릿)"),
            "question_empty": _("질문을 입력하세요."),
            "settings_chunk": _("청크"),
            "settings_brief": _("짧게 답하기"),
            "settings_temperature": _("온도"),
        }
        | _admission_labels()
        | _card_labels()
        | _missing_labels()
        | {"details": details_layout()}
    )


def _admission_labels() -> dict[str, str]:
    """The words of an ask that waits its turn or is refused by the chat's admission (rag.admission)."""
    return {
        "waiting": _("차례를 기다리는 중"),
        "cancel_wait": _("대기 취소"),
        "queue_position": _("대기 {position}번째"),
        "queue_wait": _("예상 대기 약 {seconds}초"),
        "queue_wait_unknown": _("예상 대기 시간은 이 엔진에서 답이 하나 끝나면 알 수 있습니다"),
        "queue_slots": _("엔진이 한 번에 {slots}개 답변을 만듭니다. 차례가 오면 바로 시작합니다."),
        "admitted": _("{seconds}초 기다린 뒤 시작"),
        "admission_wait_help": _("엔진이 꽉 차서 이 앱의 줄에서 차례를 기다린 시간. TTFT와 따로 셉니다."),
        "admission_none": _("기다리지 않음"),
        "refused": _("거절됨: 지금은 받을 수 없음"),
        "retry_in": _("다시 묻기 ({seconds}초 후)"),
        "retry_now": _("다시 묻기"),
        "cut_off": _("연결이 끊겨 중단됨"),
        "cut_off_help": _(
            "답변을 보내던 연결이 끊겼습니다 (웹 서버가 멈췄거나 네트워크 문제). 여기까지 받은 글은 남고, "
            "서버는 저장해 둔 부분을 '중단됨'으로 남깁니다. "
            "연결이 돌아오면 '다시 묻기'로 같은 질문을 다시 보낼 수 있습니다."
        ),
    }


def _missing_labels() -> dict[str, str]:
    """How an answer ended, its estimate, and why a number is missing from its card (by the state the
    answer saved: estimate_state, cached_state)."""
    return {
        "estimate": _("추정기 예측"),
        "estimate_none": _("이 엔진에서 잰 내 실습 1 속도가 아직 없습니다 (실습 1을 이 엔진에서 돌리면 나옵니다)"),
        "measured": _("측정"),
        "basis_lab1": _("실습 1 속도 측정 #{id}에서 잰 내 속도"),
        "finish_stop": _("멈춤 문자열이나 끝 토큰에서 멈춤"),
        "finish_length": _("max_tokens에 닿아 멈춤"),
        "finish_repeat": _("반복을 막으려고 멈춤"),
        "finish_abort": _("중단됨"),
        "estimate_no_output": _("첫 토큰 전에 끝나서 추정할 답의 모양(출력 토큰 수)이 없습니다"),
        "estimate_failed": _("답이 실패해서 추정하지 않았습니다"),
        "estimate_cut": _("답을 보내던 웹 프로세스가 도중에 멈춰서 추정하지 않았습니다"),
        "estimate_cached_unknown": _("캐시된 토큰 수를 몰라 프롬프트 전체를 프리필로 셈"),
        "estimate_off_decode": _(
            "측정이 추정의 {ratio}배: 이 답의 디코드 속도 {answer} tok/s가 실습 1에서 잰 {lab} tok/s와 다릅니다 "
            "(그때와 다른 부하, 다른 길이의 답에서 잼)"
        ),
        "estimate_off_prefill": _(
            "측정이 추정의 {ratio}배: 이 답의 프리필 속도 {answer} tok/s가 실습 1에서 잰 {lab} tok/s와 다릅니다 "
            "(그때와 다른 부하, 다른 길이의 프롬프트에서 잼)"
        ),
        "cached_cut": _("모름: vLLM은 캐시된 토큰 수를 마지막 보고에만 싣는데, 이 답은 그 전에 멈췄습니다"),
        "cached_unreported": _("vLLM이 보고하지 않음 (엔진이 프롬프트 토큰 세부 보고 없이 실행됨)"),
    }


def details_layout() -> dict[str, dict[str, Any]]:
    """The "more" table's groups by key, each with its label and rows (the value's key: its label), in order. What
    vLLM reported about the request (its per-request metrics) is one group, what this server measured
    while it read the stream another: no row of one sits under the other's heading."""

    def group(key: str, label: str, rows: list[tuple[str, str]]) -> tuple[str, dict[str, Any]]:
        return key, {"label": label, "rows": dict(rows)}

    # Keys as the JSON's keys, never its values: the page's words are only the labels.
    return dict(
        [
            group(
                "server",
                _("vLLM 보고 (요청별 지표)"),
                [("queue_server", _("대기열")), ("prefill_server", _("프리필")), ("decode_server", _("디코드"))],
            ),
            group(
                "client",
                _("클라이언트 측정 (이 서버가 스트림을 받으며 잰 값)"),
                [
                    ("ttft", _("TTFT (첫 토큰까지)")),
                    ("first_chunk", _("첫 청크 (vllm bench serve 기준)")),
                    ("decode_client", _("디코드")),
                    ("e2el", _("전체 지연")),
                    ("tpot", _("TPOT (토큰당 시간)")),
                    ("tokens_per_s", _("토큰/초 (디코드)")),
                ],
            ),
            group(
                "tokens",
                _("토큰 수와 종료 이유"),
                [
                    ("prompt_tokens", _("프롬프트 토큰")),
                    ("split", _("지시문 / 검색 자료 / 질문")),
                    ("cached_tokens", _("캐시된 토큰")),
                    ("output_tokens", _("출력 토큰")),
                    ("finish_reason", _("종료 이유")),
                ],
            ),
            group(
                "app",
                _("이 앱의 단계와 계산"),
                [
                    ("retrieval_split", _("검색 세부")),
                    ("admission_wait", _("차례 대기 (이 앱의 줄)")),
                    ("prep", _("질문 수신 → vLLM 요청 (차례 대기 빼고)")),
                    ("estimate", _("추정기 예측")),
                    ("websocket", _("웹소켓 오버헤드")),
                ],
            ),
        ]
    )


def _card_labels() -> dict[str, str]:
    """The answer card's words: its key numbers, their tooltips, the "more" table, the sources."""
    return {
        "panel": _("이 답변의 시간"),
        "bar_help": _("시간이 쓰인 곳: 검색 | 대기열 | 프리필 | 디코드"),
        "retrieval_help": _("질문 임베딩과 자료 검색에 걸린 시간"),
        "queue_help": _("vLLM 대기열에서 기다린 시간 (vLLM 보고)"),
        "queue_none": _("vLLM이 대기열 시간을 보고하지 않았습니다"),
        "prefill_help": _("프롬프트를 처리하고 첫 토큰을 내기까지"),
        "decode_help": _("첫 토큰 뒤 나머지 토큰을 내는 데 걸린 시간"),
        "tokens_in_out": _("토큰 입력→출력"),
        "tokens_help": _("프롬프트 토큰 → 생성한 토큰 (vLLM이 보고한 수)"),
        "cached_short": _("캐시"),
        "engine": _("답한 엔진:"),
        "more": _("자세히"),
        "prefill_vs_ttft": _("프리필 / TTFT"),
        "retrieval_split": _("검색 세부"),
        "embed": _("임베딩"),
        "embed_skipped": _("임베딩 건너뜀 (영어 전용 모델, 한국어 질문: BM25만)"),
        "search": _("검색"),
        "relevance_help": _(
            "관련도: 질문의 단어(드문 단어일수록 무겁게)가 이 자료에 든 비율입니다. 100%면 질문의 단어가 모두 "
            "들어 있고, 높을수록 좋습니다 (영어 질문은 코사인 유사도가 더 높으면 그 값). 코사인 유사도 = "
            "1 − 코사인 거리, 1이 가장 비슷합니다. BM25는 어휘 점수, RRF는 두 순위를 합친 점수로 순위만 "
            "뜻합니다. #은 순위입니다."
        ),
        "settings": _("설정"),
    }


def chat_context(request: HttpRequest, conversation: Conversation | None) -> dict[str, Any]:
    answers = list(conversation.answers.all()) if conversation else []
    return {
        "conversation": conversation,
        "answers_json": [conversations.answer_payload(a) for a in answers],
        "collections": access.collections_for(request.user),
        "chunk_sizes": CHUNK_SIZES,
        "defaults": prompting.ChatSettings(),
        "max_question": prompting.MAX_QUESTION_CHARS,
        "labels": chat_labels(),
    }


@login_required
@require_GET
def chat_new(request: HttpRequest) -> HttpResponse:
    return render(request, "rag/chat.html", chat_context(request, None))


@login_required
@require_GET
def chat_conversation(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = access.conversation_for(request.user, conversation_id)
    conversations.answers_orphaned_stop(request.user)  # an answer whose web process died: stopped, not "decoding"
    return render(request, "rag/chat.html", chat_context(request, conversation))


@login_required
@require_GET
def chat_history(request: HttpRequest) -> HttpResponse:
    return render(request, "rag/chat_history.html", {"conversations": conversations.conversations_of(request.user)})


@login_required
@require_GET
def passage(request: HttpRequest) -> HttpResponse:
    """One retrieved chunk, in full, with where it comes from."""
    ref = access.collection_for(request.user, request.GET.get("collection", ""))
    chunk_id = request.GET.get("id", "")
    error = ""
    hit = None
    try:
        found = vectorstore.get_ids(ref.name, [chunk_id]) if chunk_id else []
    except vectorstore.RetrievalUnavailable as exc:
        found, error = [], addresses.scrubbed(str(exc))
    if found:
        hit = found[0]
    elif not error:
        raise Http404
    return render(request, "rag/passage.html", {"hit": hit, "ref": ref, "error": error})
