"""A PDF's text, read in a child process: ``python -m rag.pdftext MAX_PAGES`` < file.pdf > JSON.

``rag.documents.pdf_text`` runs this under a timeout and kills it when the time is up,
so a PDF that keeps pypdf busy (or eats memory) costs one child process, never the
worker. No Django here: the child starts in a fraction of a second and only parses.
The answer is one JSON object: ``{"text": ...}`` or ``{"error": "encrypted" | "pages"
| "unreadable", "pages": n, "detail": ...}``; the parent turns it into the reason.
"""

from __future__ import annotations

import io
import json
import logging
import resource
import sys
from typing import Any

MEMORY_LIMIT_BYTES = 2 * 1024**3  # a decompression bomb fails here with MemoryError


def extract(data: bytes, *, max_pages: int) -> dict[str, Any]:
    from pypdf import PdfReader

    # pypdf reports recoverable damage as log warnings; the outcome decides here.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return {"error": "encrypted"}
        pages = len(reader.pages)
        if pages > max_pages:
            return {"error": "pages", "pages": pages}
        texts = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many types for one outcome: an unreadable file
        return {"error": "unreadable", "detail": f"{type(exc).__name__}: {exc}"[:200]}
    return {"text": "\n\n".join(text.strip() for text in texts if text.strip())}


def main() -> None:
    max_pages = int(sys.argv[1])
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT_BYTES:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, hard))
    data = sys.stdin.buffer.read()
    sys.stdout.write(json.dumps(extract(data, max_pages=max_pages)))


if __name__ == "__main__":
    main()
