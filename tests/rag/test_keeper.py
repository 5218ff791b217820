"""An answer's row kept current while it streams (``rag.keeper``), and saved stopped once its process is
gone (``conversations.answers_orphaned_stop``): a web process killed mid-answer loses at most the last
moment of its text, never the answer. The kill itself, on real processes: tests/ops/test_rehearsal.py
(the web fault) and tests/browser/test_browser_cut.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone, translation

from labapp import said
from rag import conversations, keeper
from rag.models import Answer, Conversation
from rag.vllm.records import RequestRecord

pytestmark = pytest.mark.django_db(transaction=True)  # the keeper writes from a thread of its own


def _streaming(owner: Any, *, text: str = "", stamped_s_ago: float = 0) -> Answer:
    conversation = Conversation.objects.create(owner=owner, title="t")
    answer = Answer.objects.create(conversation=conversation, question="q", text=text)
    Answer.objects.filter(pk=answer.pk).update(beat_at=timezone.now() - timedelta(seconds=stamped_s_ago))
    return answer


def _text_of(record: RequestRecord) -> Callable[[], dict[str, Any]]:
    return lambda: {"text": record.generated_text}


def _row(answer: Answer) -> Answer:
    return Answer.objects.get(pk=answer.pk)


def test_the_keeper_writes_new_text_at_once_then_at_most_every_gap_and_stops_before_the_final_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keeper, "TEXT_GAP_S", 0.2)
    answer = _streaming(get_user_model().objects.create(username="kept"), stamped_s_ago=60)
    record = RequestRecord()

    async def stream() -> tuple[str, int, str, int]:
        kept = keeper.Keeper(answer.pk, _text_of(record))
        record.generated_text = "프리필은"
        kept.start()
        await asyncio.sleep(0.1)
        first = (
            await asyncio.to_thread(_row, answer)
        ).text  # the text streamed before the keeper started: written at once
        for word in (" 프롬프트를", " 한 번에", " 읽습니다"):  # three tokens inside one gap: one more write
            record.generated_text += word
            kept.nudge()
        await asyncio.sleep(0.5)
        after_gap, writes = (await asyncio.to_thread(_row, answer)).text, kept.writes
        await kept.stop()
        record.generated_text += " (끝)"
        kept.nudge()
        await asyncio.sleep(0.3)
        return first, writes, after_gap, kept.writes

    first, writes, after_gap, writes_after_stop = asyncio.run(stream())
    assert first == "프리필은"
    assert after_gap == "프리필은 프롬프트를 한 번에 읽습니다" and writes == 2
    assert writes_after_stop == writes and _row(answer).text == after_gap  # nothing after stop
    assert timezone.now() - _row(answer).beat_at < timedelta(seconds=5)  # stamped as alive


def test_the_keeper_stamps_an_answer_still_waiting_for_its_first_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keeper, "BEAT_S", 0.1)
    monkeypatch.setattr(keeper, "TEXT_GAP_S", 0.0)
    answer = _streaming(get_user_model().objects.create(username="prefilling"), stamped_s_ago=60)

    async def wait() -> int:
        kept = keeper.Keeper(answer.pk, _text_of(RequestRecord()))
        kept.start()
        await asyncio.sleep(0.55)
        await kept.stop()
        return kept.writes

    assert asyncio.run(wait()) >= 3  # no text yet, stamped all the same: vLLM may read a long prompt
    assert timezone.now() - _row(answer).beat_at < timedelta(seconds=1)


def test_the_keeper_ends_by_itself_once_its_row_is_no_longer_streaming() -> None:
    answer = _streaming(get_user_model().objects.create(username="finished"))
    Answer.objects.filter(pk=answer.pk).update(status=Answer.Status.DONE, text="끝난 답")

    async def keep() -> bool:
        kept = keeper.Keeper(answer.pk, _text_of(RequestRecord(generated_text="늦은 글")))
        kept.start()
        await asyncio.sleep(0.2)
        assert kept.task is not None
        return kept.task.done()

    assert asyncio.run(keep())
    assert _row(answer).text == "끝난 답"  # a finished answer's text is never overwritten


def test_an_answer_whose_process_stopped_stamping_is_saved_stopped_with_its_text_and_a_notice_in_each_language() -> (
    None
):
    User = get_user_model()
    learner, other = User.objects.create(username="cut"), User.objects.create(username="alive")
    gone = _streaming(learner, text="프리필은 프롬", stamped_s_ago=keeper.ORPHAN_S + 1)
    kept_timings = {"client": {"ttft_ms": 412.5}, "estimate_state": "pending"}  # as its keeper last wrote them
    Answer.objects.filter(pk=gone.pk).update(timings=kept_timings)
    fresh = _streaming(learner, text="디코드는", stamped_s_ago=1)  # its process still writes
    elsewhere = _streaming(other, text="KV", stamped_s_ago=keeper.ORPHAN_S + 1)
    assert conversations.streaming_count(learner) == 1  # the orphan no longer counts against the limit

    assert conversations.answers_orphaned_stop(learner) == 1  # a page reads only its reader's
    assert _row(elsewhere).status == Answer.Status.STREAMING
    assert conversations.answers_orphaned_stop() == 1  # the worker's timer: everyone's
    assert conversations.answers_orphaned_stop() == 0
    cut = _row(gone)
    assert (cut.status, cut.text) == (Answer.Status.STOPPED, "프리필은 프롬")
    assert _row(fresh).status == Answer.Status.STREAMING
    assert _row(elsewhere).status == Answer.Status.STOPPED
    [notice] = cut.timings["notices"]
    assert cut.timings["client"] == {"ttft_ms": 412.5}  # what was measured before the cut stays on its card
    assert cut.timings["estimate_state"] == "cut"  # never ended: no estimate, and the card says why
    assert notice["code"] == conversations.CUT_OFF
    for language, words in (("ko", "웹 프로세스가 답변 도중 멈췄습니다"), ("en", "web process")):
        with translation.override(language):
            [shown] = conversations.answer_payload(cut)["timings"]["notices"]
        assert words in shown["message"], shown
    assert said.kept(notice["message"]).text  # kept as a key, said in the reader's language


def test_a_conversation_page_shows_an_orphaned_answer_stopped_not_decoding() -> None:
    learner = get_user_model().objects.create(username="reader")
    gone = _streaming(learner, text="프리필은", stamped_s_ago=keeper.ORPHAN_S + 1)
    client = Client()
    client.force_login(learner)
    page = client.get(f"/chat/{gone.conversation_id}/")
    assert page.status_code == 200
    assert _row(gone).status == Answer.Status.STOPPED
    assert '"status": "stopped"' in page.content.decode()


def test_the_first_token_after_a_stamp_alone_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row is written before vLLM's first token (a stamp, no text): that write must not make the
    first token wait a gap, or a process killed right after it would leave no text (the rehearsal's
    web fault found it: 3 tokens shown, 0 saved)."""
    monkeypatch.setattr(keeper, "TEXT_GAP_S", 30.0)
    answer = _streaming(get_user_model().objects.create(username="first-token"))
    record = RequestRecord()

    async def stream() -> str:
        kept = keeper.Keeper(answer.pk, _text_of(record))
        kept.start()
        await asyncio.sleep(0.1)  # the stamp is written
        record.generated_text = "프리필"
        kept.nudge()
        await asyncio.sleep(0.2)
        text = (await asyncio.to_thread(_row, answer)).text
        await kept.stop()
        return text

    assert asyncio.run(stream()) == "프리필"


