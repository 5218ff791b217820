"""Uploads ingested by the real Celery worker into the real Chroma; preview token counts from the real engine.

The worker and the web server are separate processes on the run's file database.
pytest-django's test database lives only in this process (SQLite in memory), so
these tests use ``shared_database``: this process's default connection pointed
at the file database for the length of a test.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from rag import chunking, services, vectorstore
from rag.access import user_collection_name
from rag.models import Document, IndexedSource
from tests import harness

pytestmark = [pytest.mark.integration]

INGEST_TIMEOUT_S = 120.0

HANDBOOK = """# 사내 규정 안내

## 연차

연차는 입사 첫해에 15일이 주어집니다. 3년 이상 근속하면 2년마다 하루씩 늘어나며, 최대 25일까지 쌓입니다.
쓰지 않은 연차는 다음 해 3월 말까지 이월할 수 있고, 그 뒤에는 수당으로 정산합니다.

## 재택근무

재택근무는 주 2회까지 신청할 수 있습니다. 신청은 전날 오후 6시까지 팀장에게 메신저로 보냅니다.
보안 때문에 공용 와이파이에서는 사내 시스템에 접속하지 않습니다.

## 출장비

출장 숙박비는 1박에 12만 원까지 실비로 지급합니다. 영수증은 출장이 끝난 뒤 7일 안에 올립니다.
항공권은 이코노미석을 원칙으로 하며, 6시간이 넘는 비행은 예외로 합니다.

## 교육 지원

업무와 관련된 외부 교육은 연 200만 원까지 지원합니다. 교육을 마치면 팀 안에서 20분 동안 배운 내용을 나눕니다.
""" + "\n".join(
    f"\n## 부록 {n}\n\n부록 {n}번은 위 규정의 예시를 모은 것입니다. 예시는 분기마다 인사팀이 새로 고칩니다."
    for n in range(1, 25)
)

REVISED = """# 사내 규정 안내 (개정)

## 연차

개정된 규정에서 연차는 입사 첫해부터 18일입니다. 이월은 더 이상 허용하지 않습니다.

## 반려동물

