"""Split text into chunks of about ``size`` characters with ``overlap``.

Cuts prefer a paragraph break, then a sentence end, then a space, within the
last fifth of the window, so chunks rarely end mid-word (Korean included).
"""

from __future__ import annotations

from dataclasses import dataclass

CHUNK_SIZES = (200, 500, 1000)
_BREAKS = ("\n\n", "\n", ". ", "? ", "! ", "。", " ")


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int
    end: int
    text: str


def split(text: str, *, size: int, overlap: int | None = None) -> list[Chunk]:
    if size < 20:
        raise ValueError("chunk size must be at least 20 characters")
    overlap = size // 10 if overlap is None else overlap
    if not 0 <= overlap < size // 2:
        raise ValueError("overlap must be between 0 and half the chunk size")
    text = text.strip()
    chunks: list[Chunk] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            window_from = start + size * 4 // 5
            for mark in _BREAKS:  # in order of preference
                found = text.rfind(mark, window_from, end)
                if found != -1:
                    end = found + len(mark)
                    break
        piece = text[start:end].strip()
        if piece:
            chunks.append(Chunk(len(chunks), start, end, piece))
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return chunks
