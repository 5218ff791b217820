"""The vector store keeps each collection as one Chroma collection per chunk size and language."""

from __future__ import annotations

import random
import uuid

import pytest

from rag import vectorstore


def test_a_filter_is_split_into_the_partition_it_pins_and_what_remains() -> None:
    split = vectorstore._split_where
    assert split(None) == ({}, None)
    assert split({"chunk_size": 500}) == ({"chunk_size": 500}, None)
    assert split({"$and": [{"chunk_size": 500}, {"language": "ko"}]}) == ({"chunk_size": 500, "language": "ko"}, None)
    assert split({"$and": [{"source": "a"}, {"chunk_size": {"$eq": 200}}]}) == ({"chunk_size": 200}, {"source": "a"})
    assert split({"chunk_size": {"$in": [200, 500]}}) == ({}, {"chunk_size": {"$in": [200, 500]}})
    assert split({"$and": [{"source": "a"}, {"slug": "b"}, {"language": "en"}]}) == (
        {"language": "en"},
        {"$and": [{"source": "a"}, {"slug": "b"}]},
    )
    assert vectorstore.partition_name("chapter", {"chunk_size": 500, "language": "ko"}) == "chapter__500_ko"
    assert vectorstore.partition_name("user-3", {"source": "x"}) == "user-3__x_any"
    assert vectorstore._matches("user-3__200_any", "user-3", {"chunk_size": 200})
    assert not vectorstore._matches("user-30__200_any", "user-3", {})
    assert not vectorstore._matches("user-3__500_any", "user-3", {"chunk_size": 200})


def _unit(rng: random.Random, dim: int = 8) -> list[float]:
    vector = [rng.gauss(0, 1) for _ in range(dim)]
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector]


@pytest.mark.integration
def test_chunks_land_in_per_size_and_language_partitions_that_every_call_sees_as_one_collection(
    chroma_server: str,
) -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    rng = random.Random(3)
    rows = [
        (size, lang, source, i) for size in (200, 500) for lang in ("ko", "en") for source in "ab" for i in range(3)
    ]
    ids = [f"{source}:{size}:{lang}:{i}" for size, lang, source, i in rows]
    vectors = [_unit(rng) for _ in rows]
    metas = [
        {"chunk_size": size, "language": lang, "source": source, "chunk_index": i} for size, lang, source, i in rows
    ]
    vectorstore.upsert(name, ids=ids, embeddings=vectors, documents=ids, metadatas=metas)
    stored = sorted(c.name for c in vectorstore.client().list_collections() if c.name.startswith(name))
    assert stored == [f"{name}__{s}_{lang}" for s in (200, 500) for lang in ("en", "ko")]

    pinned = {"$and": [{"chunk_size": 500}, {"language": "ko"}]}
    hits = vectorstore.query(name, embedding=vectors[0], k=4, where=pinned)
    assert len(hits) == 4 and all(h.metadata["chunk_size"] == 500 and h.metadata["language"] == "ko" for h in hits)
    everywhere = vectorstore.query(name, embedding=vectors[0], k=5)
    assert everywhere[0].id == ids[0] and [h.distance for h in everywhere] == sorted(h.distance for h in everywhere)
    assert vectorstore.count(name) == len(rows) and vectorstore.count(name, pinned) == 6
    assert vectorstore.count(name, {"$and": [{"source": "a"}, {"chunk_size": 200}]}) == 6
    assert len(vectorstore.get_where(name, {"chunk_size": {"$in": [200, 500]}})) == len(rows)
    assert [h.id for h in vectorstore.get_ids(name, [ids[-1], ids[0]])] == sorted([ids[0], ids[-1]], key=ids.index)

    vectorstore.delete_where(name, {"$and": [{"source": "a"}, {"chunk_size": 200}]})
    assert vectorstore.count(name) == len(rows) - 6
    assert {h.metadata["source"] for h in vectorstore.get_where(name, {"chunk_size": 200})} == {"b"}
    vectorstore.delete_where(name, {"$and": [{"chunk_size": 500}, {"language": "en"}]})  # a whole partition
    assert vectorstore.count(name, {"chunk_size": 500}) == 6
    assert vectorstore.query(name, embedding=vectors[0], k=3, where={"chunk_size": 1000}) == []  # never written
    vectorstore.drop(name)
    assert vectorstore.count(name) == 0


@pytest.mark.integration
def test_a_collection_stored_whole_before_partitions_is_moved_into_them(chroma_server: str) -> None:
    rng = random.Random(5)
    legacy = f"user-{rng.randrange(10**8, 10**9)}"
    foreign = f"someone-else-{uuid.uuid4().hex[:6]}"
    api = vectorstore.client()
    for name in (legacy, foreign):
        whole = api.get_or_create_collection(name=name, metadata={"hnsw:space": "cosine"}, embedding_function=None)
        whole.upsert(
            ids=["x:200:0", "x:500:0", "x:500:1"],
            embeddings=[_unit(rng) for _ in range(3)],  # type: ignore[arg-type]
            documents=["one", "two", "three"],
            metadatas=[{"chunk_size": 200, "source": "x"}, {"chunk_size": 500, "source": "x"}, {"chunk_size": 500}],
        )
    moved = dict(vectorstore.partition_unsplit())
    assert moved.get(legacy) == 3 and foreign not in moved
    names = {c.name for c in api.list_collections()}
    assert legacy not in names and {f"{legacy}__200_any", f"{legacy}__500_any"} <= names
    assert foreign in names  # not one of the lab's names: left alone
    assert vectorstore.count(legacy, {"chunk_size": 500}) == 2
    assert dict(vectorstore.partition_unsplit()).get(legacy) is None  # nothing left to move
    vectorstore.drop(legacy)
    api.delete_collection(foreign)
