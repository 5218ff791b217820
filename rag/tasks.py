"""Celery tasks of the retrieval side: thin wrappers that re-fetch and call a service."""

from __future__ import annotations

from celery import shared_task

from rag import services
from rag.models import Document


@shared_task(name="rag.document_ingest", queue="default", ignore_result=True)
def document_ingest(document_id: int) -> str:
    """Read a PDF's text, chunk, embed and store one uploaded document (progress and failures land on the row).

    No automatic retry: a failure is recorded on the document with its reason and
    the learner uploads again. A worker lost mid-run leaves the task unacknowledged
    (acks_late) until the broker's visibility timeout; meanwhile the document pages mark
    the silent row failed (``services.documents_reap_stale``), and any later run, a
    re-upload or the redelivery, simply replaces what the first one wrote. A task lost while
    queued (a Redis restart) is sent once more by the same reaper.
    """
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "gone"
    return services.document_ingest(document=document).status
