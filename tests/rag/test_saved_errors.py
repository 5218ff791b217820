"""A document's failure and an answer's error are saved as keys and values (``labapp.said``) and read
in the reader's language, whatever language the worker or the socket wrote them in; an older row
with only its text still shows that text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import translation

from labapp.models import Classroom
from rag import chat, conversations, prompting, services, vectorstore
from rag.access import CollectionRef, user_collection_name
from rag.models import Answer, Conversation, Document

HANGUL = re.compile("[\uac00-\ud7a3]")
ENGINE_ERROR = "ConnectError: All connection attempts failed (vLLM at http://lab:s3cret@engine:8000)"


def _client(user: User, language: str) -> Client:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return client


def _failed_pdf(owner: User, monkeypatch: pytest.MonkeyPatch) -> Document:
    """A broken PDF through the real ingestion (its text read by the PDF reader), in Korean."""
    monkeypatch.setattr(vectorstore, "delete_where", lambda name, where: None)
    raw = b"%PDF-1.4\nthis is not really a pdf"
    doc = Document.objects.create(
        owner=owner, collection=user_collection_name(owner), title="broken", filename="broken.pdf",
        kind="pdf", size_bytes=len(raw), text="", raw=raw, content_hash="x",
    )  # fmt: skip
    with translation.override("ko"):
        return services.document_ingest(document=doc, sizes=(200,))


def _row_error(html: str) -> str:
    found = re.search(r'<code class="error">(.*?)</code>', html, re.S)
    assert found, html
    return found.group(1)


@pytest.mark.django_db
def test_a_document_failure_saved_in_korean_is_read_in_the_readers_language(
    learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _failed_pdf(learner, monkeypatch)
    assert doc.status == Document.Status.FAILED and "PDF를 읽을 수 없습니다" in doc.error
    english = _row_error(_client(learner, "en").get("/documents/rows/").content.decode())
    assert "The PDF cannot be read" in english and not HANGUL.search(english), english
    korean = _row_error(_client(learner, "ko").get("/documents/rows/").content.decode())
    assert "PDF를 읽을 수 없습니다" in korean


@pytest.mark.django_db
def test_a_document_failed_before_keys_were_saved_still_shows_its_text(learner: User) -> None:
    Document.objects.create(
        owner=learner, collection=user_collection_name(learner), title="old", filename="old.md", kind="md",
        size_bytes=1, text="x", content_hash="x", status=Document.Status.FAILED,
        error="RetrievalUnavailable: down at http://lab:s3cret@chroma:8000",
    )  # fmt: skip
    shown = _row_error(_client(learner, "en").get("/documents/rows/").content.decode())
    assert "RetrievalUnavailable: down" in shown and "s3cret" not in shown


def _failed_answer(owner: User) -> Answer:
    """An answer whose engine could not be reached, saved by the socket's save while in Korean."""
    conversation = Conversation.objects.create(owner=owner)
    answer = Answer.objects.create(conversation=conversation, question="q")
    run = chat.AnswerRun(
        question="q",
        settings=prompting.ChatSettings(),
        collection=CollectionRef("chapter", "chapter", "챕터", by_language=True),
        language="ko",
        stall_timeout_s=5,
    )
    with translation.override("ko"):
        run.error = chat._engine_error(ENGINE_ERROR, run.stall_timeout_s, "vLLM")
        return conversations.answer_finish(answer_id=answer.pk, run=run, status=Answer.Status.FAILED)


def _payload_error(answer: Answer, language: str) -> str:
    with translation.override(language):
        shown: Any = conversations.answer_payload(Answer.objects.get(pk=answer.pk))["error"]
    return str(shown)


@pytest.mark.django_db
def test_an_answer_error_saved_in_korean_is_read_in_the_readers_language(learner: User) -> None:
    answer = _failed_answer(learner)
    assert "vLLM에 연결할 수 없습니다" in answer.error and "s3cret" not in str(answer.error_said)
    english = _payload_error(answer, "en")
    assert english.startswith("Cannot connect to vLLM") and not HANGUL.search(english), english
    assert "All connection attempts failed" in english and "s3cret" not in english
    assert _payload_error(answer, "ko").startswith("vLLM에 연결할 수 없습니다")


@pytest.mark.django_db
def test_the_instructor_reads_a_learners_answer_error_in_english(
    learner: User, instructor: User, room: Classroom
) -> None:
    _failed_answer(learner)
    page = _client(instructor, "en").get(f"/classes/{room.pk}/learners/{learner.pk}/").content.decode()
    found = re.search(r'<span class="error">(.*?)</span>', page, re.S)
    assert found and "Cannot connect to vLLM" in found.group(1) and not HANGUL.search(found.group(1)), page


@pytest.mark.django_db
def test_an_answer_saved_before_keys_were_saved_still_shows_its_text(learner: User) -> None:
    conversation = Conversation.objects.create(owner=learner)
    old = Answer.objects.create(conversation=conversation, question="q", status="failed", error="옛 오류: boom")
    assert _payload_error(old, "en") == "옛 오류: boom"
