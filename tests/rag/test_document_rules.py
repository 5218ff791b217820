"""Who may upload where, and the limits on uploads: class collections, same-name replacement,
the request size, the per-user quota, PDFs read by the worker (pages and time bounded) and
documents whose task the broker lost (in-process, no outside services)."""

from __future__ import annotations

import io
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from labapp.models import Classroom, Membership
from rag import documents, services
from rag.access import user_collection_name
from rag.documents import MAX_BYTES, DocumentRejected
from rag.models import Document
from tests.rag.test_documents import KOREAN_MD, minimal_pdf

pytestmark = pytest.mark.django_db

NAME_TAKEN = "다른 사람이 올린 같은 이름의 파일"


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def upload(client: Client, filename: str, data: bytes, *, collection: str = "mine") -> Any:
    return client.post("/documents/", {"file": SimpleUploadedFile(filename, data), "collection": collection})


def saved(owner: User, collection: str, filename: str = "규정.md", **values: Any) -> Document:
    fields: dict[str, Any] = {"title": "규정", "kind": "md", "size_bytes": 10, "text": "원래 내용", "content_hash": "x"}
    return Document.objects.create(owner=owner, collection=collection, filename=filename, **(fields | values))


def two_page_pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _page in range(2):
        writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- class collections: instructors (and admins) add material, learners their own -----------


def test_a_learner_is_not_offered_and_cannot_upload_into_their_class_collection(
    learner: User, room: Classroom, instructor: User, enqueued: list[int]
) -> None:
    key = f"class-{room.pk}"
    assert f'value="{key}"' not in client_for(learner).get("/documents/").content.decode()
    assert f'value="{key}"' in client_for(instructor).get("/documents/").content.decode()
    response = upload(client_for(learner), "규정.md", KOREAN_MD.encode(), collection=key)
    assert response.status_code == 200 and 'role="alert"' in response.content.decode()
    assert not Document.objects.exists() and enqueued == []


def test_the_service_refuses_a_learner_upload_into_a_class_collection(learner: User, room: Classroom) -> None:
    with pytest.raises(DocumentRejected, match="강사만"):
        services.document_upload(
            owner=learner, collection=room.collection_name, filename="a.md", kind="md", size_bytes=1, text="x"
        )
    with pytest.raises(DocumentRejected):
        services.document_upload(
            owner=learner, collection=f"user-{learner.pk + 1}", filename="a.md", kind="md", size_bytes=1, text="x"
        )
    assert not Document.objects.exists()


def test_the_instructor_and_an_admin_member_upload_into_the_class_collection(
    instructor: User, room: Classroom, enqueued: list[int]
) -> None:
    admin = User.objects.create_user(username="admin", is_staff=True)
    Membership.objects.create(classroom=room, user=admin)
    key = f"class-{room.pk}"
    assert upload(client_for(instructor), "규정.md", KOREAN_MD.encode(), collection=key).status_code == 302
    assert upload(client_for(admin), "공지.md", KOREAN_MD.encode(), collection=key).status_code == 302
    rows = Document.objects.order_by("pk").values_list("owner__username", "collection")
    assert list(rows) == [("inst", room.collection_name), ("admin", room.collection_name)]


def test_a_learner_cannot_take_over_the_instructors_class_document_by_its_name(
    learner: User, instructor: User, room: Classroom, enqueued: list[int]
) -> None:
    theirs = saved(instructor, room.collection_name)
    response = upload(
        client_for(learner), "규정.md", "내 글이 모두의 프롬프트에".encode(), collection=f"class-{room.pk}"
    )
    assert response.status_code == 200
    with pytest.raises(DocumentRejected):
        services.document_upload(
            owner=learner, collection=room.collection_name, filename="규정.md", kind="md", size_bytes=1, text="탈취"
        )
    theirs.refresh_from_db()
    assert (theirs.owner, theirs.text) == (instructor, "원래 내용") and enqueued == []
    assert client_for(learner).post(f"/documents/{theirs.pk}/delete/").status_code == 404


