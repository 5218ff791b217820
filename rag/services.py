"""Writes of the retrieval side: (re)indexing sources into the vector store."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePath

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from labapp import said
from labapp.said import gettext as _  # a document's failure reason is said again in each reader's language
from rag import access, chunking, documents, embeddings, retrieval, vectorstore
from rag.documents import DocumentRejected
from rag.models import CHAPTER_COLLECTION as CHAPTER_COLLECTION  # defined with the models, used from here
from rag.models import Document, IndexedSource

# A running ingestion bumps its row's updated_at this often (embedding one chunk size of a
# large file takes minutes); one silent for INGEST_STALE_S lost its worker.
logger = logging.getLogger(__name__)
INGEST_HEARTBEAT_S = 10.0
INGEST_STALE_S = 120.0


@dataclass(frozen=True)
class IndexReport:
    indexed: int
    skipped: int
    chunks: int


def source_index(
    *,
    collection: str,
    source: str,
    text: str,
    metadata: dict[str, str],
    sizes: tuple[int, ...] = chunking.CHUNK_SIZES,
    force: bool = False,
) -> tuple[bool, int]:
    """Index ``text`` at every chunk size, replacing what was there; skip if unchanged."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    touched = False
    total = 0
    for size in sizes:
        known = IndexedSource.objects.filter(collection=collection, source=source, chunk_size=size).first()
        if known and known.content_hash == digest and not force:
            total += known.chunk_count
            continue
        pieces = chunking.split(text, size=size)
        # Delete first: re-indexing replaces a source's chunks, it never adds duplicates.
        vectorstore.delete_where(collection, {"$and": [{"source": source}, {"chunk_size": size}]})
        if pieces:
            vectorstore.upsert(
                collection,
                ids=[f"{source}:{size}:{p.index}" for p in pieces],
                embeddings=embeddings.embed([p.text for p in pieces]),
                documents=[p.text for p in pieces],
                metadatas=[
                    metadata
                    | {"source": source, "chunk_size": size, "chunk_index": p.index, "start": p.start, "end": p.end}
                    for p in pieces
                ],
            )
        IndexedSource.objects.update_or_create(
            collection=collection,
            source=source,
            chunk_size=size,
            defaults={"content_hash": digest, "chunk_count": len(pieces)},
        )
        touched = True
        total += len(pieces)
    return touched, total


def chapter_index(*, force: bool = False) -> IndexReport:
    from labapp.models import ChapterSection

    expected = sum(IndexedSource.objects.filter(collection=CHAPTER_COLLECTION).values_list("chunk_count", flat=True))
    if expected and vectorstore.count(CHAPTER_COLLECTION) != expected:
        force = True  # the store lost data (e.g. a wiped data/chroma): rebuild everything
    indexed = skipped = chunks = 0
    for section in ChapterSection.objects.all():
        source = f"chapter/{section.language}/{section.slug}"
        touched, count = source_index(
            collection=CHAPTER_COLLECTION,
            source=source,
            text=f"{section.title}\n\n{section.body}",
            metadata={"language": section.language, "slug": section.slug, "title": section.title},
            force=force,
        )
        indexed += touched
        skipped += not touched
        chunks += count
    _lexical_prebuilt(CHAPTER_COLLECTION, chunking.CHUNK_SIZES)
    return IndexReport(indexed, skipped, chunks)


def _lexical_prebuilt(collection: str, sizes: tuple[int, ...]) -> None:
    """Save the collection's lexical indexes now, so that no question waits for one to be built.
    A failure here only means the first question builds it (as it would have without this)."""
    try:
        retrieval.prebuild_lexical(collection, list(sizes))
    except Exception as exc:  # Chroma down, a read-only folder: the index is built on demand
        logger.warning("lexical index of %s not prebuilt: %s: %s", collection, type(exc).__name__, exc)


# Documents: uploads into a user's collection, ingested by the rag.document_ingest task.


class DocumentSuperseded(RuntimeError):
    """The document was re-uploaded or deleted while this ingestion ran."""


def document_upload(
    *,
    owner: AbstractBaseUser,
    collection: str,
    filename: str,
    kind: str,
    size_bytes: int,
    text: str,
    raw: bytes = b"",
) -> Document:
    """Save an upload and queue its ingestion; the uploader's own file of that name is replaced.

    Refused with ``DocumentRejected`` and nothing saved when the owner may not upload
    into ``collection`` (``access.may_upload_into``), when someone else's file has that
    name there (``access.may_replace_document``) or past the owner's quota. A PDF comes
    as ``raw`` bytes with no text yet: the worker reads it. The ingestion task is sent
    only after the transaction commits, so the worker always finds the row (and the new
    content) it was sent for.
    """
    from rag import tasks

    if not access.may_upload_into(owner, collection):
        raise DocumentRejected(
            _("이 자료 모음에는 올릴 수 없습니다. 수업 자료는 그 수업의 강사만 올릴 수 있으니 내 문서에 올려 주세요.")
        )
    values = {
        "title": PurePath(filename).stem[:200] or filename[:200],
        "kind": kind,
        "size_bytes": size_bytes,
        "text": text,
        "raw": raw,
        "content_hash": hashlib.sha256(raw or text.encode()).hexdigest(),
        "status": Document.Status.QUEUED,
        "progress": 0,
        **Document.error_fields(),
        "chunk_counts": {},
        "resent_at": None,
    }
    with transaction.atomic():
        # One upload per owner at a time, so the quota counts every committed upload.
        get_user_model()._default_manager.select_for_update().filter(pk=owner.pk).first()
        same_name = Document.objects.select_for_update().filter(collection=collection, filename=filename)
        existing = same_name.only("pk", "owner").first()
        if existing is not None and not access.may_replace_document(owner, existing):
            raise _name_taken(filename)
        _check_quota(owner=owner, replacing=existing, size_bytes=size_bytes)
        try:
            with transaction.atomic():
                document, _created = Document.objects.update_or_create(
                    collection=collection, filename=filename, owner_id=owner.pk, defaults=values
                )
        except IntegrityError:  # someone else's upload of that name committed meanwhile
            raise _name_taken(filename) from None
        transaction.on_commit(lambda: tasks.document_ingest.delay(document.pk))
    return document


