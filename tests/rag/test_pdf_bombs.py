"""Real PDF bombs, made here byte by byte, uploaded through the form and ingested by the worker's task:
each ends within the stated bounds (PDF_MAX_PAGES, PDF_TIMEOUT_S, the reader's memory cap
rag.documents.PDF_MEMORY_BYTES, and at most MAX_BYTES characters of text) with a clear reason saved on
the document, while the worker's own memory stays where it was (the PDF is inflated only in the
child process, never in the worker)."""

from __future__ import annotations

import resource
import zlib
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import translation

from rag import documents, tasks
from rag.models import Document
from tests.rag.test_document_rules import client_for, upload

pytestmark = pytest.mark.django_db

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
PAGE = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %s >>"
WORKER_GROWTH_MOST = 64 * 1024**2  # what the worker's peak RSS may grow by while a bomb is read


def pdf(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the catalog first), with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def flate(unit: bytes, megabytes: int) -> bytes:
    """A FlateDecode stream object of ``unit`` repeated to ``megabytes`` MB, compressed a MB at a time."""
    squeeze, chunk = zlib.compressobj(9), unit * ((1 << 20) // len(unit))
    data = b"".join(squeeze.compress(chunk) for _ in range(megabytes)) + squeeze.flush()
    return b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(data), data)


def inflating_bomb() -> bytes:
    """One page whose contents are one 8 MB stream (8 KB compressed) listed 512 times: 4 GiB of content,
    twice the reader's memory cap."""
    contents = b"[" + b" ".join([b"4 0 R"] * 512) + b"]"
    return pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>", FONT,
                flate(b" ", 8), PAGE % contents])  # fmt: skip


def page_tree_bomb() -> bytes:
    """A page tree nine levels deep, each node listing the node below ten times: 10^9 pages in 1.5 KB."""
    nodes = [b"<< /Type /Page /Parent 4 0 R /MediaBox [0 0 612 792] >>"]  # object 3, the one leaf
    for level in range(1, 10):
        kids = b" ".join([b"%d 0 R" % (2 + level)] * 10)
        nodes.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, 10**level))
    return pdf([b"<< /Type /Catalog /Pages 12 0 R >>", b"<< >>", *nodes])


def slow_pages_bomb() -> bytes:
    """150 pages (within PDF_MAX_PAGES) sharing one 1 MB stream (3 KB compressed) of text operators:
    minutes of parsing, and more text than a text upload may hold."""
    pages = [PAGE % b"4 0 R"] * 150
    kids = b" ".join(b"%d 0 R" % (5 + n) for n in range(150))
    return pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count 150 >>" % kids, FONT,
                flate(b"BT /F1 9 Tf (A) Tj ET\n", 1), *pages])  # fmt: skip


def ingested(user: User, enqueued: list[int], name: str, data: bytes, *, language: str = "ko") -> Document:
    """Uploaded through the form, then read by the ingestion task itself (as the worker runs it)."""
    assert upload(client_for(user), name, data).status_code == 302
    (document_id,) = enqueued
    with translation.override(language):
        tasks.document_ingest(document_id)
    return Document.objects.get(pk=document_id)


def peak_rss_bytes(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # kilobytes on Linux


# The first two stop on their own bound within the default PDF_TIMEOUT_S (60 s); the third runs into a
# 2 s one (its text bound would come only after minutes).
BOMBS = [
    ("inflating", inflating_bomb, None, "PDF를 펼치면 너무 커져서"),
    ("page tree", page_tree_bomb, None, "PDF를 펼치면 너무 커져서"),
    ("slow pages", slow_pages_bomb, 2, "2초가 넘게 걸려"),
]


@pytest.mark.parametrize(("what", "make", "timeout_s", "reason"), BOMBS, ids=[row[0] for row in BOMBS])
def test_a_pdf_bomb_fails_within_the_bounds_with_the_reason_and_the_worker_keeps_its_memory(
    learner: User,
    enqueued: list[int],
    no_indexing: list[str],
    settings: Any,
    what: str,
    make: Any,
    timeout_s: int | None,
    reason: str,
) -> None:
    settings.PDF_TIMEOUT_S = timeout_s or settings.PDF_TIMEOUT_S
    bomb = make()
    assert len(bomb) < 64 * 1024, f"{what}: {len(bomb)} bytes"  # a small upload, well inside every quota
    worker_before = peak_rss_bytes(resource.RUSAGE_SELF)
    done = ingested(learner, enqueued, f"{what}.pdf", bomb)
    assert (done.status, done.progress, no_indexing) == (Document.Status.FAILED, 0, []), done.error
    assert reason in done.error, done.error
    assert peak_rss_bytes(resource.RUSAGE_CHILDREN) <= documents.PDF_MEMORY_BYTES  # the reader, capped
    assert peak_rss_bytes(resource.RUSAGE_SELF) - worker_before < WORKER_GROWTH_MOST


def test_the_readers_memory_cap_stops_a_bomb_that_pypdfs_own_limits_let_through(
    learner: User, enqueued: list[int], no_indexing: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 MB of text operators (80 KB compressed) stay under pypdf's 75 MB stream limit, but parsing them
    takes hundreds of MB: with the cap at 200 MB the kernel refuses the child more (RLIMIT_AS), it ends
    in MemoryError, and the document says so, naming the cap."""
    monkeypatch.setattr(documents, "PDF_MEMORY_BYTES", 200 * 1024**2)
    hungry = pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>", FONT,
                  flate(b"BT /F1 9 Tf (A) Tj ET\n", 40), PAGE % b"4 0 R"])  # fmt: skip
    done = ingested(learner, enqueued, "hungry.pdf", hungry)
    assert done.status == Document.Status.FAILED and no_indexing == []
    assert "PDF를 펼치면 너무 커져서 읽기를 멈췄습니다 (메모리 한도 200 MB)" in done.error, done.error


def test_a_bomb_s_reason_reads_in_english_from_the_catalog(
    learner: User, enqueued: list[int], no_indexing: list[str]
) -> None:
    done = ingested(learner, enqueued, "bomb.pdf", inflating_bomb(), language="en")
    with translation.override("en"):  # ``error`` keeps the site's language; each reader reads their own
        shown = done.error_shown
    assert "grows too large when unpacked" in shown and "펼치면" not in shown


def test_a_pdf_with_more_text_than_a_text_upload_may_hold_fails_with_the_reason(
    learner: User, enqueued: list[int], no_indexing: list[str]
) -> None:
    """Six pages sharing one 1 MB stream of letters (2.5 KB compressed): 6 M characters of text, past the
    MAX_BYTES characters a .txt upload may hold, which would otherwise be chunked and embedded."""
    pages = [PAGE % b"4 0 R"] * 6
    kids = b" ".join(b"%d 0 R" % (5 + n) for n in range(6))
    wordy = pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count 6 >>" % kids, FONT,
                 flate(b"BT /F1 9 Tf (" + b"A" * 20000 + b") Tj ET\n", 1), *pages])  # fmt: skip
    done = ingested(learner, enqueued, "wordy.pdf", wordy)
    assert done.status == Document.Status.FAILED and no_indexing == []
    assert f"PDF에서 읽은 글자가 너무 많습니다 ({documents.MAX_BYTES}자 넘음)" in done.error, done.error
