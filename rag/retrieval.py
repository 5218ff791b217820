"""Hybrid retrieval: dense vectors (Chroma) + Korean-aware BM25, fused by reciprocal rank.

Every hit keeps its three scores (dense similarity, lexical BM25, fused) and its
rank in each list, and the call reports the time spent embedding the question
and searching, which the chat's timing panel shows as retrieval time.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rag import embeddings, lexical, prompting, vectorstore

Mode = Literal["dense", "lexical", "hybrid"]
CANDIDATES = 30  # how deep each list goes before fusion
# The bundled all-MiniLM-L6-v2 is English-only: on the Korean evaluation set its ranking lowers
# recall when fused at all (recall@1 / @5, 98 questions, morphemes, 2026-12-04: at 500 characters
# lexical alone 0.71 / 0.95, fused with the dense ranking at weight 0.3 0.44 / 0.82, at full weight
# lower still; at 200 and 1000 characters the same: docs/performance.md). So a Korean question is
# not embedded with it: hybrid search is the lexical half alone, and saves the embedding (~20 ms of
# a core, most of a search's time). A multilingual EMBEDDING_MODEL gets its full weight;
# ``mode="dense"`` still embeds, to compare.
KOREAN_DENSE_WEIGHT_BUNDLED = 0.0


@dataclass(frozen=True)
class RetrievedChunk:
    id: str
    text: str
    metadata: dict[str, Any]
    rank: int
    fused_score: float
    dense_score: float | None
    dense_rank: int | None
    lexical_score: float | None
    lexical_rank: int | None
    relevance: float  # 0..1, see relevance(); the chat's threshold applies to it

    def context_chunk(self) -> prompting.ContextChunk:
        """This chunk as the prompt builder takes it (the chat and the RAG workloads alike)."""
        meta = self.metadata
        return prompting.ContextChunk(
            id=self.id,
            text=self.text,
            title=str(meta.get("title") or meta.get("source") or self.id),
            source=str(meta.get("source", "")),
            position=int(meta.get("chunk_index", 0)),
            rank=self.rank,
        )


@dataclass
class RetrievalResult:
    chunks: list[RetrievedChunk]
    # None: no question was embedded (lexical mode, the dense half skipped, or Chroma down); shown as "—"
    embed_ms: float | None = None
    search_ms: float = 0.0
    mode: Mode = "hybrid"
    below_threshold: int = 0  # candidates in the top-k dropped by min_relevance
    # hybrid search that left out the dense half: the embedding model cannot read the question
    # (a Korean question and the bundled English-only model, see KOREAN_DENSE_WEIGHT_BUNDLED)
    dense_skipped: bool = False
    # hybrid search whose dense half failed (Chroma down): why; the lexical half answered alone
    dense_unavailable: str = ""

    @property
    def retrieval_ms(self) -> float:
        return (self.embed_ms or 0.0) + self.search_ms


_lexical_lock = threading.Lock()
_lexical_cache: dict[str, tuple[str, lexical.BM25Index]] = {}


def _where(chunk_size: int, language: str | None) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"chunk_size": chunk_size}]
    if language:
        clauses.append({"language": language})
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _lexical_key(name: str, where: dict[str, Any]) -> tuple[str, str]:
    """The index's cache key and the stamp of what it must be built from.

    The stamp comes from the database alone (one query, no call to Chroma on a question's
    path): every write of chunks goes through an ``IndexedSource`` row of the collection, so a
    change is a different number of sources or chunks, or a newer indexing time (re-indexing
    an edited text can keep its chunk count). It covers the whole collection: a change at one
    chunk size makes every filter's index stale, which costs a rebuild, never a wrong answer.
    """
    from django.db.models import Count, Max, Sum

    from rag.models import IndexedSource

    key = f"{name}:{sorted(where.items())!r}"
    found = IndexedSource.objects.filter(collection=name).aggregate(
        sources=Count("id"), chunks=Sum("chunk_count"), latest=Max("indexed_at")
    )
    return key, f"{found['sources']}:{found['chunks']}:{found['latest']}"


def lexical_folder(key: str) -> Path:
    """Where the index of one collection and filter is kept between processes: DATA_DIR/lexical/<hash>."""
    from django.conf import settings

    return Path(settings.DATA_DIR) / "lexical" / hashlib.sha256(key.encode()).hexdigest()[:24]


def _lexical_index(name: str, where: dict[str, Any]) -> lexical.BM25Index:
    """BM25 over the chunks that match ``where``: this process's copy, else the one on disk, else built
    (and saved for every other process) whenever the collection changes.

    At 100k chunks a build takes tens of seconds on two cores (reading every chunk from Chroma
    and counting its terms); opening a saved index takes milliseconds (its postings are
    memory-mapped). The indexing worker builds it after each change (``prebuild_lexical``),
    so no question waits for a build.
    """
    key, stamp = _lexical_key(name, where)
    return _opened_or_built(name, where, key, stamp)[0]


def _opened_or_built(name: str, where: dict[str, Any], key: str, stamp: str) -> tuple[lexical.BM25Index, bool]:
    """The index for ``stamp`` from this process's copy, the disk or a build (saved); whether it was built."""
    with _lexical_lock:
        cached = _lexical_cache.get(key)
        if cached and cached[0] == stamp:
            return cached[1], False
    folder = lexical_folder(key)
    index = lexical.BM25Index.load(folder, stamp=stamp)
    built = index is None
    if index is None:
        stored = vectorstore.get_where(name, where)
        texts, metadatas = {hit.id: hit.document for hit in stored}, {hit.id: hit.metadata for hit in stored}
        index = lexical.BM25Index.build(texts, metadatas)
        with contextlib.suppress(OSError):  # a read-only data folder: this process keeps its own copy
            index.save(folder, stamp=stamp)
    with _lexical_lock:
        _lexical_cache[key] = (stamp, index)
    return index, built


