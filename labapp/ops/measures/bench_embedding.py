"""How long one question takes to embed on each backend, and what the faster ones cost in accuracy.

For the evaluation questions, one at a time as the chat asks them: sentence-transformers on
PyTorch, the ONNX export on ONNX Runtime with one and with two threads, and the export
quantised to int8 (per channel, dynamic; made in a temporary folder, never used by the lab).
Each row has its p50/p95, its lowest and median cosine to PyTorch's vectors, and (``--recall``)
recall@1/@5 of hybrid and dense retrieval at 500-character chunks with the questions embedded
that way against the chapter as indexed (Chroma must be running).

    python manage.py bench_embedding [--questions 40] [--recall] [--json]
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser

from labapp.ops.report import emit
from rag import embeddings
from rag.evaluation import evaluate, load_questions


def _timed(encoder: embeddings.Encoder, questions: list[str]) -> list[float]:
    encoder.encode(["warm-up"])
    spent = []
    for question in questions:
        started = time.perf_counter()
        encoder.encode([question])
        spent.append((time.perf_counter() - started) * 1000)
        time.sleep(0.02)  # a pause, as between a learner's questions
    return spent


def _recall(encoder: embeddings.Encoder) -> dict[str, float]:
    """Recall at 500-character chunks with the questions embedded by ``encoder``."""

    with mock.patch.object(embeddings, "get_model", lambda: encoder):
        rows = evaluate(chunk_size=500, modes=("dense", "hybrid"))
    return {f"{row.mode}_at_{k}": round(getattr(row, f"at_{k}"), 3) for row in rows for k in (1, 5)}


def _quantised(folder: Path, target: Path) -> Path:

    # Only this row needs the quantiser (and it logs at import): loaded when it is made.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.WARNING)  # the quantiser logs every tensor at INFO
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / "tokenizer.json", target / "tokenizer.json")
    quantize_dynamic(
        str(folder / "model.onnx"), str(target / "model.onnx"), per_channel=True, weight_type=QuantType.QInt8
    )
    return target


class Command(BaseCommand):
    help = "Time a question's embedding on PyTorch, ONNX Runtime (1 and 2 threads) and int8; cosine and recall of each."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--questions", type=int, default=40)
        parser.add_argument("--recall", action="store_true", help="also recall@1/@5 with each (needs Chroma)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = embeddings.onnx_folder()
        if not embeddings.onnx_current(folder):
            raise CommandError(f"no current ONNX export in {folder}: run python manage.py export_embedding_onnx")
        questions = [q.question for q in load_questions()][: options["questions"]]
        reference = embeddings.TorchEncoder(str(embeddings.bundled_model_path()))
        truth = reference.encode(questions)
        rows: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory() as scratch:
            encoders: list[tuple[str, embeddings.Encoder]] = [
                ("torch (sentence-transformers)", reference),
                ("onnx, 1 thread", embeddings.OnnxEncoder(folder, threads=1)),
                ("onnx, 2 threads (the lab's)", embeddings.OnnxEncoder(folder, threads=2)),
                (
                    "onnx int8, 2 threads (not used)",
                    embeddings.OnnxEncoder(_quantised(folder, Path(scratch)), threads=2),
                ),
            ]
            for name, encoder in encoders:
                spent = sorted(_timed(encoder, questions))
                cosine = np.sum(encoder.encode(questions) * truth, axis=1)
                row: dict[str, Any] = {
                    "backend": name,
                    "p50_ms": round(statistics.median(spent), 2),
                    "p95_ms": round(spent[min(len(spent) - 1, int(0.95 * len(spent)))], 2),
                    "cosine_min": round(float(cosine.min()), 4),
                    "cosine_median": round(float(np.median(cosine)), 4),
                }
                rows.append(row | (_recall(encoder) if options["recall"] else {}))

        def text_lines() -> Iterator[str]:
            yield f"{len(questions)} questions, one at a time"
            for row in rows:
                recall = (
                    f"  hybrid @1/@5 {row['hybrid_at_1']:.2f}/{row['hybrid_at_5']:.2f}, "
                    f"dense {row['dense_at_1']:.2f}/{row['dense_at_5']:.2f}"
                    if "hybrid_at_1" in row
                    else ""
                )
                yield (
                    f"{row['backend']:<34} p50 {row['p50_ms']:6.2f} ms  p95 {row['p95_ms']:6.2f} ms  "
                    f"cosine to torch min {row['cosine_min']:.4f} median {row['cosine_median']:.4f}{recall}"
                )

        emit(self.stdout, rows, json_wanted=options["json"], lines=text_lines)