사무실에는 목요일마다 반려견을 데려올 수 있습니다. 산책 당번은 층별로 돌아가며 맡습니다.
"""


@pytest.fixture
def owner(document_owner: User) -> User:
    return document_owner


@pytest.fixture
def owner_client(owner: User) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def wait_until_done(document_id: int, worker: harness.Service) -> Document:
    deadline = time.monotonic() + INGEST_TIMEOUT_S
    while time.monotonic() < deadline:
        document = Document.objects.get(pk=document_id)
        if document.status in (Document.Status.READY, Document.Status.FAILED):
            return document
        time.sleep(0.5)
    raise AssertionError(f"not ingested within {INGEST_TIMEOUT_S:.0f} s; worker log:\n{worker.log_tail()}")


def stored(document: Document, size: int) -> list[vectorstore.Hit]:
    return vectorstore.get_where(document.collection, {"$and": [{"source": document.source}, {"chunk_size": size}]})


def assert_indexed_exactly(document: Document, text: str) -> None:
    for size in chunking.CHUNK_SIZES:
        expected = chunking.split(text, size=size)
        hits = stored(document, size)
        assert len(hits) == len(expected) == document.chunk_counts[str(size)], size
        assert sorted(hit.document for hit in hits) == sorted(chunk.text for chunk in expected)
        assert {hit.metadata["document_id"] for hit in hits} == {str(document.pk)}
        assert {hit.metadata["filename"] for hit in hits} == {document.filename}
        row = IndexedSource.objects.get(collection=document.collection, source=document.source, chunk_size=size)
        assert row.chunk_count == len(expected)
    assert len(vectorstore.get_where(document.collection, {"source": document.source})) == sum(
        len(chunking.split(text, size=size)) for size in chunking.CHUNK_SIZES
    )


def upload(client: Client, filename: str, text: str) -> None:
    response = client.post("/documents/", {"file": SimpleUploadedFile(filename, text.encode()), "collection": "mine"})
    assert response.status_code == 302, response.content.decode()[-2000:]


def test_an_uploaded_korean_file_is_ingested_by_the_worker_replaced_on_re_upload_and_found(
    owner: User, owner_client: Client, celery_worker: harness.Service, chroma_server: str
) -> None:
    upload(owner_client, "규정.md", HANDBOOK)
    document = wait_until_done(Document.objects.get(owner=owner).pk, celery_worker)
    assert document.status == Document.Status.READY, document.error
    assert document.progress == 100 and document.collection == user_collection_name(owner)
    assert_indexed_exactly(document, HANDBOOK.strip())
    assert len(chunking.split(HANDBOOK, size=200)) > len(chunking.split(HANDBOOK, size=1000)) > 1

    upload(owner_client, "규정.md", REVISED)
    revised = wait_until_done(document.pk, celery_worker)
    assert Document.objects.filter(owner=owner).count() == 1 and revised.pk == document.pk
    assert revised.status == Document.Status.READY, revised.error
    assert_indexed_exactly(revised, REVISED.strip())
    assert not any(
        "출장" in hit.document for hit in vectorstore.get_where(revised.collection, {"source": revised.source})
    )

    page = owner_client.get(
        "/retrieval/", {"question": "반려견은 언제 데려올 수 있나요?", "collection": "mine", "chunk_size": "500"}
    )
    body = page.content.decode()
    assert page.status_code == 200
    first = body.split('data-rank="1"', 1)[1].split("</tr>", 1)[0]
    assert "목요일마다 반려견을" in first and f"/documents/{document.pk}/preview/" in first
    assert "검색 불가" not in body and " ms" in body

    deleted = owner_client.post(f"/documents/{document.pk}/delete/")
    assert deleted.status_code == 302
    assert vectorstore.get_where(document.collection, {"source": document.source}) == []
    assert not IndexedSource.objects.filter(collection=document.collection, source=document.source).exists()


def test_a_pdf_is_read_by_the_worker_and_indexed(
    owner: User, owner_client: Client, celery_worker: harness.Service, chroma_server: str
) -> None:
    from tests.rag.test_documents import minimal_pdf

    lines = ["재택근무는 주 2회까지 신청할 수 있습니다.", "Prefill reads the whole prompt at once."]
    response = owner_client.post(
        "/documents/", {"file": SimpleUploadedFile("규정.pdf", minimal_pdf(lines)), "collection": "mine"}
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    document = wait_until_done(Document.objects.get(owner=owner).pk, celery_worker)
    assert document.status == Document.Status.READY, document.error
    assert all(line in document.text for line in lines) and bytes(document.raw) == b""
    assert_indexed_exactly(document, document.text)


def test_the_rows_stop_polling_once_the_worker_is_done(
    owner: User, owner_client: Client, celery_worker: harness.Service, chroma_server: str
) -> None:
    upload(owner_client, "짧은 메모.txt", "재택근무는 주 2회까지 신청할 수 있습니다.")
    rows = owner_client.get("/documents/rows/").content.decode()
    document = Document.objects.get(owner=owner)
    if document.status in (Document.Status.QUEUED, Document.Status.INGESTING):
        assert 'hx-trigger="every 1s"' in rows
    assert wait_until_done(document.pk, celery_worker).status == Document.Status.READY
    rows = owner_client.get("/documents/rows/").content.decode()
    assert "hx-trigger" not in rows and 'data-status="ready"' in rows


def test_a_failure_half_way_leaves_nothing_of_the_document_in_chroma(
    owner: User, chroma_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process, with the real Chroma and embeddings: the 1000-character pass breaks."""
    real_index = services.source_index

    def breaking_index(**kwargs: Any) -> tuple[bool, int]:
        if kwargs["sizes"] == (1000,):
            raise vectorstore.RetrievalUnavailable("Chroma went away in the middle")
        return real_index(**kwargs)

    monkeypatch.setattr(services, "source_index", breaking_index)
    document = Document.objects.create(
        owner=owner,
        collection=user_collection_name(owner),
        title="규정",
        filename="규정.md",
        kind="md",
        size_bytes=len(HANDBOOK.encode()),
        text=HANDBOOK.strip(),
        content_hash="h",
    )
    done = services.document_ingest(document=document)
    assert done.status == Document.Status.FAILED and "went away" in done.error
    assert vectorstore.get_where(document.collection, {"source": document.source}) == []
    assert not IndexedSource.objects.filter(source=document.source, collection=document.collection).exists()


