"""Uploaded files to plain text: type, size and encoding checks, PDF text extraction.

No database and no outside service. The upload form calls ``upload_text`` and shows a
rejection's reason as it is, so every reason is a complete, translated sentence that
says what to do instead. A PDF is not parsed in the web request: the form keeps its
bytes and the ingestion worker calls ``pdf_text``, which reads it in a child process
bounded in pages, time, memory and text (``PDF_MAX_PAGES``, ``PDF_TIMEOUT_S``,
``PDF_MEMORY_BYTES``, ``MAX_BYTES`` characters).
"""

from __future__ import annotations

import codecs
import json
import subprocess
import sys
from pathlib import Path, PurePath
from typing import Any

from django.conf import settings

from labapp.said import gettext as _  # a refusal can be a document's saved failure: said again per reader

MAX_BYTES = 5 * 1024 * 1024
MAX_LABEL = "5 MB"
KINDS = ("txt", "md", "pdf")
ALLOWED_LABEL = ".txt, .md, .pdf"
# The PDF reader's child process (rag/pdftext.py), run from the project folder.
PDF_COMMAND: tuple[str, ...] = (sys.executable, "-m", "rag.pdftext")
# The child's address space: a decompression bomb ends there with MemoryError, never in the worker.
PDF_MEMORY_BYTES = 2 * 1024**3
PROJECT_DIR = Path(__file__).resolve().parent.parent


class DocumentRejected(ValueError):
    """The file cannot become a document; ``reason`` is shown to the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def document_kind(filename: str) -> str:
    """``txt``, ``md`` or ``pdf`` from the file name's extension, else rejected."""
    kind = PurePath(filename).suffix.lower().removeprefix(".")
    if kind == "markdown":
        kind = "md"
    if kind not in KINDS:
        raise DocumentRejected(
            _("지원하지 않는 파일 형식입니다. 올릴 수 있는 형식: %(allowed)s (일반 텍스트, 마크다운, PDF).")
            % {"allowed": ALLOWED_LABEL}
        )
    return kind


def too_large(size: int) -> DocumentRejected | None:
    if size > MAX_BYTES:
        return DocumentRejected(
            _("파일이 너무 큽니다 (%(size).1f MB). 최대 %(limit)s까지 올릴 수 있습니다.")
            % {"size": size / (1024 * 1024), "limit": MAX_LABEL}
        )
    return None


def upload_text(filename: str, data: bytes) -> tuple[str, str]:
    """What the web request keeps of an upload: its kind and text, or ``DocumentRejected``.

    A PDF's text is ``""`` here: its bytes are kept and the worker reads them
    (``pdf_text``); only a file that does not even start like a PDF is refused now.
    """
    kind = _checked_kind(filename, data)
    if kind == "pdf":
        if b"%PDF-" not in data[:1024]:
            raise _unreadable_pdf("no %PDF- header")
        return kind, ""
    return kind, _normalized(_decoded(data), kind)


def document_text(filename: str, data: bytes) -> tuple[str, str]:
    """The kind and the whole text of a file, a PDF's included, or ``DocumentRejected`` with the reason.

    The text is stripped and has Unix line ends: chunk offsets shown in the
    preview are offsets into exactly this text.
    """
    kind = _checked_kind(filename, data)
    if kind == "pdf":
        return kind, pdf_text(data)
    return kind, _normalized(_decoded(data), kind)


def _checked_kind(filename: str, data: bytes) -> str:
    kind = document_kind(filename)
    if (rejected := too_large(len(data))) is not None:
        raise rejected
    if not data.strip():
        raise DocumentRejected(_("빈 파일입니다. 내용이 있는 파일을 올려 주세요."))
    return kind


