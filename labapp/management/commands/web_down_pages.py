from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from labapp.ops import web_down


class Command(BaseCommand):
    help = "Write the page nginx shows when a web process dies under a request, once per language, into FOLDER."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", type=Path, help="the folder nginx serves the pages from")

    def handle(self, *args: Any, **options: Any) -> None:
        for path in web_down.write(options["folder"]):
            self.stdout.write(f"web-down page: {path}")