def test_a_re_upload_replaces_only_the_same_owners_file_of_that_name(
    instructor: User, room: Classroom, enqueued: list[int]
) -> None:
    colleague = User.objects.create_user(username="co-inst")
    Membership.objects.create(classroom=room, user=colleague, role=Membership.Role.INSTRUCTOR)
    theirs = saved(instructor, room.collection_name)
    refused = upload(client_for(colleague), "규정.md", KOREAN_MD.encode(), collection=f"class-{room.pk}")
    assert refused.status_code == 200 and NAME_TAKEN in refused.content.decode()
    theirs.refresh_from_db()
    assert (theirs.owner, theirs.text, Document.objects.count(), enqueued) == (instructor, "원래 내용", 1, [])

    replaced = upload(client_for(instructor), "규정.md", KOREAN_MD.encode(), collection=f"class-{room.pk}")
    assert replaced.status_code == 302
    theirs.refresh_from_db()
    assert theirs.text == KOREAN_MD.strip() and enqueued == [theirs.pk]


# --- the request size: refused with 413 before the body is read ----------------------------


class UnreadableBody(io.RawIOBase):
    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the body was read")

    def readline(self, size: int | None = -1) -> bytes:
        raise AssertionError("the body was read")


def test_a_request_declaring_a_body_over_the_limit_gets_413_unread(learner: User, settings: Any) -> None:
    declared: dict[str, Any] = {"CONTENT_LENGTH": str(settings.REQUEST_MAX_BYTES + 1), "wsgi.input": UnreadableBody()}
    multipart = "multipart/form-data; boundary=x"
    response = client_for(learner).generic("POST", "/documents/", b"", content_type=multipart, **declared)
    assert response.status_code == 413
    body = response.content.decode()
    assert "요청이 너무 큽니다" in body and "5 MB" in body and "아무것도 저장하지 않았습니다" in body
    assert not Document.objects.exists()
    assert Client().generic("POST", "/documents/", b"", content_type=multipart, **declared).status_code == 413


def test_a_file_just_over_the_limit_is_refused_and_one_at_the_limit_is_saved(
    learner: User, enqueued: list[int]
) -> None:
    client = client_for(learner)
    assert upload(client, "big.txt", b"a" * (MAX_BYTES + 64 * 1024)).status_code == 413
    assert not Document.objects.exists()
    assert upload(client, "limit.txt", b"a" * MAX_BYTES).status_code == 302
    assert Document.objects.get().size_bytes == MAX_BYTES


# --- the per-user quota ------------------------------------------------------------------------


def test_an_upload_past_the_document_count_quota_is_refused_and_a_replacement_is_not(
    learner: User, settings: Any, enqueued: list[int]
) -> None:
    settings.DOCUMENTS_MAX_PER_USER = 2
    mine = user_collection_name(learner)
    saved(learner, mine, "a.md")
    saved(learner, mine, "b.md")
    refused = upload(client_for(learner), "c.md", KOREAN_MD.encode())
    assert refused.status_code == 200 and "2개까지" in refused.content.decode()
    assert sorted(Document.objects.values_list("filename", flat=True)) == ["a.md", "b.md"] and enqueued == []
    assert upload(client_for(learner), "a.md", KOREAN_MD.encode()).status_code == 302  # replaces, adds none
    assert Document.objects.count() == 2


def test_an_upload_past_the_size_quota_is_refused(learner: User, settings: Any, enqueued: list[int]) -> None:
    settings.DOCUMENTS_MAX_MB_PER_USER = 1
    saved(learner, user_collection_name(learner), "a.md", size_bytes=900 * 1024)
    refused = upload(client_for(learner), "b.md", b"x" * 200 * 1024)
    assert refused.status_code == 200 and "1 MB" in refused.content.decode()
    assert Document.objects.count() == 1 and enqueued == []


# --- PDFs: stored by the request, read by the worker within pages and time ---------------------