def test_each_write_sends_only_the_fields_changed_since_the_last_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt (kilobytes with its chunks) and the sources are written once, not on every tick; a source
    changed in place (its token count, set after the prompt is built) is written again."""
    monkeypatch.setattr(keeper, "TEXT_GAP_S", 0.0)
    answer = _streaming(get_user_model().objects.create(username="changed-only"))
    sent: list[set[str]] = []
    write = keeper._write

    def recording(answer_id: int, fields: dict[str, Any]) -> int:
        sent.append(set(fields))
        return write(answer_id, fields)

    monkeypatch.setattr(keeper, "_write", recording)
    record = RequestRecord()
    sources: list[dict[str, Any]] = [{"id": "c1", "tokens": None}]

    def row() -> dict[str, Any]:
        return {"text": record.generated_text, "prompt": "지시문과 자료 " * 500, "sources": sources}

    async def stream() -> None:
        kept = keeper.Keeper(answer.pk, row)
        kept.start()
        for word, tokens in (("프리필", None), ("은", None), (" 한 번에", 42)):
            record.generated_text += word
            sources[0]["tokens"] = tokens
            kept.nudge()
            await asyncio.sleep(0.15)
        await kept.stop()

    asyncio.run(stream())
    assert sent[0] == {"text", "prompt", "sources"} and sent[1:3] == [{"text"}, {"text", "sources"}]
    saved = _row(answer)
    assert saved.text == "프리필은 한 번에" and saved.sources == [{"id": "c1", "tokens": 42}]
    assert saved.prompt.startswith("지시문과 자료")