def prebuild_lexical(name: str, chunk_sizes: list[int], languages: tuple[str | None, ...] = (None, "ko", "en")) -> int:
    """Build and save the lexical index of every filter the chat and the labs search ``name`` by; how many
    were (re)built. Run by the indexing worker after a change."""
    built = 0
    for size in chunk_sizes:
        for language in languages:
            where = _where(size, language)
            if vectorstore.count(name, where):
                key, stamp = _lexical_key(name, where)
                built += _opened_or_built(name, where, key, stamp)[1]
    return built


def dense_weight(question: str) -> float:
    if embeddings.is_bundled_model() and lexical.hangul_share(question) > 0.3:
        return KOREAN_DENSE_WEIGHT_BUNDLED
    return 1.0


def _dense_hits(question: str, collection: str, where: dict[str, Any]) -> tuple[list[vectorstore.Hit], float]:
    """The question's nearest chunks by embedding, and the milliseconds the embedding took."""
    started = time.perf_counter()
    vector = embeddings.embed([question])[0]
    embed_ms = (time.perf_counter() - started) * 1000
    return vectorstore.query(collection, embedding=vector, k=CANDIDATES, where=where), embed_ms


# Where the question is embedded and searched by vector, beside the lexical half (``_candidates``):
# ONNX Runtime and Chroma's HTTP call both release the GIL.
_dense_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="retrieval-dense")


@dataclass
class _Candidates:
    dense: list[vectorstore.Hit]
    embed_ms: float | None
    lexical_hits: list[tuple[str, float]]
    index: lexical.BM25Index | None
    texts: dict[str, vectorstore.Hit]  # every chunk whose text is in hand
    dense_unavailable: str = ""


def _candidates(
    question: str, collection: str, where: dict[str, Any], *, mode: Mode, top_k: int, use_dense: bool
) -> _Candidates:
    """Both lists before fusion (the dense one only if ``use_dense``). The embedding and the vector search
    run on ``_dense_pool`` while this thread reads the lexical index. The texts come with the lists:
    the dense list's from Chroma, the lexical list's from the index itself (it keeps them), so a
    search by BM25 alone makes no request to Chroma. A hybrid search whose vector half finds Chroma
    down goes on with the lexical half (a saved index needs no Chroma) and says why."""
    dense_job = _dense_pool.submit(_dense_hits, question, collection, where) if use_dense else None
    lexical_hits: list[tuple[str, float]] = []
    texts: dict[str, vectorstore.Hit] = {}
    index: lexical.BM25Index | None = None
    try:
        if mode in ("lexical", "hybrid"):
            index = _lexical_index(collection, where)
            lexical_hits = index.search(question, CANDIDATES)
            texts = _kept(index, [chunk_id for chunk_id, _ in lexical_hits[:top_k]])
    finally:
        dense, embed_ms, unavailable = _dense_outcome(dense_job, fall_back=mode == "hybrid")
    return _Candidates(dense, embed_ms, lexical_hits, index, texts | {hit.id: hit for hit in dense}, unavailable)