def test_a_pdf_is_stored_unread_by_the_request_and_read_by_the_worker(
    learner: User, enqueued: list[int], no_indexing: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pdf = minimal_pdf(["연차는 입사 첫해에 15일입니다."])
    with monkeypatch.context() as request_time:
        request_time.setattr(documents, "pdf_text", lambda *a, **k: pytest.fail("parsed in the web request"))
        assert upload(client_for(learner), "규정.pdf", pdf).status_code == 302
    stored = Document.objects.get()
    assert (stored.kind, stored.text, bytes(stored.raw), enqueued) == ("pdf", "", pdf, [stored.pk])
    done = services.document_ingest(document=stored, sizes=(500,))
    assert done.status == Document.Status.READY, done.error
    assert "연차는 입사 첫해에 15일입니다." in done.text and bytes(done.raw) == b""
    assert no_indexing == [done.text]


def test_a_file_that_does_not_start_like_a_pdf_is_refused_at_once(learner: User, enqueued: list[int]) -> None:
    response = upload(client_for(learner), "renamed.pdf", "그냥 텍스트".encode())
    assert response.status_code == 200 and "PDF를 읽을 수 없습니다" in response.content.decode()
    assert not Document.objects.exists()


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"%PDF-1.4\nnope", "PDF를 읽을 수 없습니다"), (two_page_pdf(), "PDF가 너무 깁니다 (2쪽)")],
    ids=["broken", "too-many-pages"],
)
def test_a_pdf_the_worker_cannot_read_fails_with_the_reason(
    learner: User, settings: Any, no_indexing: list[str], data: bytes, reason: str
) -> None:
    settings.PDF_MAX_PAGES = 1
    stored = saved(learner, user_collection_name(learner), "x.pdf", kind="pdf", text="", raw=data)
    done = services.document_ingest(document=stored, sizes=(500,))
    assert (done.status, done.progress) == (Document.Status.FAILED, 0)
    assert reason in done.error and no_indexing == []


def test_a_pdf_read_past_the_time_limit_is_stopped_and_fails_with_the_reason(
    learner: User, settings: Any, no_indexing: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PDF_TIMEOUT_S = 1
    monkeypatch.setattr(documents, "PDF_COMMAND", (sys.executable, "-c", "import time; time.sleep(600)"))
    stored = saved(learner, user_collection_name(learner), "slow.pdf", kind="pdf", text="", raw=minimal_pdf(["a"]))
    done = services.document_ingest(document=stored, sizes=(500,))
    assert done.status == Document.Status.FAILED and "1초가 넘게 걸려" in done.error and no_indexing == []


# --- a document whose task the broker lost ----------------------------------------------------


def test_a_document_queued_too_long_is_sent_again_once_then_failed(
    learner: User, settings: Any, enqueued: list[int]
) -> None:
    settings.DOCUMENT_QUEUED_STALE_S = 60
    mine = user_collection_name(learner)
    lost = saved(learner, mine, "lost.md", status=Document.Status.QUEUED)
    fresh = saved(learner, mine, "fresh.md", status=Document.Status.QUEUED)
    long_ago = timezone.now() - timedelta(seconds=61)
    Document.objects.filter(pk=lost.pk).update(updated_at=long_ago)
    rows = client_for(learner)

    rows.get("/documents/rows/")
    rows.get("/documents/rows/")
    lost.refresh_from_db()
    assert enqueued == [lost.pk] and lost.status == Document.Status.QUEUED and lost.resent_at is not None

    Document.objects.filter(pk=lost.pk).update(resent_at=long_ago)  # still queued a while after the re-send
    assert services.documents_reap_stale() == 1
    lost.refresh_from_db()
    assert lost.status == Document.Status.FAILED and "한 번 더 보냈지만" in lost.error
    assert Document.objects.get(pk=fresh.pk).status == Document.Status.QUEUED and enqueued == [lost.pk]


def test_a_re_upload_clears_the_re_send_mark(learner: User, enqueued: list[int]) -> None:
    stored = saved(learner, user_collection_name(learner), status=Document.Status.FAILED, resent_at=timezone.now())
    assert upload(client_for(learner), "규정.md", KOREAN_MD.encode()).status_code == 302
    stored.refresh_from_db()
    assert (stored.status, stored.resent_at, enqueued) == (Document.Status.QUEUED, None, [stored.pk])
