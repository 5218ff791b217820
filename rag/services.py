"""Writes of the retrieval side: (re)indexing sources into the vector store."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePath

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from rag import chunking, embeddings, vectorstore
from rag.models import Document, IndexedSource

CHAPTER_COLLECTION = "chapter"
# A running ingestion bumps its row's updated_at this often (embedding one chunk size of a
# large file takes minutes); one silent for INGEST_STALE_S lost its worker.
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
    return IndexReport(indexed, skipped, chunks)


# Documents: uploads into a user's collection, ingested by the rag.document_ingest task.


class DocumentSuperseded(RuntimeError):
    """The document was re-uploaded or deleted while this ingestion ran."""


def document_upload(
    *, owner: AbstractBaseUser, collection: str, filename: str, kind: str, size_bytes: int, text: str
) -> Document:
    """Save an upload and queue its ingestion; the same file name in a collection is replaced.

    The ingestion task is sent only after the transaction commits, so the worker
    always finds the row (and the new text) it was sent for.
    """
    from rag import tasks

    digest = hashlib.sha256(text.encode()).hexdigest()
    values = {
        "owner": owner,
        "title": PurePath(filename).stem[:200] or filename[:200],
        "kind": kind,
        "size_bytes": size_bytes,
        "text": text,
        "content_hash": digest,
        "status": Document.Status.QUEUED,
        "progress": 0,
        "error": "",
        "chunk_counts": {},
    }
    with transaction.atomic():
        document, _created = Document.objects.update_or_create(
            collection=collection, filename=filename, defaults=values
        )
        transaction.on_commit(lambda: tasks.document_ingest.delay(document.pk))
    return document


def document_ingest(*, document: Document, sizes: tuple[int, ...] = chunking.CHUNK_SIZES) -> Document:
    """Index a document at every chunk size, saving progress after each; all or nothing.

    A failure removes whatever this run wrote for the document's source and marks
    it FAILED with the reason. A re-upload during the run supersedes it: the run
    stops and the newer task (already queued) does the work.
    """
    current = Document.objects.filter(pk=document.pk, content_hash=document.content_hash)
    started = current.update(
        status=Document.Status.INGESTING, progress=0, error="", chunk_counts={}, updated_at=timezone.now()
    )
    if not started:
        return _document_refreshed(document)
    metadata = {"title": document.title, "filename": document.filename, "document_id": str(document.pk)}
    counts: dict[str, int] = {}
    try:
        with _beating(current):
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
    except DocumentSuperseded:
        if Document.objects.filter(pk=document.pk).exists():
            # The newer run may have finished before this one's last write: one more
            # run with the current text makes sure nothing of the old text remains.
            from rag import tasks

            transaction.on_commit(lambda: tasks.document_ingest.delay(document.pk))
        else:
            _source_remove(collection=document.collection, source=document.source)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        try:
            _source_remove(collection=document.collection, source=document.source)
        except Exception as cleanup:  # Chroma is down: the next ingestion replaces what is left
            reason += f" (cleanup failed: {type(cleanup).__name__}: {cleanup})"
        current.update(status=Document.Status.FAILED, progress=0, error=reason[:2000], chunk_counts={})
    return _document_refreshed(document)


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
    (hours), so without this the row would say "ingesting" until then. Called by the
    document pages; returns how many were reaped.
    """
    cutoff = timezone.now() - timedelta(seconds=INGEST_STALE_S)
    reaped = 0
    for document in Document.objects.filter(status=Document.Status.INGESTING, updated_at__lt=cutoff).only(
        "pk", "collection", "updated_at", "progress"
    ):
        reason = (
            f"The worker ingesting this document was lost at {document.progress} % (silent for more than "
            f"{INGEST_STALE_S:.0f} s); upload the file again."
        )
        lost = Document.objects.filter(pk=document.pk, status=Document.Status.INGESTING, updated_at=document.updated_at)
        if not lost.update(status=Document.Status.FAILED, progress=0, error=reason, chunk_counts={}):
            continue  # it beat or finished meanwhile
        reaped += 1
        try:
            _source_remove(collection=document.collection, source=document.source)
        except vectorstore.RetrievalUnavailable as exc:  # the next ingestion replaces what is left
            Document.objects.filter(pk=document.pk).update(error=f"{reason} (cleanup failed: {exc})"[:2000])
    return reaped


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
