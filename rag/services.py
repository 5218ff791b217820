"""Writes of the retrieval side: (re)indexing sources into the vector store."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rag import chunking, embeddings, vectorstore
from rag.models import IndexedSource

CHAPTER_COLLECTION = "chapter"


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
