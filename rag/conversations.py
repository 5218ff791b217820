"""Writes and reads of conversations and answers (services and selectors)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from labapp import said
from rag import access, keeper
from rag.chat import AnswerRun
from rag.models import Answer, Conversation

# A row still "streaming" whose process has not stamped it for ``keeper.ORPHAN_S`` lost that process
# (killed mid-answer): it no longer counts against the learner's limit of answers at once, and
# ``answers_orphaned_stop`` saves it stopped.
CUT_OFF = "cut_off"  # the notice's code on an answer saved stopped that way


class NotFound(LookupError):
    """No such conversation or answer for this user (never a hint that it exists)."""


class TooMany(RuntimeError):
    """The user already has as many answers streaming as they may (over all their sockets)."""


def conversations_of(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    return access.conversations_visible(user).prefetch_related("answers")


@transaction.atomic
def answer_start(
    *,
    user: AbstractBaseUser,
    question: str,
    settings: dict[str, Any],
    conversation_id: int | None,
    parent_id: int | None,
    most_streaming: int | None = None,
) -> Answer:
    """Create the answer row (and its conversation if new) before the stream starts.

    ``most_streaming``: refuse with ``TooMany`` when the user already has that many
    answers streaming. The rows are the count, so every socket and every web process
    agrees; the user's row is locked first so two asks at once cannot both pass.
    """
    if most_streaming is not None:
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        streaming_check(user, most_streaming)
    if conversation_id is None:
        conversation = Conversation.objects.create(owner_id=user.pk, title=question[:200])
    else:
        found = access.conversations_visible(user).select_for_update().filter(pk=conversation_id).first()
        if found is None:
            raise _conversation_missing(conversation_id)
        conversation = found
        conversation.save(update_fields=["updated_at"])
    parent = None
    if parent_id is not None:
        parent = Answer.objects.filter(pk=parent_id, conversation=conversation).first()
        if parent is None:
            raise _parent_missing(parent_id)
    return Answer.objects.create(conversation=conversation, parent=parent, question=question, settings=settings)


def follow_up_check(user: AbstractBaseUser, conversation_id: int | None, parent_id: int | None) -> None:
    """``NotFound`` when ``answer_start`` would refuse where the question goes (a conversation that is
    not the user's, a parent answer not in it): the chat checks this before it spends a search or a
    request to vLLM on the question. ``answer_start`` checks again under a lock."""
    if conversation_id is not None and not access.conversations_visible(user).filter(pk=conversation_id).exists():
        raise _conversation_missing(conversation_id)
    if parent_id is None:
        return
    # A new conversation (None) has no answers yet: any parent is missing from it.
    if conversation_id is None or not Answer.objects.filter(pk=parent_id, conversation_id=conversation_id).exists():
        raise _parent_missing(parent_id)


def _conversation_missing(conversation_id: int) -> NotFound:
    return NotFound(_("대화 %(id)s을(를) 찾을 수 없습니다.") % {"id": conversation_id})


def _parent_missing(parent_id: int) -> NotFound:
    return NotFound(_("답변 %(id)s을(를) 이 대화에서 찾을 수 없습니다.") % {"id": parent_id})


def streaming_check(user: AbstractBaseUser, most_streaming: int) -> None:
    """``TooMany`` when the user already has ``most_streaming`` answers streaming."""
    streaming = streaming_count(user)
    if streaming >= most_streaming:
        raise TooMany(
            _("답변 중인 질문이 이미 %(n)d개입니다 (한 사람이 동시에 %(most)d개까지). 하나가 끝나면 다시 물어보세요.")
            % {"n": streaming, "most": most_streaming}
        )


def streaming_count(user: AbstractBaseUser) -> int:
    """``answers_streaming(user).count()``, in SQL written out: the chat asks it before every search,
    and building the ORM's query costs ~0.6 ms where running it costs ~0.1 (SQLite, two cores).
    ``tests/rag/test_conversations.py`` holds the two to the same answer."""
    answer, conversation = (connection.ops.quote_name(m._meta.db_table) for m in (Answer, Conversation))
    since = connection.ops.adapt_datetimefield_value(_alive_since())
    with connection.cursor() as cursor:
        cursor.execute(
            # Only the models' own table names go into the text (quoted); every value is a parameter.
            f"SELECT COUNT(*) FROM {answer} a JOIN {conversation} c ON a.conversation_id = c.id "  # noqa: S608
            "WHERE c.owner_id = %s AND a.status = %s AND a.beat_at >= %s",
            [user.pk, Answer.Status.STREAMING.value, since],
        )
        row = cursor.fetchone()
    return int(row[0])


def answers_streaming(user: AbstractBaseUser) -> QuerySet[Answer]:
    return Answer.objects.filter(
        conversation__owner_id=user.pk, status=Answer.Status.STREAMING, beat_at__gte=_alive_since()
    )


def _alive_since() -> Any:
    return timezone.now() - timedelta(seconds=keeper.ORPHAN_S)


def answers_orphaned_stop(user: AbstractBaseUser | AnonymousUser | None = None) -> int:
    """Save stopped every answer (the user's, or everyone's) left "streaming" by a process that is gone
    (``rag.keeper``): with the text it had written, and a notice saying why the rest is missing. The
    worker's timer calls it for everyone; a conversation's page for its reader, before reading.
    How many were saved."""
    orphaned = Answer.objects.filter(status=Answer.Status.STREAMING, beat_at__lt=_alive_since())
    if user is not None:
        orphaned = orphaned.filter(conversation__owner_id=user.pk)
    kept = said.kept(
        said.gettext(
            "이 답변을 보내던 웹 프로세스가 답변 도중 멈췄습니다. 그때까지 저장된 부분만 남았습니다. 다시 물어보세요."
        )
    )
    notice = {"code": CUT_OFF, "message": kept.text, "said": kept.form}
    saved = 0
    for answer in orphaned.only("pk", "timings"):
        # The timings its keeper wrote (those measured before the cut), no estimate: it never ended.
        timings = answer.timings | {"notices": [*(answer.timings.get("notices") or []), notice]}
        if timings.get("estimate_state") == "pending":
            timings["estimate_state"] = "cut"
        # Only while still streaming and unstamped: a process that was slow, not gone, finishes it itself.
        saved += Answer.objects.filter(pk=answer.pk, status=Answer.Status.STREAMING, beat_at__lt=_alive_since()).update(
            status=Answer.Status.STOPPED, timings=timings
        )
    return saved


def answer_finish(*, answer_id: int, run: AnswerRun, status: Answer.Status) -> Answer:
    """Save what the run produced: full, stopped (partial text kept) or failed. Its error and notices
    are kept to be said in each reader's language (``labapp.said``), without an address's credentials."""
    notices = []
    for notice in run.notices:
        kept = said.kept(notice["message"])
        notices.append({"code": notice["code"], "message": kept.text, "said": kept.form})
    row = run.row_fields()
    row["timings"] |= {"notices": notices}
    Answer.objects.filter(pk=answer_id).update(status=status, **row, **Answer.error_fields(run.error))
    return Answer.objects.get(pk=answer_id)


def answer_browser_timing(
    *, user: AbstractBaseUser, answer_id: int, first_token_ms: float | None, done_ms: float | None
) -> dict[str, Any] | None:
    """Store what the browser measured and the websocket overhead it implies."""
    answer = access.answers_visible(user).filter(pk=answer_id).first()
    if answer is None:
        return None
    timings = dict(answer.timings)
    timings["browser"] = {"first_token_ms": first_token_ms, "done_ms": done_ms}
    server_first = timings.get("server_first_token_ms")
    if first_token_ms is not None and server_first is not None:
        # Browser: send → first token frame; server: question received → first token frame sent.
        # The difference is the websocket's own cost (both directions plus the browser's event loop).
        timings["websocket_overhead_ms"] = round(first_token_ms - server_first, 1)
    answer.timings = timings
    answer.save(update_fields=["timings"])
    return timings


def answer_payload(answer: Answer) -> dict[str, Any]:
    """What the page needs to draw a saved answer exactly like a live one."""
    return {
        "answer_id": answer.pk,
        "conversation": answer.conversation_id,
        "parent_id": answer.parent_id,
        "question": answer.question,
        "settings": answer.settings,
        "text": answer.text,
        "status": answer.status,
        "error": answer.error_shown,  # in the reader's language, without credentials
        "sources": answer.sources,
        "timings": answer.timings
        | {"notices": _notices_shown(answer.timings.get("notices") or [])}
        | _engine_shown(answer),
        "prompt": answer.prompt,
    }


def _engine_shown(answer: Answer) -> dict[str, Any]:
    """The engine the answer was asked on, its name in the reader's language (none saved: nothing to add)."""
    engine = answer.timings.get("engine")
    if not isinstance(engine, dict):
        return {}
    name = said.shown(engine.get("name", ""), engine.get("name_said"))
    return {"engine": {k: v for k, v in engine.items() if k != "name_said"} | {"name": name}}


def _notices_shown(notices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An answer's saved notices in the reader's language (an answer saved before they were kept: as written)."""
    return [{"code": n.get("code"), "message": said.shown(n.get("message", ""), n.get("said"))} for n in notices]
