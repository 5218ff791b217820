"""Uploaded files to plain text: type, size and encoding checks, PDF text extraction.

Pure parsing, no database and no outside service: the upload form calls
``document_text`` and shows a rejection's reason as it is, so every reason is a
complete, translated sentence that says what to do instead.
"""

from __future__ import annotations

import codecs
import io
import logging
from pathlib import PurePath

from django.utils.translation import gettext as _

MAX_BYTES = 5 * 1024 * 1024
MAX_LABEL = "5 MB"
KINDS = ("txt", "md", "pdf")
ALLOWED_LABEL = ".txt, .md, .pdf"


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


def document_text(filename: str, data: bytes) -> tuple[str, str]:
    """The kind and the text of an uploaded file, or ``DocumentRejected`` with the reason.

    The text is stripped and has Unix line ends: chunk offsets shown in the
    preview are offsets into exactly this text.
    """
    kind = document_kind(filename)
    if (rejected := too_large(len(data))) is not None:
        raise rejected
    if not data.strip():
        raise DocumentRejected(_("빈 파일입니다. 내용이 있는 파일을 올려 주세요."))
    text = _pdf_text(data) if kind == "pdf" else _decoded(data)
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        if kind == "pdf":
            raise DocumentRejected(
                _("PDF에서 글자를 찾지 못했습니다. 스캔한 이미지 PDF인가요? 텍스트가 들어 있는 PDF를 올려 주세요.")
            )
        raise DocumentRejected(_("빈 파일입니다. 내용이 있는 파일을 올려 주세요."))
    return kind, text


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


def _pdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    # pypdf reports recoverable damage as log warnings; the outcome decides here.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentRejected(_("암호가 걸린 PDF입니다. 암호를 해제한 PDF를 올려 주세요."))
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentRejected:
        raise
    except Exception as exc:  # pypdf raises many types for one outcome: an unreadable file
        raise DocumentRejected(
            _("PDF를 읽을 수 없습니다. 파일이 손상되었거나 PDF가 아닙니다 (%(detail)s).")
            % {"detail": f"{type(exc).__name__}: {exc}"[:200]}
        ) from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())
