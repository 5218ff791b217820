"""The only chromadb import: a lazily created HTTP client to the Chroma server.

Web and worker processes both talk to one Chroma server (embedded `chroma run`
or CHROMA_URL) rather than opening one persistent directory from two processes.

A collection the rest of the lab names ("chapter", "user-3", ...) is stored as one
Chroma collection per chunk size and language ("chapter__500_ko"): a search always
asks for one chunk size (and the chapter for one language), and Chroma's metadata
filter costs far more than the search itself (measured with 1k chunks: 21 ms without
a filter, 207 ms with ``chunk_size``; with 100k: 16 ms against 796 ms). Every function
here takes the lab's name and a ``where``; the chunk size and language a ``where``
pins choose the partitions, the rest of it is still applied inside them.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from django.conf import settings

from labapp import addresses

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

T = TypeVar("T")
_lock = threading.Lock()
_client: ClientAPI | None = None


class RetrievalUnavailable(RuntimeError):
    """Chroma could not be reached; callers say "retrieval unavailable" (and the message, which
    names Chroma's address, never with its credentials)."""

    def __init__(self, message: object = "") -> None:
        super().__init__(addresses.scrubbed(str(message)))


def client() -> ClientAPI:
    global _client
    with _lock:
        if _client is None:
            import chromadb
            from chromadb.config import Settings as ChromaSettings

            url = urlsplit(settings.CHROMA_URL)
            try:
                _client = chromadb.HttpClient(
                    host=url.hostname or "127.0.0.1",
                    port=url.port or (443 if url.scheme == "https" else 80),
                    ssl=url.scheme == "https",
                    settings=ChromaSettings(anonymized_telemetry=False),
                )
            except Exception as exc:  # chromadb raises several types for "not reachable"
                raise RetrievalUnavailable(f"Chroma at {settings.CHROMA_URL} is unreachable: {exc}") from exc
        return _client


@dataclass(frozen=True)
class ChromaInfo:
    version: str
    heartbeat_ns: int


def info() -> ChromaInfo:
    try:
        api = client()
        return ChromaInfo(version=str(api.get_version()), heartbeat_ns=int(api.heartbeat()))
    except RetrievalUnavailable:
        raise
    except Exception as exc:
        raise RetrievalUnavailable(f"Chroma at {settings.CHROMA_URL} is unreachable: {exc}") from exc


def _guarded(call: Callable[..., T]) -> Callable[..., T]:
    """Turn any failure to talk to the Chroma server into RetrievalUnavailable, after one more
    try with fresh collection objects when this process remembered some (another process may
    have dropped and re-created one)."""

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        for attempt in (1, 2):
            try:
                return call(*args, **kwargs)
            except RetrievalUnavailable:
                raise
            except Exception as exc:  # chromadb raises httpx, ValueError and its own types alike
                if attempt == 2 or not _collections:
                    raise RetrievalUnavailable(f"Chroma at {settings.CHROMA_URL}: {type(exc).__name__}: {exc}") from exc
                _collections.clear()
        raise AssertionError("unreachable: the second attempt returns or raises")

    return wrapper


SEP = "__"  # "<lab's name>__<chunk size>_<language>"
PINNED = ("chunk_size", "language")
_collections: dict[str, Collection] = {}  # Chroma collection objects by name, this process


def partition_name(name: str, metadata: dict[str, Any]) -> str:
    size, language = metadata.get("chunk_size"), metadata.get("language")
    return f"{name}{SEP}{size if size is not None else 'x'}_{language or 'any'}"


def _split_where(where: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the chunk size / language the filter pins to one value, what remains of it)."""
    if not where:
        return {}, None
    clauses = list(where["$and"]) if set(where) == {"$and"} else [{key: value} for key, value in where.items()]
    pins: dict[str, Any] = {}
    rest: list[dict[str, Any]] = []
    for clause in clauses:
        ((key, value),) = clause.items() if len(clause) == 1 else ((None, None),)
        if isinstance(value, dict) and set(value) == {"$eq"}:
            value = value["$eq"]
        if key in PINNED and isinstance(value, int | str) and key not in pins:
            pins[key] = value
        else:
            rest.append(clause)
    residual = None if not rest else rest[0] if len(rest) == 1 else {"$and": rest}
    return pins, residual


def _matches(partition: str, name: str, pins: dict[str, Any]) -> bool:
    if not partition.startswith(name + SEP):
        return False
    size, _, language = partition[len(name) + len(SEP) :].partition("_")
    return ("chunk_size" not in pins or size == str(pins["chunk_size"])) and (
        "language" not in pins or language == str(pins["language"])
    )


def _get(partition: str) -> Collection | None:
    """The stored partition, or None when nothing was ever written to it."""
    known = _collections.get(partition)
    if known is not None:
        return known
    from chromadb.errors import NotFoundError

    try:
        found = client().get_collection(name=partition, embedding_function=None)
    except (NotFoundError, ValueError):
        return None
    _collections[partition] = found
    return found


def _partitions(name: str, where: dict[str, Any] | None) -> tuple[list[Collection], dict[str, Any] | None]:
    pins, residual = _split_where(where)
    if len(pins) == len(PINNED):
        one = _get(partition_name(name, pins))
        return ([one] if one is not None else []), residual
    names = sorted(c.name for c in client().list_collections() if _matches(c.name, name, pins))
    return [c for c in (_get(n) for n in names) if c is not None], residual


@_guarded
def upsert(
    name: str, *, ids: list[str], embeddings: list[list[float]], documents: list[str], metadatas: list[dict[str, Any]]
) -> None:
    groups: dict[str, list[int]] = {}
    for index, metadata in enumerate(metadatas):
        groups.setdefault(partition_name(name, metadata), []).append(index)
    for partition, rows in groups.items():
        target = _get(partition) or client().get_or_create_collection(
            # Vectors come from rag.embeddings; Chroma only stores and searches them.
            name=partition,
            metadata={"hnsw:space": "cosine"},
            embedding_function=None,
        )
        target.upsert(
            ids=[ids[i] for i in rows],
            embeddings=[embeddings[i] for i in rows],  # type: ignore[arg-type]
            documents=[documents[i] for i in rows],
            metadatas=[metadatas[i] for i in rows],
        )


@_guarded
def delete_where(name: str, where: dict[str, Any]) -> None:
    parts, residual = _partitions(name, where)
    for part in parts:
        if residual is not None:
            part.delete(where=residual)
        else:
            while ids := part.get(include=[], limit=GET_PAGE)["ids"]:
                part.delete(ids=ids)


@_guarded
def drop(name: str) -> None:
    """Remove every partition of ``name``."""
    for collection in client().list_collections():
        if _matches(collection.name, name, {}):
            client().delete_collection(collection.name)
            _collections.pop(collection.name, None)


@dataclass(frozen=True)
class Hit:
    id: str
    document: str
    metadata: dict[str, Any]
    distance: float


@_guarded
def query(name: str, *, embedding: list[float], k: int, where: dict[str, Any] | None = None) -> list[Hit]:
    hits: list[Hit] = []
    parts, residual = _partitions(name, where)
    for part in parts:
        result = part.query(query_embeddings=[embedding], n_results=k, where=residual)  # type: ignore[arg-type]
        ids = result["ids"][0]
        docs = (result.get("documents") or [[]])[0]
        metas = (result.get("metadatas") or [[]])[0]
        dists = (result.get("distances") or [[]])[0]
        hits += [
            Hit(id=i, document=d, metadata=dict(m or {}), distance=float(x))
            for i, d, m, x in zip(ids, docs, metas, dists, strict=True)
        ]
    return sorted(hits, key=lambda hit: hit.distance)[:k] if len(parts) > 1 else hits


GET_PAGE = 5000  # Chroma's SQLite refuses one query with too many variables (~30k chunks at once)


@_guarded
def count(name: str, where: dict[str, Any] | None = None) -> int:
    parts, residual = _partitions(name, where)
    if residual is None:
        return sum(part.count() for part in parts)
    return len(_stored_in(parts, residual))


@_guarded
def get_where(name: str, where: dict[str, Any]) -> list[Hit]:
    """Every stored chunk matching ``where`` (distance 0: not a search), fetched a page at a time."""
    return _stored_in(*_partitions(name, where))


def _stored_in(parts: list[Collection], residual: dict[str, Any] | None) -> list[Hit]:
    found: list[Hit] = []
    for part in parts:
        offset = 0
        while True:
            page = _stored(part.get(where=residual, include=["documents", "metadatas"], limit=GET_PAGE, offset=offset))
            found += page
            offset += len(page)
            if len(page) < GET_PAGE:
                break
    return found


@_guarded
def get_ids(name: str, ids: list[str], where: dict[str, Any] | None = None) -> list[Hit]:
    """The stored chunks with these ids; ``where`` (its chunk size and language) says which partitions
    to look in: one call to Chroma instead of a listing and a call per partition."""
    parts, _ = _partitions(name, where)
    return [hit for part in parts for hit in _stored(part.get(ids=ids, include=["documents", "metadatas"]))]


def _rows(vectors: Any) -> Any:
    return vectors if vectors is not None else []  # Chroma returns a NumPy array: no truth value


def _stored(result: Any) -> list[Hit]:
    docs = result.get("documents") or []
    metas = result.get("metadatas") or []
    return [
        Hit(id=i, document=d, metadata=dict(m or {}), distance=0.0)
        for i, d, m in zip(result["ids"], docs, metas, strict=True)
    ]


UNSPLIT = re.compile(r"^(chapter|user-\d+|class-\d+|perf-scale-\d+)$")  # the lab's names before partitions


@_guarded
def partition_unsplit() -> list[tuple[str, int]]:
    """Move the lab's collections stored whole (before partitions) into partitions; returns
    (name, chunks moved). `build_index` runs it first, so an upgraded lab keeps its chapter
    index and uploads. Other collections on a shared Chroma server are left alone.
    """
    moved: list[tuple[str, int]] = []
    for old in client().list_collections():
        if not UNSPLIT.match(old.name):
            continue
        total = 0
        while True:
            page = old.get(include=["embeddings", "documents", "metadatas"], limit=GET_PAGE)
            if not page["ids"]:
                break
            upsert(
                old.name,
                ids=list(page["ids"]),
                embeddings=[list(map(float, e)) for e in _rows(page["embeddings"])],
                documents=list(page["documents"] or []),
                metadatas=[dict(m or {}) for m in page["metadatas"] or []],
            )
            old.delete(ids=list(page["ids"]))
            total += len(page["ids"])
        client().delete_collection(old.name)
        moved.append((old.name, total))
    return moved
