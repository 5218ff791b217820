"""Uploads, ingestion bookkeeping, chunk preview and the retrieval test page (in-process, no outside services)."""

from __future__ import annotations

import codecs
import dataclasses
import gc
import io
from collections.abc import Callable
from typing import Any
from unittest import mock

import aiohttp
import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import translation

from labapp.ops import scripted
from rag import chunking, retrieval, services, vectorstore
from rag.access import user_collection_name
from rag.documents import MAX_BYTES, DocumentRejected, document_text
from rag.models import Document, IndexedSource
from tests.settings import free_port

KOREAN_MD = "# 연차 규정\n\n연차는 입사 첫해에 15일입니다.\n\n미사용 연차는 다음 해로 넘어가지 않습니다.\n"


def minimal_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text pypdf can extract, Korean included (no PDF writer is installed).

    The font maps 2-byte codes to Unicode through a ToUnicode CMap; no glyphs are
    embedded, which text extraction does not need.
    """

    def hex_text(line: str) -> str:
        return "<" + "".join(f"{ord(c):04X}" for c in line) + ">"

    def stream(body: str) -> bytes:
        data = body.encode()
        return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"

    content = "BT /F1 12 Tf 72 720 Td 16 TL " + " ".join(f"{hex_text(line)} Tj T*" for line in lines) + " ET"
    to_unicode = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap "
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def "
        "/CMapName /Adobe-Identity-UCS def /CMapType 2 def "
        "1 begincodespacerange <0000> <FFFF> endcodespacerange "
        "1 beginbfrange <0000> <FFFF> <0000> endbfrange "
        "endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        stream(content),
        b"<< /Type /Font /Subtype /Type0 /BaseFont /Lab /Encoding /Identity-H"
        b" /DescendantFonts [6 0 R] /ToUnicode 7 0 R >>",
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Lab"
        b" /CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> /FontDescriptor 8 0 R >>",
        stream(to_unicode),
        b"<< /Type /FontDescriptor /FontName /Lab /Flags 4 /FontBBox [0 0 1000 1000] /ItalicAngle 0"
        b" /Ascent 800 /Descent -200 /CapHeight 700 /StemV 80 >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def blank_pdf(*, password: str | None = None) -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    if password:
        writer.encrypt(password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def rejection(filename: str, data: bytes) -> str:
    with pytest.raises(DocumentRejected) as caught:
        document_text(filename, data)
    return caught.value.reason


# Parsing and validation (rag.documents)


def test_it_reads_utf8_text_and_markdown() -> None:
    assert document_text("notes.txt", "연차는 15일\r\n".encode()) == ("txt", "연차는 15일")
    assert document_text("규정.MD", KOREAN_MD.encode()) == ("md", KOREAN_MD.strip())


def test_it_reads_utf8_with_bom_and_utf16_with_bom() -> None:
    assert document_text("a.txt", codecs.BOM_UTF8 + "가나다".encode()) == ("txt", "가나다")
    assert document_text("a.txt", "가나다".encode("utf-16")) == ("txt", "가나다")  # Python writes the BOM
    assert document_text("a.md", codecs.BOM_UTF16_BE + "가나다".encode("utf-16-be")) == ("md", "가나다")


def test_it_rejects_text_that_is_not_utf8() -> None:
    reason = rejection("a.txt", "연차는 15일".encode("cp949"))
    assert "UTF-8" in reason


def test_it_rejects_utf16_without_a_bom_and_binary_files() -> None:
    assert "UTF-8" in rejection("a.txt", "abc".encode("utf-16-le"))
    assert "UTF-8" in rejection("a.md", b"\x00\x01\x02binary\x00")


def test_it_rejects_a_wrong_type_and_names_the_allowed_ones() -> None:
    for filename in ("report.docx", "image.png", "noextension"):
        reason = rejection(filename, b"hello")
        assert ".txt" in reason and ".md" in reason and ".pdf" in reason


def test_it_rejects_a_file_over_the_limit_and_says_the_limit() -> None:
    reason = rejection("big.txt", b"a" * (MAX_BYTES + 1))
    assert "5 MB" in reason
    assert document_text("limit.txt", b"a" * MAX_BYTES)[1] == "a" * MAX_BYTES


def test_it_rejects_an_empty_file() -> None:
    assert "빈 파일" in rejection("empty.txt", b"")
    assert "빈 파일" in rejection("blank.md", b" \n\t\n")
    assert "빈 파일" in rejection("bom-only.txt", codecs.BOM_UTF8)


def test_it_extracts_text_from_a_pdf() -> None:
    pdf = minimal_pdf(["연차는 입사 첫해에 15일입니다.", "Decode: one token at a time."])
    kind, text = document_text("규정.pdf", pdf)
    assert kind == "pdf"
    assert "연차는 입사 첫해에 15일입니다." in text and "Decode: one token at a time." in text


def test_it_rejects_a_pdf_without_text_as_probably_scanned() -> None:
    assert "스캔" in rejection("scan.pdf", blank_pdf())


def test_it_rejects_a_broken_pdf() -> None:
    assert "PDF를 읽을 수 없습니다" in rejection("broken.pdf", b"%PDF-1.4\nthis is not really a pdf")
    assert "PDF를 읽을 수 없습니다" in rejection("renamed.pdf", "그냥 텍스트".encode())


def test_it_rejects_a_password_protected_pdf() -> None:
    assert "암호" in rejection("secret.pdf", blank_pdf(password="pw"))  # noqa: S106


# Upload page


@pytest.fixture
def learner(django_user_model: Any) -> User:
    user: User = django_user_model.objects.create_user(username="learner-a")
    return user


@pytest.fixture
def other_learner(django_user_model: Any) -> User:
    user: User = django_user_model.objects.create_user(username="learner-b")
    return user


@pytest.fixture
def learner_client(client: Client, learner: User) -> Client:
    client.force_login(learner)
    return client


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Document ids the upload would hand to the Celery worker."""
    from rag import tasks

    sent: list[int] = []
    monkeypatch.setattr(tasks.document_ingest, "delay", sent.append)
    return sent


