from typing import Any

from django.core.management.base import BaseCommand

from labapp.chapter.services import chapter_load


class Command(BaseCommand):
    help = "Load the chapter's Markdown pages into the database (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        report = chapter_load()
        self.stdout.write(
            f"chapter: {report.created} created, {report.updated} updated, "
            f"{report.unchanged} unchanged, {report.removed} removed"
        )
