"""Retrieval latency (question embedding + hybrid search) as the collection grows.

For each size it fills a collection of its own (``perf-scale-<n>``, kept for the next
run) with synthetic Korean chunks made from the chapter's own words, so BM25 sees a
realistic vocabulary; the stored vectors are random unit vectors (search cost does not
depend on what they mean, and embedding 100k chunks would take an hour on two cores).
Then it asks the evaluation questions through ``rag.retrieval.retrieve`` and prints
p50/p95 of embed, search and total per size, and the one-time BM25 build.

    python manage.py bench_retrieval_scale [--sizes 1000,10000,100000] [--questions 20]
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

DIMENSIONS = 384  # all-MiniLM-L6-v2
BATCH = 2000


def _vocabulary() -> list[str]:
    from labapp.models import ChapterSection
    from rag.lexical import terms

    words: list[str] = []
    for body in ChapterSection.objects.filter(language="ko").values_list("body", flat=True):
        words += terms(body)
    if not words:
        raise CommandError("the chapter is not loaded: run python manage.py load_chapter")
    return words


def fill(name: str, size: int, *, seed: int = 7) -> float:
    """Make ``name`` hold exactly ``size`` synthetic chunks; seconds spent (0 when it already did)."""
    from rag import vectorstore

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


def _percentile(values: list[float], q: float) -> float:
    from bench.metrics import percentile

    return percentile(values, q)


class Command(BaseCommand):
    help = "p50/p95 retrieval latency (embed + hybrid search) at growing collection sizes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="1000,10000,100000")
        parser.add_argument("--questions", type=int, default=20)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        from rag.evaluation import load_questions
        from rag.retrieval import retrieve

        try:
            sizes = [int(s) for s in options["sizes"].split(",") if s.strip()]
        except ValueError as exc:
            raise CommandError(f"--sizes: {exc}") from exc
        questions = [q.question for q in load_questions()][: options["questions"]]
        rows = []
        for size in sizes:
            name = f"perf-scale-{size}"
            filled = fill(name, size)
            started = time.perf_counter()
            retrieve(questions[0], collection=name, chunk_size=500, top_k=5, language="ko")  # builds BM25 once
            first = time.perf_counter() - started
            embed, search, total = [], [], []
            for question in questions:
                result = retrieve(question, collection=name, chunk_size=500, top_k=5, language="ko")
                embed.append(result.embed_ms)
                search.append(result.search_ms)
                total.append(result.retrieval_ms)
            rows.append(
                {
                    "chunks": size,
                    "fill_s": round(filled, 1),
                    "first_query_s": round(first, 2),
                    **{
                        f"{name}_p50_ms": round(_percentile(v, 50), 1)
                        for name, v in (("embed", embed), ("search", search), ("total", total))
                    },
                    **{
                        f"{name}_p95_ms": round(_percentile(v, 95), 1)
                        for name, v in (("embed", embed), ("search", search), ("total", total))
                    },
                    "total_mean_ms": round(statistics.mean(total), 1),
                }
            )
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=1))
            return
        self.stdout.write("chunks   embed p50/p95   search p50/p95   total p50/p95 (ms)   first query (BM25 build)")
        for row in rows:
            self.stdout.write(
                f"{row['chunks']:>7} {row['embed_p50_ms']:>7}/{row['embed_p95_ms']:<7} "
                f"{row['search_p50_ms']:>8}/{row['search_p95_ms']:<8} "
                f"{row['total_p50_ms']:>8}/{row['total_p95_ms']:<10} "
                f"{row['first_query_s']} s"
            )
