import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag import vectorstore
from rag.services import chapter_index


class Command(BaseCommand):
    help = "Embed the chapter's pages at every chunk size into Chroma (skips unchanged pages)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wait", type=float, default=0, help="seconds to wait for Chroma to answer")
        parser.add_argument("--force", action="store_true", help="re-embed every page")

    def handle(self, *args: Any, **options: Any) -> None:
        deadline = time.monotonic() + options["wait"]
        while True:
            try:
                vectorstore.info()
                break
            except vectorstore.RetrievalUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise CommandError(f"search index not built: {exc}") from None
                time.sleep(1)
        started = time.monotonic()
        for name, moved in vectorstore.partition_unsplit():
            self.stdout.write(f"index: {name} moved into per-chunk-size partitions ({moved} chunks)")
        report = chapter_index(force=options["force"])
        self.stdout.write(
            f"index: {report.indexed} pages embedded, {report.skipped} unchanged, "
            f"{report.chunks} chunks in Chroma ({time.monotonic() - started:.1f} s)"
        )