def _name_taken(filename: str) -> DocumentRejected:
    return DocumentRejected(
        _(
            "이 자료 모음에는 다른 사람이 올린 같은 이름의 파일(%(name)s)이 이미 있습니다. "
            "파일 이름을 바꿔서 올려 주세요."
        )
        % {"name": filename}
    )


def _check_quota(*, owner: AbstractBaseUser, replacing: Document | None, size_bytes: int) -> None:
    """``DocumentRejected`` past DOCUMENTS_MAX_PER_USER files or DOCUMENTS_MAX_MB_PER_USER MB of one owner's
    documents in all collections (the file being replaced not counted)."""
    kept = Document.objects.filter(owner_id=owner.pk)
    if replacing is not None:
        kept = kept.exclude(pk=replacing.pk)
    totals = kept.aggregate(count=Count("pk"), size=Sum("size_bytes"))
    most = int(settings.DOCUMENTS_MAX_PER_USER)
    if totals["count"] >= most:
        raise DocumentRejected(
            _(
                "문서가 이미 %(count)d개입니다. 한 사람이 올릴 수 있는 문서는 %(limit)d개까지이니, "
                "쓰지 않는 문서를 지운 뒤 올려 주세요."
            )
            % {"count": totals["count"], "limit": most}
        )
    used, limit_mb = totals["size"] or 0, int(settings.DOCUMENTS_MAX_MB_PER_USER)
    if used + size_bytes > limit_mb * 1024 * 1024:
        raise DocumentRejected(
            _(
                "문서 용량이 모자랍니다: 지금 %(used).1f MB를 쓰고 있어 이 파일(%(size).1f MB)을 더하면 "
                "한 사람당 한도 %(limit)d MB를 넘습니다. 쓰지 않는 문서를 지운 뒤 올려 주세요."
            )
            % {"used": used / (1024 * 1024), "size": size_bytes / (1024 * 1024), "limit": limit_mb}
        )


def document_ingest(*, document: Document, sizes: tuple[int, ...] = chunking.CHUNK_SIZES) -> Document:
    """Read a PDF's text, then index the document at every chunk size, saving progress after each; all or nothing.

    A failure (a PDF over PDF_MAX_PAGES or PDF_TIMEOUT_S included) removes whatever
    this run wrote for the document's source and marks it FAILED with the reason. A
    re-upload during the run supersedes it: the run stops and the newer task (already
    queued) does the work.
    """
    current = Document.objects.filter(pk=document.pk, content_hash=document.content_hash)
    started = current.update(
        status=Document.Status.INGESTING,
        progress=0,
        **Document.error_fields(),
        chunk_counts={},
        updated_at=timezone.now(),
    )
    if not started:
        return _document_refreshed(document)
    metadata = {"title": document.title, "filename": document.filename, "document_id": str(document.pk)}
    counts: dict[str, int] = {}
    try:
        with _beating(current):
            document = _with_text(document, current)
            for done, size in enumerate(sizes, start=1):
                _touched, counts[str(size)] = source_index(
                    collection=document.collection,
                    source=document.source,
                    text=document.text,
                    metadata=metadata,
                    sizes=(size,),
                    force=True,
                )
                progress = round(100 * done / len(sizes))
                if not current.update(progress=min(progress, 99), chunk_counts=counts, updated_at=timezone.now()):
                    raise DocumentSuperseded(document.source)
            current.update(status=Document.Status.READY, progress=100, chunk_counts=counts)
        _lexical_prebuilt(document.collection, sizes)
    except DocumentSuperseded:
        if Document.objects.filter(pk=document.pk).exists():
            # The newer run may have finished before this one's last write: one more
            # run with the current text makes sure nothing of the old text remains.
            from rag import tasks

            transaction.on_commit(lambda: tasks.document_ingest.delay(document.pk))
        else:
            _source_remove(collection=document.collection, source=document.source)
    except Exception as exc:
        if isinstance(exc, DocumentRejected):
            reason = exc.reason
        else:
            reason = _("색인하다가 오류가 났습니다: %(why)s") % {"why": said.exception(exc)}
        try:
            _source_remove(collection=document.collection, source=document.source)
        except Exception as cleanup:  # Chroma is down: the next ingestion replaces what is left
            reason += _(" (정리 실패: %(why)s)") % {"why": said.exception(cleanup)}
        current.update(status=Document.Status.FAILED, progress=0, chunk_counts={}, **Document.error_fields(reason))
    return _document_refreshed(document)


