from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from rag.chunking import CHUNK_SIZES
from rag.evaluation import evaluate


class Command(BaseCommand):
    help = "Print recall@1 and recall@5 of dense, lexical and hybrid retrieval on the Korean evaluation set."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--chunk-size", type=int, action="append", choices=CHUNK_SIZES)

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"{'chunk':>6} {'mode':<8} {'recall@1':>9} {'recall@5':>9}  missed at 5")
        for size in options["chunk_size"] or CHUNK_SIZES:
            for row in evaluate(chunk_size=size):
                self.stdout.write(
                    f"{size:>6} {row.mode:<8} {row.at_1:>9.2f} {row.at_5:>9.2f}  {' '.join(row.misses) or '-'}"
                )