def _normalized(text: str, kind: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        if kind == "pdf":
            raise DocumentRejected(
                _("PDF에서 글자를 찾지 못했습니다. 스캔한 이미지 PDF인가요? 텍스트가 들어 있는 PDF를 올려 주세요.")
            )
        raise DocumentRejected(_("빈 파일입니다. 내용이 있는 파일을 올려 주세요."))
    return text


def _decoded(data: bytes) -> str:
    """UTF-8 (with or without BOM), or UTF-16 when a BOM says so; nothing is guessed."""
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        encoding = "utf-32"  # checked before UTF-16: the UTF-32 LE BOM starts with the UTF-16 LE one
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        text = None
    # NUL never occurs in text: it means a binary file, or UTF-16 without a BOM.
    if text is None or "\x00" in text:
        raise DocumentRejected(
            _(
                "텍스트를 읽을 수 없습니다. .txt와 .md 파일은 UTF-8로 저장해 주세요 "
                "(BOM이 있는 UTF-16도 됩니다). 이진 파일의 확장자만 바꾼 것은 아닌지 확인해 주세요."
            )
        )
    return text


def pdf_text(data: bytes, *, max_pages: int | None = None, timeout_s: float | None = None) -> str:
    """A PDF's text, read by a child process that is killed after ``timeout_s``.

    More than ``max_pages`` pages, an encrypted or damaged file, no text at all, more text
    than a text upload may hold (MAX_BYTES characters), a file that inflates past the
    child's memory (PDF_MEMORY_BYTES) or pypdf's output limits (a decompression bomb), or
    running out of time: ``DocumentRejected`` with the reason. Defaults are the
    ``PDF_MAX_PAGES`` and ``PDF_TIMEOUT_S`` settings.
    """
    max_pages = int(settings.PDF_MAX_PAGES) if max_pages is None else max_pages
    timeout_s = float(settings.PDF_TIMEOUT_S) if timeout_s is None else timeout_s
    bounds = (str(max_pages), str(MAX_BYTES), str(PDF_MEMORY_BYTES))
    try:
        done = subprocess.run(
            [*PDF_COMMAND, *bounds], input=data, capture_output=True, timeout=timeout_s, cwd=PROJECT_DIR, check=False
        )
    except subprocess.TimeoutExpired:
        raise DocumentRejected(
            _("PDF를 읽는 데 %(seconds)d초가 넘게 걸려 멈췄습니다. 더 작은 PDF로 나누어 올려 주세요.")
            % {"seconds": timeout_s}
        ) from None
    answer = _child_answer(done)
    if "text" not in answer:
        raise _pdf_refusal(answer, max_pages)
    return _normalized(str(answer["text"]), "pdf")


def _child_answer(done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    """The child's JSON, or an error made from how it ended (out of memory outside pypdf's reach included)."""
    try:
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer
    except ValueError:
        stderr = done.stderr.decode(errors="replace").strip().splitlines()
        last = stderr[-1] if stderr else ""
        if "MemoryError" in last:
            return {"error": "too_big", "detail": "MemoryError"}
        return {"error": "unreadable", "detail": f"exit code {done.returncode}: {last}"[:200]}


def _pdf_refusal(answer: dict[str, Any], max_pages: int) -> DocumentRejected:
    error = answer.get("error")
    if error == "encrypted":
        return DocumentRejected(_("암호가 걸린 PDF입니다. 암호를 해제한 PDF를 올려 주세요."))
    if error == "pages":
        return DocumentRejected(
            _("PDF가 너무 깁니다 (%(pages)d쪽). 최대 %(limit)d쪽까지 읽습니다. 나누어 올려 주세요.")
            % {"pages": answer.get("pages", 0), "limit": max_pages}
        )
    if error == "too_big":
        return DocumentRejected(
            _(
                "PDF를 펼치면 너무 커져서 읽기를 멈췄습니다 (메모리 한도 %(mb)d MB). 압축 폭탄처럼 부풀도록 만든 "
                "파일일 수 있습니다. 다른 프로그램으로 다시 저장하거나 나누어 올려 주세요."
            )
            % {"mb": PDF_MEMORY_BYTES // 1024**2}
        )
    if error == "text":
        return DocumentRejected(
            _("PDF에서 읽은 글자가 너무 많습니다 (%(chars)d자 넘음). 나누어 올려 주세요.")
            % {"chars": answer.get("chars", MAX_BYTES)}
        )
    return _unreadable_pdf(str(answer.get("detail", "")))


def _unreadable_pdf(detail: str) -> DocumentRejected:
    return DocumentRejected(
        _("PDF를 읽을 수 없습니다. 파일이 손상되었거나 PDF가 아닙니다 (%(detail)s).") % {"detail": detail}
    )
