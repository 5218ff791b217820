"""Chat pages: a new conversation, a saved one reopened, the history, one passage."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from rag import access, conversations, prompting, vectorstore
from rag.chunking import CHUNK_SIZES
from rag.models import Conversation


def chat_labels() -> dict[str, str]:
    """The chat script's words, translated here so the page stays in one language."""
    return {
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
        "estimate": _("추정기 예측"),
        "estimate_none": _("측정된 내 속도가 아직 없습니다 (답변이 쌓이면 나옵니다)"),
        "measured": _("측정"),
        "websocket": _("웹소켓 오버헤드"),
        "websocket_help": _("브라우저에서 잰 첫 토큰 시간 − 서버에서 잰 첫 토큰 전송 시간"),
        "prep": _("질문 수신 → vLLM 요청"),
        "sources": _("검색된 자료"),
        "no_sources": _("자료 없음"),
        "prompt": _("최종 프롬프트 보기"),
        "rank": _("순위"),
        "relevance": _("관련도"),
        "fused": _("융합"),
        "dense": _("밀집"),
        "lexical": _("어휘"),
        "tokens": _("토큰"),
        "not_in_prompt": _("길이 초과로 뺌"),
        "prefill_basis_server": _("프리필 = vLLM 보고값"),
        "prefill_basis_client": _("프리필 = 클라이언트 TTFT"),
        "api_completions": _("completions API (우리 템플릿)"),
        "api_chat": _("chat completions API (모델의 채팅 템플릿)"),
        "question_empty": _("질문을 입력하세요."),
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
        found, error = [], str(exc)
    if found:
        hit = found[0]
    elif not error:
        raise Http404
    return render(request, "rag/passage.html", {"hit": hit, "ref": ref, "error": error})
