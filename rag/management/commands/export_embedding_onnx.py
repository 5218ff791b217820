"""Export the bundled embedding model to ONNX once, offline, from the installed weights.

``make setup`` and ``make test`` run it; it does nothing when the export in place was made
from the model installed now (``--force`` makes it again). The export is checked against
PyTorch before it replaces anything, so a failed one leaves the lab on the PyTorch backend.

    python manage.py export_embedding_onnx [--force]
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag import embeddings


class Command(BaseCommand):
    help = "Export the bundled all-MiniLM-L6-v2 to ONNX (DATA_DIR/models/all-minilm-l6-v2-onnx) for fast embedding."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="export again even when the one in place is current")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = embeddings.onnx_folder()
        if not options["force"] and embeddings.onnx_current(folder):
            self.stdout.write(f"embedding export: {folder} is current")
            return
        started = time.monotonic()
        try:
            embeddings.export_onnx(folder)
        except Exception as exc:  # torch's exporter raises many kinds; the lab stays on PyTorch
            raise CommandError(f"the embedding model was not exported to ONNX: {type(exc).__name__}: {exc}") from exc
        stamp = json.loads((folder / "stamp.json").read_text())
        self.stdout.write(
            f"embedding export: {folder} in {time.monotonic() - started:.1f} s "
            f"(lowest cosine against PyTorch {stamp['cosine']})"
        )