def _dense_outcome(
    job: Future[tuple[list[vectorstore.Hit], float]] | None, *, fall_back: bool
) -> tuple[list[vectorstore.Hit], float | None, str]:
    """The dense list and its embedding time (None when nothing was embedded); with ``fall_back``, an
    unreachable Chroma gives an empty list and the reason instead of the error."""
    if job is None:
        return [], None, ""
    try:
        dense, embed_ms = job.result()
    except vectorstore.RetrievalUnavailable as exc:
        if not fall_back:
            raise
        return [], None, str(exc)
    return dense, embed_ms, ""


def _kept(index: lexical.BM25Index | None, ids: list[str]) -> dict[str, vectorstore.Hit]:
    """The chunks of ``ids`` the lexical index keeps, as Chroma would return them."""
    found: dict[str, vectorstore.Hit] = {}
    for chunk_id in ids:
        kept = index.chunk(chunk_id) if index is not None else None
        if kept is not None:
            found[chunk_id] = vectorstore.Hit(chunk_id, kept[0], kept[1], distance=0.0)
    return found


def _relevance(mode: Mode, dense_weight: float, coverage: float, similarity: float) -> float:
    # The bundled English model's similarity means little for Korean: trust the terms there.
    if mode == "dense":
        return similarity
    if mode == "lexical" or dense_weight < 1.0:
        return coverage
    return max(coverage, similarity)


def retrieve(
    question: str,
    *,
    collection: str,
    chunk_size: int,
    top_k: int,
    language: str | None = None,
    mode: Mode = "hybrid",
    min_relevance: float = 0.0,
    embed: bool | None = None,
) -> RetrievalResult:
    """The question's top-k chunks. ``embed=True`` keeps the dense half of a hybrid search even where
    the embedding model cannot read the question (what it costs is measured that way); by default
    the question decides (``dense_weight``)."""
    started = time.perf_counter()
    where = _where(chunk_size, language)
    weight = dense_weight(question)
    use_dense = mode == "dense" or (mode == "hybrid" and (weight > 0 or bool(embed)))
    result = RetrievalResult(chunks=[], mode=mode, dense_skipped=mode == "hybrid" and not use_dense)
    found = _candidates(question, collection, where, mode=mode, top_k=top_k, use_dense=use_dense)
    dense, lexical_hits, index, known = found.dense, found.lexical_hits, found.index, found.texts
    result.embed_ms, result.dense_unavailable = found.embed_ms, found.dense_unavailable
    dense_rank = {hit.id: rank for rank, hit in enumerate(dense, start=1)}
    dense_score = {hit.id: 1.0 - hit.distance for hit in dense}  # cosine similarity
    lexical_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(lexical_hits, start=1)}
    lexical_score = dict(lexical_hits)
    # One list alone (dense or lexical mode) keeps its own order at full weight.
    fused = lexical.reciprocal_rank_fusion(
        [[h.id for h in dense], [i for i, _ in lexical_hits]], weights=[weight if mode == "hybrid" else 1.0, 1.0]
    )
    ordered = sorted(fused, key=lambda chunk_id: -fused[chunk_id])
    known |= _kept(index, [chunk_id for chunk_id in ordered[:top_k] if chunk_id not in known])
    missing = [chunk_id for chunk_id in ordered[:top_k] if chunk_id not in known]
    known |= {hit.id: hit for hit in vectorstore.get_ids(collection, missing, where)} if missing else {}
    for chunk_id in ordered[:top_k]:
        hit = known.get(chunk_id)
        if hit is None:  # deleted since the lexical index was saved
            continue
        coverage = index.coverage(question, chunk_id) if index is not None else 0.0
        relevance = _relevance(mode, weight, coverage, max(0.0, dense_score.get(chunk_id, 0.0)))
        if relevance < min_relevance:
            result.below_threshold += 1
            continue
        result.chunks.append(
            RetrievedChunk(
                id=chunk_id,
                text=hit.document,
                metadata=hit.metadata,
                rank=len(result.chunks) + 1,
                fused_score=fused[chunk_id],
                dense_score=dense_score.get(chunk_id),
                dense_rank=dense_rank.get(chunk_id),
                lexical_score=lexical_score.get(chunk_id),
                lexical_rank=lexical_rank.get(chunk_id),
                relevance=round(relevance, 4),
            )
        )
    # What retrieval took beyond embedding the question (the two overlap: their sum is the wall time).
    result.search_ms = (time.perf_counter() - started) * 1000 - (result.embed_ms or 0.0)
    return result