def _with_text(document: Document, current: QuerySet[Document]) -> Document:
    """The document with its text: a PDF's is read here, in the worker, and saved in place of its bytes."""
    if document.kind != "pdf" or document.text:
        return document
    text = documents.pdf_text(bytes(document.raw))
    if not current.update(text=text, raw=b"", updated_at=timezone.now()):
        raise DocumentSuperseded(document.source)
    document.text, document.raw = text, b""
    return document


@contextlib.contextmanager
def _beating(current: QuerySet[Document]) -> Iterator[None]:
    """Bump the row's updated_at every INGEST_HEARTBEAT_S while the block runs (a long embedding included)."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(INGEST_HEARTBEAT_S):
                with contextlib.suppress(Exception):  # a missed beat is not a reason to stop ingesting
                    current.update(updated_at=timezone.now())
        finally:
            connection.close()  # this thread's own connection

    beating = threading.Thread(target=beat, name="ingest-heartbeat", daemon=True)
    beating.start()
    try:
        yield
    finally:
        stop.set()
        beating.join()


def documents_reap_stale() -> int:
    """Ingestions silent for INGEST_STALE_S lost their worker: failed with the reason, partial chunks removed.

    A killed worker's task is redelivered only after the broker's visibility timeout
    (hours), so without this the row would say "ingesting" until then. A document
    queued too long is sent again once, then failed (``_queued_resend_or_fail``).
    Called by the document pages; returns how many were failed.
    """
    reaped = _queued_resend_or_fail()
    cutoff = timezone.now() - timedelta(seconds=INGEST_STALE_S)
    for document in Document.objects.filter(status=Document.Status.INGESTING, updated_at__lt=cutoff).only(
        "pk", "collection", "updated_at", "progress"
    ):
        reason = _(
            "이 문서를 색인하던 작업자가 %(progress)d %% 지점에서 사라졌습니다 (%(seconds).0f초 넘게 응답 없음). "
            "파일을 다시 올려 주세요."
        ) % {"progress": document.progress, "seconds": INGEST_STALE_S}
        lost = Document.objects.filter(pk=document.pk, status=Document.Status.INGESTING, updated_at=document.updated_at)
        if not lost.update(status=Document.Status.FAILED, progress=0, chunk_counts={}, **Document.error_fields(reason)):
            continue  # it beat or finished meanwhile
        reaped += 1
        try:
            _source_remove(collection=document.collection, source=document.source)
        except vectorstore.RetrievalUnavailable as exc:  # the next ingestion replaces what is left
            failed = reason + _(" (정리 실패: %(why)s)") % {"why": str(exc)}
            Document.objects.filter(pk=document.pk).update(**Document.error_fields(failed))
    return reaped


def _queued_resend_or_fail() -> int:
    """A document queued for DOCUMENT_QUEUED_STALE_S has lost its task (a broker restart drops
    queued tasks): it is sent once more (ingestion is idempotent), and failed with the reason
    if it is still queued that long after. Returns how many were failed."""
    from rag import tasks

    stale_s = int(settings.DOCUMENT_QUEUED_STALE_S)
    cutoff = timezone.now() - timedelta(seconds=stale_s)
    queued = Document.objects.filter(status=Document.Status.QUEUED)
    waiting = queued.filter(resent_at=None, updated_at__lt=cutoff)
    for pk in waiting.values_list("pk", flat=True):
        if waiting.filter(pk=pk).update(resent_at=timezone.now()):  # one page sends it, once
            transaction.on_commit(functools.partial(tasks.document_ingest.delay, pk))
    reason = _(
        "색인 작업이 시작되지 않았습니다: %(seconds)d초 넘게 대기 중이어서 한 번 더 보냈지만 그래도 시작되지 "
        "않았습니다 (작업 대기열이 재시작되었을 수 있습니다). 파일을 다시 올려 주세요."
    ) % {"seconds": stale_s}
    return queued.filter(resent_at__lt=cutoff).update(
        status=Document.Status.FAILED, progress=0, chunk_counts={}, **Document.error_fields(reason)
    )


def document_delete(*, document: Document) -> None:
    """Remove a document's chunks from the vector store, then the document itself.

    Raises ``vectorstore.RetrievalUnavailable`` (and keeps the document) when
    Chroma cannot be reached, so no chunk is left behind without its document.
    """
    _source_remove(collection=document.collection, source=document.source)
    document.delete()


def _source_remove(*, collection: str, source: str) -> None:
    vectorstore.delete_where(collection, {"source": source})
    IndexedSource.objects.filter(collection=collection, source=source).delete()


def _document_refreshed(document: Document) -> Document:
    return Document.objects.filter(pk=document.pk).first() or document
