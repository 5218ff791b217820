"""Retrieval latency (hybrid search, and the question's embedding where it is embedded) as the collection grows.

For each size it fills a collection of its own (``perf-scale-<n>``, kept for the next
run) with synthetic Korean chunks made from the chapter's own words, so BM25 sees a
realistic vocabulary; the stored vectors are random unit vectors (search cost does not
depend on what they mean, and embedding 100k chunks would take an hour on two cores).
Then it asks the evaluation questions through ``rag.retrieval.retrieve`` and prints
p50/p95 of embed, search and total per size, and the one-time BM25 build: once as the chat asks
them (Korean questions are not embedded with the bundled English-only model) and once with each
question embedded too (what an English question costs).

    python manage.py bench_retrieval_scale [--sizes 1000,10000,100000] [--questions 20]
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from bench.metrics import percentile
from labapp.models import ChapterSection
from labapp.ops.report import emit
from rag import retrieval, vectorstore
from rag.evaluation import load_questions
from rag.lexical import terms
from rag.models import IndexedSource

DIMENSIONS = 384  # all-MiniLM-L6-v2
BATCH = 2000


def _vocabulary() -> list[str]:

    words: list[str] = []
    for body in ChapterSection.objects.filter(language="ko").values_list("body", flat=True):
        words += terms(body)
    if not words:
        raise CommandError("the chapter is not loaded: run python manage.py load_chapter")
    return words


def fill(name: str, size: int, *, seed: int = 7) -> float:
    """Make ``name`` hold exactly ``size`` synthetic chunks; seconds spent (0 when it already did)."""

    # Recorded as the lab records every indexed text, so the lexical index's stamp (read from the
    # database on every question) changes when the synthetic chunks do.
    recorded = {"content_hash": f"seed {seed}", "chunk_count": size}
    row, _ = IndexedSource.objects.get_or_create(collection=name, source="synthetic", chunk_size=500, defaults=recorded)
    if (row.content_hash, row.chunk_count) != tuple(recorded.values()):
        IndexedSource.objects.filter(pk=row.pk).update(**recorded, indexed_at=timezone.now())
    if vectorstore.count(name) == size:
        return 0.0
    started = time.perf_counter()
    if vectorstore.count(name):
        vectorstore.drop(name)  # a different size: start over
    rng = random.Random(seed)
    words = _vocabulary()
    for start in range(0, size, BATCH):
        ids, texts, vectors = [], [], []
        for index in range(start, min(size, start + BATCH)):
            ids.append(f"{name}-{index}")
            texts.append(" ".join(rng.choices(words, k=120)))
            vector = [rng.gauss(0, 1) for _ in range(DIMENSIONS)]
            norm = sum(v * v for v in vector) ** 0.5
            vectors.append([v / norm for v in vector])
        metadata = [{"chunk_size": 500, "language": "ko", "source": name, "chunk_index": i} for i in range(len(ids))]
        vectorstore.upsert(name, ids=ids, embeddings=vectors, documents=texts, metadatas=metadata)
    return time.perf_counter() - started


def bm25s_side_by_side(name: str, questions: list[str]) -> dict[str, float]:
    """Our lexical index and bm25s (Lucene's BM25, our Korean terms) on the same chunks: search p50,
    bm25s's index and open times, and how often both put the same five chunks on top."""

    import bm25s  # only --bm25s compares against it: not loaded otherwise

    where = retrieval._where(500, "ko")
    hits = vectorstore.get_where(name, where)
    ours = retrieval._lexical_index(name, where)
    started = time.perf_counter()
    theirs = bm25s.BM25(k1=ours.k1, b=ours.b, method="lucene")
    theirs.index([terms(hit.document) for hit in hits], show_progress=False)
    indexed = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        theirs.save(folder)
        started = time.perf_counter()
        theirs = bm25s.BM25.load(folder, mmap=True)
        opened = time.perf_counter() - started
        mine_ms, their_ms, same = [], [], 0
        for question in questions:
            started = time.perf_counter()
            mine = [doc_id for doc_id, _score in ours.search(question, 30)]
            mine_ms.append(1000 * (time.perf_counter() - started))
            started = time.perf_counter()
            found, _scores = theirs.retrieve([terms(question)], k=30, show_progress=False, n_threads=1)
            their_ms.append(1000 * (time.perf_counter() - started))
            same += len(set(mine[:5]) & {hits[int(i)].id for i in found[0][:5]})
    return {
        "lexical_search_p50_ms": round(_percentile(mine_ms, 50), 2),
        "bm25s_search_p50_ms": round(_percentile(their_ms, 50), 2),
        "bm25s_index_s": round(indexed, 2),
        "bm25s_open_s": round(opened, 3),
        "bm25s_top5_agreement": round(same / (5 * len(questions)), 3) if questions else 0.0,
    }


def _percentile(values: list[float], q: float) -> float:

    return percentile(values, q)


def prepare(size: int) -> dict[str, Any]:
    """``perf-scale-<size>`` filled and its lexical index built and saved, as the indexing worker does
    after a change: the collection's name and the seconds each took."""

    name = f"perf-scale-{size}"
    filled = fill(name, size)
    started = time.perf_counter()
    retrieval.prebuild_lexical(name, [500], ("ko",))
    prebuilt = time.perf_counter() - started
    return {"chunks": size, "collection": name, "fill_s": round(filled, 1), "lexical_build_s": round(prebuilt, 2)}


def first_question(name: str, question: str) -> float:
    """Seconds to answer ``question`` in a process that has not searched ``name`` yet: it opens the
    saved lexical index instead of building one (a Korean question: BM25 alone, as the chat asks)."""

    retrieval._lexical_cache.clear()
    started = time.perf_counter()
    retrieval.retrieve(question, collection=name, chunk_size=500, top_k=5, language="ko")
    return time.perf_counter() - started


def measure(size: int, questions: list[str], *, bm25s: bool) -> dict[str, Any]:
    """One collection size: filled, its lexical index built as the worker builds it, the first question
    of a process that has not searched yet, then every question's embed, search and total times."""

    row: dict[str, Any] = prepare(size)
    name = row["collection"]
    row["first_query_s"] = round(first_question(name, questions[0]), 2)
    # As the chat searches (a Korean question: BM25 alone with the bundled English-only model), then
    # with the question embedded as well (what an English question, or any question with a
    # multilingual model, costs): prefix "embedded_".
    for prefix, embed in (("", None), ("embedded_", True)):
        times: dict[str, list[float]] = {"embed": [], "search": [], "total": []}
        for question in questions:
            result = retrieval.retrieve(question, collection=name, chunk_size=500, top_k=5, language="ko", embed=embed)
            times["embed"].append(result.embed_ms or 0.0)  # a question not embedded costs no embedding
            times["search"].append(result.search_ms)
            times["total"].append(result.retrieval_ms)
        for part, values in times.items():
            row[f"{prefix}{part}_p50_ms"] = round(_percentile(values, 50), 1)
            row[f"{prefix}{part}_p95_ms"] = round(_percentile(values, 95), 1)
        row[f"{prefix}total_mean_ms"] = round(statistics.mean(times["total"]), 1)
    return row | (bm25s_side_by_side(name, questions) if bm25s else {})


class Command(BaseCommand):
    help = "p50/p95 retrieval latency (hybrid search, then with the question embedded) at growing collection sizes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="1000,10000,100000")
        parser.add_argument("--questions", type=int, default=20)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--bm25s", action="store_true", help="also time bm25s on the same chunks, side by side")

    def handle(self, *args: Any, **options: Any) -> None:

        try:
            sizes = [int(s) for s in options["sizes"].split(",") if s.strip()]
        except ValueError as exc:
            raise CommandError(f"--sizes: {exc}") from exc
        questions = [q.question for q in load_questions()][: options["questions"]]
        rows = [measure(size, questions, bm25s=options["bm25s"]) for size in sizes]

        def text_lines() -> Iterator[str]:
            yield (
                "chunks   embed p50/p95   search p50/p95   total p50/p95 (ms)   first query   lexical build (worker)"
            )
            for row in rows:
                yield (
                    f"{row['chunks']:>7} {row['embed_p50_ms']:>7}/{row['embed_p95_ms']:<7} "
                    f"{row['search_p50_ms']:>8}/{row['search_p95_ms']:<8} "
                    f"{row['total_p50_ms']:>8}/{row['total_p95_ms']:<10} "
                    f"{row['first_query_s']:>8} s   {row['lexical_build_s']} s"
                )
                yield (
                    f"  embedded {row['embedded_embed_p50_ms']:>7}/{row['embedded_embed_p95_ms']:<7} "
                    f"{row['embedded_search_p50_ms']:>8}/{row['embedded_search_p95_ms']:<8} "
                    f"{row['embedded_total_p50_ms']:>8}/{row['embedded_total_p95_ms']:<10} "
                    "(the question embedded too: an English question, or a multilingual model)"
                )
                if "bm25s_search_p50_ms" in row:
                    yield (
                        f"         BM25 search p50: ours {row['lexical_search_p50_ms']} ms, bm25s "
                        f"{row['bm25s_search_p50_ms']} ms; bm25s index {row['bm25s_index_s']} s, "
                        f"open {row['bm25s_open_s']} s; same top 5: {row['bm25s_top5_agreement']}"
                    )

        emit(self.stdout, rows, json_wanted=options["json"], lines=text_lines)
