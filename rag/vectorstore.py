"""The only chromadb import: a lazily created HTTP client to the Chroma server.

Web and worker processes both talk to one Chroma server (embedded `chroma run`
or CHROMA_URL) rather than opening one persistent directory from two processes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from django.conf import settings

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

T = TypeVar("T")
_lock = threading.Lock()
_client: ClientAPI | None = None


class RetrievalUnavailable(RuntimeError):
    """Chroma could not be reached; callers say "retrieval unavailable"."""


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
    """Turn any failure to talk to the Chroma server into RetrievalUnavailable."""

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return call(*args, **kwargs)
        except RetrievalUnavailable:
            raise
        except Exception as exc:  # chromadb raises httpx, ValueError and its own types alike
            raise RetrievalUnavailable(f"Chroma at {settings.CHROMA_URL}: {type(exc).__name__}: {exc}") from exc

    return wrapper


def collection(name: str) -> Collection:
    # Vectors come from rag.embeddings; Chroma only stores and searches them.
    return client().get_or_create_collection(name=name, metadata={"hnsw:space": "cosine"}, embedding_function=None)


@_guarded
def upsert(
    name: str, *, ids: list[str], embeddings: list[list[float]], documents: list[str], metadatas: list[dict[str, Any]]
) -> None:
    collection(name).upsert(ids=ids, embeddings=embeddings, documents=documents, metadatas=metadatas)  # type: ignore[arg-type]


@_guarded
def delete_where(name: str, where: dict[str, Any]) -> None:
    collection(name).delete(where=where)


@dataclass(frozen=True)
class Hit:
    id: str
    document: str
    metadata: dict[str, Any]
    distance: float


@_guarded
def query(name: str, *, embedding: list[float], k: int, where: dict[str, Any] | None = None) -> list[Hit]:
    result = collection(name).query(query_embeddings=[embedding], n_results=k, where=where)  # type: ignore[arg-type]
    ids = result["ids"][0]
    docs = (result.get("documents") or [[]])[0]
    metas = (result.get("metadatas") or [[]])[0]
    dists = (result.get("distances") or [[]])[0]
    return [
        Hit(id=i, document=d, metadata=dict(m or {}), distance=float(x))
        for i, d, m, x in zip(ids, docs, metas, dists, strict=True)
    ]


@_guarded
def count(name: str) -> int:
    return collection(name).count()


GET_PAGE = 5000  # Chroma's SQLite refuses one query with too many variables (~30k chunks at once)


@_guarded
def get_where(name: str, where: dict[str, Any]) -> list[Hit]:
    """Every stored chunk matching ``where`` (distance 0: not a search), fetched a page at a time."""
    found: list[Hit] = []
    target = collection(name)
    while True:
        page = _stored(target.get(where=where, include=["documents", "metadatas"], limit=GET_PAGE, offset=len(found)))
        found += page
        if len(page) < GET_PAGE:
            return found


@_guarded
def get_ids(name: str, ids: list[str]) -> list[Hit]:
    return _stored(collection(name).get(ids=ids, include=["documents", "metadatas"]))


def _stored(result: Any) -> list[Hit]:
    docs = result.get("documents") or []
    metas = result.get("metadatas") or []
    return [
        Hit(id=i, document=d, metadata=dict(m or {}), distance=0.0)
        for i, d, m in zip(result["ids"], docs, metas, strict=True)
    ]