def test_the_preview_counts_tokens_with_the_engines_tokenizer(owner: User, owner_client: Client, engine: str) -> None:
    document = Document.objects.create(
        owner=owner,
        collection=user_collection_name(owner),
        title="규정",
        filename="규정.md",
        kind="md",
        size_bytes=len(HANDBOOK.encode()),
        text=HANDBOOK.strip(),
        content_hash="h",
    )
    page = owner_client.get(f"/documents/{document.pk}/preview/?size=200")
    body = page.content.decode()
    assert page.status_code == 200
    assert "vLLM 연결 불가" not in body, body[body.find("vLLM") - 200 : body.find("vLLM") + 400]
    counts = [int(n) for n in re.findall(r'<td class="tokens">(\d+)</td>', body)]
    assert len(counts) == len(chunking.split(HANDBOOK, size=200))
    assert all(count > 0 for count in counts)
    # Korean text costs more than one token per few characters, never zero and never one per byte.
    assert sum(counts) < len(HANDBOOK.encode())


def test_an_instructors_upload_is_ingested_into_the_class_collection_and_found_by_the_class(
    owner: User, owner_client: Client, celery_worker: harness.Service, chroma_server: str
) -> None:
    from labapp.models import Classroom, Membership

    classroom = Classroom.objects.create(name="16장 실습반", join_code=f"c-{uuid.uuid4().hex[:8]}")
    classmate = User.objects.create_user(username=f"mate-{uuid.uuid4().hex[:8]}")
    outsider = User.objects.create_user(username=f"out-{uuid.uuid4().hex[:8]}")
    Membership.objects.create(classroom=classroom, user=owner, role=Membership.Role.INSTRUCTOR)
    Membership.objects.create(classroom=classroom, user=classmate)
    key = f"class-{classroom.pk}"
    try:
        response = owner_client.post(
            "/documents/", {"file": SimpleUploadedFile("반 규정.md", HANDBOOK.encode()), "collection": key}
        )
        assert response.status_code == 302, response.content.decode()[-2000:]
        document = wait_until_done(Document.objects.get(owner=owner).pk, celery_worker)
        assert document.status == Document.Status.READY and document.collection == classroom.collection_name
        assert_indexed_exactly(document, HANDBOOK.strip())

        mate = Client()
        mate.force_login(classmate)
        page = mate.get("/retrieval/", {"question": "재택근무는 주 몇 회까지 신청할 수 있나요?", "collection": key})
        assert "주 2회까지" in page.content.decode().split('data-rank="1"', 1)[1].split("</tr>", 1)[0]
        assert mate.get(f"/documents/{document.pk}/preview/").status_code == 200
        assert mate.post(f"/documents/{document.pk}/delete/").status_code == 404  # only the uploader or instructor

        stranger = Client()
        stranger.force_login(outsider)
        assert stranger.get(f"/documents/{document.pk}/preview/").status_code == 404
        refused = stranger.get("/retrieval/", {"question": "재택근무", "collection": key}).content.decode()
        assert "주 2회까지" not in refused
    finally:
        for document in Document.objects.filter(collection=classroom.collection_name):
            services.document_delete(document=document)
        classroom.delete()
        classmate.delete()
        outsider.delete()
