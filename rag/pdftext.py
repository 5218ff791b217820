"""A PDF's text, read in a child process: ``python -m rag.pdftext MAX_PAGES MAX_CHARS MEMORY_BYTES`` < file.pdf > JSON.

``rag.documents.pdf_text`` runs this under a timeout and kills it when the time is up,
so a PDF that keeps pypdf busy (or eats memory) costs one child process, never the
worker. No Django here: the child starts in a fraction of a second and only parses.
Its address space is capped at MEMORY_BYTES (a decompression bomb ends in MemoryError),
and pypdf's own output limits (pypdf.errors.LimitReachedError: a stream, an array of
streams or a page tree that would inflate past tens of MB) usually stop one long before.
The answer is one JSON object: ``{"text": ...}`` or ``{"error": "encrypted" | "pages"
| "too_big" | "text" | "unreadable", "pages": n, "detail": ...}``; the parent turns it into the reason.
"""

from __future__ import annotations

import io
import json
import logging
import resource
import sys
from typing import Any


def extract(data: bytes, *, max_pages: int, max_chars: int = 2**62) -> dict[str, Any]:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    # pypdf reports recoverable damage as log warnings; the outcome decides here.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return {"error": "encrypted"}
        pages = len(reader.pages)
        if pages > max_pages:
            return {"error": "pages", "pages": pages}
        return _texts(reader, max_chars)
    except (LimitReachedError, MemoryError) as exc:  # a decompression bomb, stopped
        return {"error": "too_big", "detail": type(exc).__name__}
    except Exception as exc:  # pypdf raises many types for one outcome: an unreadable file
        return {"error": "unreadable", "detail": f"{type(exc).__name__}: {exc}"[:200]}


def _texts(reader: Any, max_chars: int) -> dict[str, Any]:
    """Every page's text, stopped as soon as it passes ``max_chars`` (what a text upload may hold)."""
    texts, total = [], 0
    for page in reader.pages:
        text = (page.extract_text() or "").strip()
        total += len(text)
        if total > max_chars:
            return {"error": "text", "chars": max_chars}
        texts.append(text)
    return {"text": "\n\n".join(text for text in texts if text)}


def main() -> None:
    max_pages, max_chars, memory_bytes = (int(arg) for arg in sys.argv[1:4])
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, hard))
    data = sys.stdin.buffer.read()
    sys.stdout.write(json.dumps(extract(data, max_pages=max_pages, max_chars=max_chars)))


if __name__ == "__main__":
    main()
