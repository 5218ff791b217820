"""Recall@1 and recall@5 of dense, lexical and hybrid retrieval on the Korean evaluation set.

``--backend both`` asks every question on each embedding backend in turn (ONNX Runtime and
PyTorch, the same bundled model), so a change of backend shows whether recall moved.

    python manage.py eval_retrieval [--chunk-size 500] [--backend current|onnx|torch|both] [--json]
"""

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test.utils import override_settings

from labapp.ops.report import emit
from rag import embeddings
from rag.chunking import CHUNK_SIZES
from rag.evaluation import evaluate


class Command(BaseCommand):
    help = "Print recall@1 and recall@5 of dense, lexical and hybrid retrieval on the Korean evaluation set."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--chunk-size", type=int, action="append", choices=CHUNK_SIZES)
        parser.add_argument(
            "--backend",
            choices=("current", "onnx", "torch", "both"),
            default="current",
            help="the embedding backend the questions are embedded with (both: ONNX, then PyTorch)",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        wanted = options["backend"]
        backends = ["onnx", "torch"] if wanted == "both" else [wanted]
        rows: list[dict[str, Any]] = []
        for backend in backends:
            overrides = {} if backend == "current" else {"EMBEDDING_BACKEND": backend}
            with override_settings(**overrides):
                try:
                    used = embeddings.backend()
                except ImproperlyConfigured as exc:
                    raise CommandError(str(exc)) from None
                for size in options["chunk_size"] or CHUNK_SIZES:
                    rows += [asdict(row) | {"backend": used} for row in evaluate(chunk_size=size)]

        def text_lines() -> Iterator[str]:
            yield f"{'backend':<8} {'chunk':>6} {'mode':<8} {'recall@1':>9} {'recall@5':>9}  missed at 5"
            for row in rows:
                yield (
                    f"{row['backend']:<8} {row['chunk_size']:>6} {row['mode']:<8} "
                    f"{row['at_1']:>9.2f} {row['at_5']:>9.2f}  {' '.join(row['misses']) or '-'}"
                )

        emit(self.stdout, rows, json_wanted=options["json"], lines=text_lines)