def upload(client: Client, filename: str, data: bytes, *, collection: str = "mine") -> Any:
    return client.post("/documents/", {"file": SimpleUploadedFile(filename, data), "collection": collection})


def document(owner: User, **values: Any) -> Document:
    defaults: dict[str, Any] = {
        "collection": user_collection_name(owner),
        "title": "규정",
        "filename": "규정.md",
        "kind": "md",
        "size_bytes": len(KOREAN_MD.encode()),
        "text": KOREAN_MD.strip(),
        "content_hash": "x",
    }
    return Document.objects.create(owner=owner, **(defaults | values))


@pytest.mark.django_db
def test_an_upload_is_saved_and_queued_after_commit(
    learner_client: Client,
    learner: User,
    enqueued: list[int],
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(learner_client, "규정.md", KOREAN_MD.encode())
    assert response.status_code == 302
    saved = Document.objects.get()
    assert (saved.owner, saved.collection, saved.kind, saved.title) == (
        learner,
        user_collection_name(learner),
        "md",
        "규정",
    )
    assert saved.text == KOREAN_MD.strip() and saved.status == Document.Status.QUEUED
    assert enqueued == [saved.pk]
    page = learner_client.get("/documents/").content.decode()
    assert "규정.md" in page and "대기 중" in page


@pytest.mark.django_db
def test_re_uploading_a_file_name_replaces_the_document(
    learner_client: Client, enqueued: list[int], django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        upload(learner_client, "규정.md", KOREAN_MD.encode())
    first = Document.objects.get()
    Document.objects.filter(pk=first.pk).update(status=Document.Status.READY, progress=100)
    with django_capture_on_commit_callbacks(execute=True):
        upload(learner_client, "규정.md", "# 연차 규정\n\n연차는 20일로 바뀌었습니다.".encode())
    second = Document.objects.get()
    assert second.pk == first.pk and "20일" in second.text
    assert (second.status, second.progress) == (Document.Status.QUEUED, 0)
    assert enqueued == [first.pk, first.pk]


@pytest.mark.parametrize(
    ("filename", "data", "reason"),
    [
        ("slides.pptx", b"PK\x03\x04", ".txt, .md, .pdf"),
        ("big.txt", b"a" * (MAX_BYTES + 1), "5 MB"),
        ("empty.md", b"", "빈 파일"),
        ("euc-kr.txt", "연차".encode("cp949"), "UTF-8"),
        ("renamed.pdf", b"not a pdf at all", "PDF를 읽을 수 없습니다"),  # a real PDF is read by the worker
    ],
)
@pytest.mark.django_db
def test_a_rejected_upload_shows_the_reason_and_saves_nothing(
    learner_client: Client, learner: User, enqueued: list[int], filename: str, data: bytes, reason: str
) -> None:
    document(learner, filename="before.md")
    response = upload(learner_client, filename, data)
    assert response.status_code == 200
    body = response.content.decode()
    assert reason in body and 'role="alert"' in body
    assert list(Document.objects.values_list("filename", flat=True)) == ["before.md"]
    assert enqueued == []


@pytest.mark.django_db
def test_nobody_uploads_into_the_chapter(learner_client: Client, enqueued: list[int]) -> None:
    response = upload(learner_client, "규정.md", KOREAN_MD.encode(), collection="chapter")
    assert response.status_code == 200 and not Document.objects.exists()


@pytest.mark.django_db
def test_the_ingest_task_goes_to_the_default_queue() -> None:
    from labapp.celery import app
    from rag.tasks import document_ingest

    with mock.patch.object(app, "send_task") as send_task:
        document_ingest.delay(7)
    name, args = send_task.call_args.args[:2]
    options = {key: value for key, value in send_task.call_args.kwargs.items() if key == "queue"}
    route = app.amqp.router.route(options, name, args, {})
    assert (name, args) == ("rag.document_ingest", (7,))
    assert route["queue"].name == "default"


@pytest.mark.django_db
def test_the_rows_poll_while_something_is_ingesting_and_stop_when_all_are_done(
    learner_client: Client, learner: User
) -> None:
    busy = document(learner, status=Document.Status.INGESTING, progress=33)
    rows = learner_client.get("/documents/rows/").content.decode()
    assert 'hx-trigger="every 1s"' in rows and 'value="33"' in rows and "색인 중" in rows
    assert "<html" not in rows  # a partial for htmx, not the page
    Document.objects.filter(pk=busy.pk).update(status=Document.Status.READY, progress=100, chunk_counts={"500": 4})
    rows = learner_client.get("/documents/rows/").content.decode()
    assert "hx-trigger" not in rows and "완료" in rows
    failed = document(learner, filename="b.md", status=Document.Status.FAILED, error="RetrievalUnavailable: down")
    rows = learner_client.get("/documents/rows/").content.decode()
    assert "hx-trigger" not in rows and "RetrievalUnavailable: down" in rows and f"document-{failed.pk}" in rows


@pytest.mark.django_db
def test_a_learner_sees_only_their_own_documents(learner_client: Client, other_learner: User) -> None:
    document(other_learner, filename="secret-plan.md")
    assert "secret-plan.md" not in learner_client.get("/documents/").content.decode()


# Deleting


@pytest.fixture
def chroma_deletes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(vectorstore, "delete_where", lambda name, where: calls.append((name, where)))
    return calls


@pytest.mark.django_db
def test_deleting_a_document_removes_its_chunks_and_index_rows(
    learner_client: Client, learner: User, chroma_deletes: list[tuple[str, dict[str, Any]]]
) -> None:
    doomed = document(learner)
    kept = document(learner, filename="kept.md")
    for source in (doomed.source, kept.source):
        IndexedSource.objects.create(
            collection=doomed.collection, source=source, chunk_size=500, content_hash="x", chunk_count=2
        )
    assert learner_client.get(f"/documents/{doomed.pk}/delete/").status_code == 405
    response = learner_client.post(f"/documents/{doomed.pk}/delete/")
    assert response.status_code == 302
    assert chroma_deletes == [(doomed.collection, {"source": doomed.source})]
    assert list(Document.objects.all()) == [kept]
    assert list(IndexedSource.objects.values_list("source", flat=True)) == [kept.source]


@pytest.mark.django_db
def test_a_document_is_kept_when_chroma_cannot_delete_its_chunks(
    learner_client: Client, learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(name: str, where: dict[str, Any]) -> None:
        raise vectorstore.RetrievalUnavailable("Chroma at http://127.0.0.1:1: ConnectError")

    monkeypatch.setattr(vectorstore, "delete_where", unreachable)
    kept = document(learner)
    page = learner_client.post(f"/documents/{kept.pk}/delete/", follow=True).content.decode()
    assert "삭제하지 못했습니다" in page and "ConnectError" in page
    assert Document.objects.filter(pk=kept.pk).exists()


@pytest.mark.django_db
def test_another_learners_document_cannot_be_deleted_or_previewed(
    learner_client: Client, other_learner: User, chroma_deletes: list[tuple[str, dict[str, Any]]]
) -> None:
    theirs = document(other_learner)
    assert learner_client.post(f"/documents/{theirs.pk}/delete/").status_code == 404
    assert learner_client.get(f"/documents/{theirs.pk}/preview/?size=500").status_code == 404
    assert learner_client.get("/documents/999999/preview/").status_code == 404
    assert Document.objects.filter(pk=theirs.pk).exists() and chroma_deletes == []


# Ingestion bookkeeping (the real-parts run is in tests/rag/test_documents_integration.py)


@pytest.mark.django_db
def test_ingestion_saves_progress_per_chunk_size_and_ends_ready(learner: User, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = document(learner)
    seen: list[tuple[str, int]] = []

    def index(**kwargs: Any) -> tuple[bool, int]:
        row = Document.objects.get(pk=doc.pk)
        seen.append((row.status, row.progress))
        assert kwargs["source"] == doc.source and kwargs["force"] is True
        assert kwargs["metadata"] == {"title": "규정", "filename": "규정.md", "document_id": str(doc.pk)}
        return True, 10 // kwargs["sizes"][0] + 1

    monkeypatch.setattr(services, "source_index", index)
    done = services.document_ingest(document=doc, sizes=(200, 500, 1000))
    assert seen == [("ingesting", 0), ("ingesting", 33), ("ingesting", 67)]
    assert (done.status, done.progress, done.error) == ("ready", 100, "")
    assert done.chunk_counts == {"200": 1, "500": 1, "1000": 1}


@pytest.mark.django_db
def test_a_failure_half_way_removes_what_was_written_and_records_the_reason(
    learner: User,
    monkeypatch: pytest.MonkeyPatch,
    chroma_deletes: list[tuple[str, dict[str, Any]]],
) -> None:
    doc = document(learner)

    def index(**kwargs: Any) -> tuple[bool, int]:
        size = kwargs["sizes"][0]
        if size == 500:
            raise vectorstore.RetrievalUnavailable("Chroma at http://127.0.0.1:1: ReadTimeout")
        IndexedSource.objects.create(
            collection=doc.collection, source=doc.source, chunk_size=size, content_hash="x", chunk_count=3
        )
        return True, 3

    monkeypatch.setattr(services, "source_index", index)
    done = services.document_ingest(document=doc, sizes=(200, 500, 1000))
    assert (done.status, done.progress, done.chunk_counts) == ("failed", 0, {})
    assert "RetrievalUnavailable" in done.error and "ReadTimeout" in done.error
    assert chroma_deletes == [(doc.collection, {"source": doc.source})]
    assert not IndexedSource.objects.filter(source=doc.source).exists()


@pytest.mark.django_db
def test_a_run_superseded_by_a_re_upload_stops_and_queues_one_more(
    learner: User,
    monkeypatch: pytest.MonkeyPatch,
    enqueued: list[int],
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    doc = document(learner, content_hash="old")
    calls: list[int] = []

    def index(**kwargs: Any) -> tuple[bool, int]:
        calls.append(kwargs["sizes"][0])
        Document.objects.filter(pk=doc.pk).update(content_hash="new", status=Document.Status.QUEUED)  # a re-upload
        return True, 1

    monkeypatch.setattr(services, "source_index", index)
    with django_capture_on_commit_callbacks(execute=True):
        done = services.document_ingest(document=doc, sizes=(200, 500, 1000))
    assert calls == [200]
    assert (done.status, done.content_hash) == ("queued", "new")
    assert enqueued == [doc.pk]


@pytest.mark.django_db
def test_an_ingestion_silent_past_the_stale_limit_is_failed_by_the_page_and_its_chunks_removed(
    learner_client: Client, learner: User, chroma_deletes: list[tuple[str, dict[str, Any]]]
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    old = timezone.now() - timedelta(seconds=services.INGEST_STALE_S + 5)
    lost = document(learner, status=Document.Status.INGESTING, progress=33, chunk_counts={"200": 4})
    beating = document(learner, filename="beating.md", status=Document.Status.INGESTING)
    waiting = document(learner, filename="waiting.md", status=Document.Status.QUEUED)
    Document.objects.filter(pk__in=[lost.pk, waiting.pk]).update(updated_at=old)
    IndexedSource.objects.create(
        collection=lost.collection, source=lost.source, chunk_size=200, content_hash="x", chunk_count=4
    )

    rows = learner_client.get("/documents/rows/").content.decode()
    lost.refresh_from_db()
    assert (lost.status, lost.progress, lost.chunk_counts) == ("failed", 0, {})
    assert "33 % 지점에서 사라졌습니다" in lost.error  # the site's language; each reader reads it in theirs
    with translation.override("en"):
        assert "lost at 33 %" in lost.error_shown and lost.error_shown.endswith("upload the file again.")
    assert 'data-status="failed"' in rows
    assert chroma_deletes == [(lost.collection, {"source": lost.source})]
    assert not IndexedSource.objects.filter(source=lost.source).exists()
    assert Document.objects.get(pk=beating.pk).status == Document.Status.INGESTING
    assert Document.objects.get(pk=waiting.pk).status == Document.Status.QUEUED
    assert services.documents_reap_stale() == 0


@pytest.mark.django_db(transaction=True)
def test_a_long_ingestion_keeps_beating_while_it_embeds(learner: User, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    doc = document(learner)
    beats: list[Any] = []
    monkeypatch.setattr(services, "INGEST_HEARTBEAT_S", 0.05)

    def slow_index(**kwargs: Any) -> tuple[bool, int]:
        started = Document.objects.get(pk=doc.pk).updated_at
        time.sleep(0.5)  # one chunk size of a large file: no progress write meanwhile
        beats.append(Document.objects.get(pk=doc.pk).updated_at > started)
        return True, 1

    monkeypatch.setattr(services, "source_index", slow_index)
    assert services.document_ingest(document=doc, sizes=(200,)).status == Document.Status.READY
    assert beats == [True]


# Chunk preview


@pytest.mark.django_db
def test_the_preview_shows_chunks_and_says_when_the_engine_is_down(
    learner_client: Client, learner: User, settings: Any
) -> None:
    settings.VLLM_BASE_URL = f"http://127.0.0.1:{free_port()}"
    settings.VLLM_MODEL = ""
    text = "\n\n".join(f"{n}번 문단입니다. 연차와 휴가에 대한 설명이 이어집니다." for n in range(40))
    doc = document(learner, text=text)
    page = learner_client.get(f"/documents/{doc.pk}/preview/?size=200")
    body = page.content.decode()
    assert page.status_code == 200
    assert "vLLM 연결 불가" in body
    assert body.count('class="chunk"') == len(chunking.split(text, size=200))
    assert "0번 문단입니다" in body and "0–" in body


@pytest.mark.django_db
def test_the_preview_shows_engine_token_counts(
    learner_client: Client, learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag.vllm import client as vllm_client

    async def count_tokens(texts: list[str], *, model: str) -> list[int]:
        return [1000 + n for n in range(len(texts))]

    monkeypatch.setattr(vllm_client, "model_name", lambda: "gemma-test")
    monkeypatch.setattr(vllm_client, "count_tokens", count_tokens)
    doc = document(learner, text="가" * 1200)
    body = learner_client.get(f"/documents/{doc.pk}/preview/?size=500").content.decode()
    assert "gemma-test" in body and ">1000<" in body and ">1002<" in body
    assert "vLLM 연결 불가" not in body
    assert learner_client.get(f"/documents/{doc.pk}/preview/?size=123").status_code == 200  # falls back to 500


# Retrieval test page


def indexed(collection: str, size: int = 500) -> None:
    IndexedSource.objects.create(collection=collection, source="s", chunk_size=size, content_hash="x", chunk_count=1)


def hit(**values: Any) -> retrieval.RetrievedChunk:
    names = {f.name for f in dataclasses.fields(retrieval.RetrievedChunk)}
    defaults: dict[str, Any] = {
        "id": "doc/1:500:0",
        "text": "연차는 입사 첫해에 15일입니다.",
        "metadata": {"title": "연차 규정", "source": "doc/1", "chunk_index": 0, "start": 0, "end": 18},
        "rank": 1,
        "fused_score": 0.0325,
        "dense_score": 0.41,
        "dense_rank": 2,
        "lexical_score": 3.5,
        "lexical_rank": 1,
        "relevance": 1.0,
    }
    return retrieval.RetrievedChunk(**{k: v for k, v in (defaults | values).items() if k in names})


@pytest.mark.django_db
def test_the_retrieval_page_shows_ranked_chunks_with_every_score(
    learner_client: Client, learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    def retrieve(question: str, **kwargs: Any) -> retrieval.RetrievalResult:
        calls.append({"question": question, **kwargs})
        return retrieval.RetrievalResult(chunks=[hit()], embed_ms=12.34, search_ms=5.0)

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    indexed(user_collection_name(learner))
    query = {"question": "연차는 며칠?", "collection": "mine", "chunk_size": "500", "top_k": "3", "mode": "lexical"}
    page = learner_client.get("/retrieval/", query)
    body = page.content.decode()
    assert page.status_code == 200
    assert calls == [
        {
            "question": "연차는 며칠?",
            "collection": user_collection_name(learner),
            "chunk_size": 500,
            "top_k": 3,
            "language": None,
            "mode": "lexical",
        }
    ]
    for shown in ("연차 규정", "연차는 입사 첫해에 15일입니다.", "0.0325", "0.410 / 2", "3.500 / 1", "17.3 ms", "12.3"):
        assert shown in body, shown


@pytest.mark.django_db
def test_the_retrieval_page_shows_no_embedding_time_when_nothing_was_embedded(
    learner_client: Client, learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BM25 alone (lexical mode, or a hybrid search whose vector half found Chroma down) embeds no question:
    "—" beside the embedding, never "0.0 ms"."""
    found = [
        retrieval.RetrievalResult(chunks=[hit()], search_ms=5.0, mode="lexical"),
        retrieval.RetrievalResult(chunks=[hit()], search_ms=5.0, dense_unavailable="Chroma at http://c is unreachable"),
        retrieval.RetrievalResult(chunks=[hit()], embed_ms=12.34, search_ms=5.0),
    ]
    monkeypatch.setattr(retrieval, "retrieve", lambda question, **kwargs: found.pop(0))
    indexed(user_collection_name(learner))
    query = {"question": "prefill", "collection": "mine", "chunk_size": "500"}
    shown = [learner_client.get("/retrieval/", query).content.decode() for _ in range(3)]
    assert "<b>임베딩</b> —</span>" in shown[0] and "<b>임베딩</b> —</span>" in shown[1]
    assert "<b>임베딩</b> 12.3 ms</span>" in shown[2] and "0.0 ms" not in shown[0] + shown[1]


@pytest.mark.django_db
def test_the_chapter_is_searched_in_the_page_language(learner_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    languages: list[str | None] = []

    def retrieve(question: str, **kwargs: Any) -> retrieval.RetrievalResult:
        languages.append(kwargs["language"])
        return retrieval.RetrievalResult(chunks=[])

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    indexed(services.CHAPTER_COLLECTION)
    learner_client.get("/retrieval/", {"question": "프리필", "collection": "chapter"})
    learner_client.cookies["django_language"] = "en"
    body = learner_client.get("/retrieval/", {"question": "prefill", "collection": "chapter"}).content.decode()
    assert languages == ["ko", "en"]
    assert 'lang="en"' in body


@pytest.mark.django_db
def test_the_retrieval_page_says_when_chroma_is_unreachable(
    learner_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def retrieve(question: str, **kwargs: Any) -> retrieval.RetrievalResult:
        raise vectorstore.RetrievalUnavailable("Chroma at http://127.0.0.1:1: ConnectError: refused")

    monkeypatch.setattr(retrieval, "retrieve", retrieve)
    indexed(services.CHAPTER_COLLECTION)
    page = learner_client.get("/retrieval/", {"question": "프리필", "collection": "chapter"})
    assert page.status_code == 200
    assert "검색 불가 (Chroma)" in page.content.decode() and "ConnectError: refused" in page.content.decode()


@pytest.mark.django_db
def test_the_retrieval_page_with_a_dead_chroma_server_still_renders(
    learner_client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fake retrieve: the real client against a port where nothing listens."""
    settings.CHROMA_URL = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr(vectorstore, "_client", None)  # restored afterwards: other tests keep their client
    indexed(services.CHAPTER_COLLECTION)
    page = learner_client.get("/retrieval/", {"question": "프리필", "collection": "chapter", "mode": "lexical"})
    assert page.status_code == 200
    assert "검색 불가 (Chroma)" in page.content.decode()


@pytest.mark.django_db
def test_an_empty_collection_says_there_is_no_material(learner_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieval, "retrieve", mock.Mock(side_effect=AssertionError("nothing to search")))
    page = learner_client.get("/retrieval/", {"question": "연차", "collection": "mine"})
    assert page.status_code == 200 and "자료가 없습니다" in page.content.decode()


@pytest.mark.django_db
def test_the_retrieval_form_validates_top_k_and_collection(learner_client: Client) -> None:
    too_many = learner_client.get("/retrieval/", {"question": "연차", "top_k": "21"}).content.decode()
    assert 'role="alert"' in too_many
    foreign = learner_client.get("/retrieval/", {"question": "연차", "collection": "user-999"}).content.decode()
    assert 'role="alert"' in foreign
    blank = learner_client.get("/retrieval/")
    assert blank.status_code == 200 and 'role="alert"' not in blank.content.decode()


def _open_aiohttp_sessions() -> set[int]:
    gc.collect()
    return {id(o) for o in gc.get_objects() if isinstance(o, aiohttp.ClientSession) and not o.closed}


@pytest.mark.django_db
def test_the_preview_counts_tokens_on_the_engine_and_leaves_no_connection_pool_open(
    learner_client: Client, learner: User, settings: Any, scripted_engine: tuple[scripted.Script, str]
) -> None:
    # The view counts inside async_to_sync's loop, which ends with the request: a pool left open in
    # it was reported as "Unclosed client session" when collected, at the end of every test run.
    settings.VLLM_BASE_URL, settings.VLLM_MODEL = scripted_engine[1], ""
    before = _open_aiohttp_sessions()
    body = learner_client.get(f"/documents/{document(learner, text='가' * 1200).pk}/preview/?size=500").content
    assert b"fake-model" in body and b'<td class="tokens">' in body and "vLLM 연결 불가".encode() not in body
    assert _open_aiohttp_sessions() - before == set()
