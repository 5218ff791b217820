from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from labapp import said

# The shared chapter's collection; a user's is ``user-<id>``, a class's ``class-<id>``.
CHAPTER_COLLECTION = "chapter"


class IndexedSource(models.Model):
    """What the vector store holds for one source text at one chunk size."""

    collection = models.CharField(max_length=100)
    source = models.CharField(max_length=200)
    chunk_size = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)
    chunk_count = models.PositiveIntegerField()
    indexed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["collection", "source", "chunk_size"], name="unique_indexed_source"),
        ]


class Document(said.KeepsError, models.Model):
    """An uploaded file, ingested into its owner's collection or (uploaded by an instructor) a class's."""

    error_form_field = "error_said"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        INGESTING = "ingesting", "ingesting"
        READY = "ready", "ready"
        FAILED = "failed", "failed"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="documents")
    collection = models.CharField(max_length=100)
    title = models.CharField(max_length=200)
    filename = models.CharField(max_length=255)
    kind = models.CharField(max_length=8)  # txt, md, pdf
    size_bytes = models.PositiveIntegerField()
    text = models.TextField()  # extracted text: what gets chunked
    # A PDF as uploaded, until the worker extracts its text (bounded in pages and time) and empties it.
    raw = models.BinaryField(default=b"", editable=False)
    content_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    error = models.TextField(blank=True)
    error_said = models.JSONField(null=True, blank=True, default=None)  # ``said.KeepsError``
    chunk_counts = models.JSONField(default=dict)  # {"200": n, "500": n, "1000": n}
    # When the reaper sent a long-queued document's task again (a broker restart loses queued tasks).
    resent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["collection", "filename"], name="unique_document_name_per_collection"),
        ]

    @property
    def source(self) -> str:
        return f"doc/{self.pk}"

    def __str__(self) -> str:
        return f"{self.title} ({self.collection})"


class Conversation(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or f"conversation {self.pk}"


class Answer(said.KeepsError, models.Model):
    """One question and its streamed answer, with the settings and every measured number."""

    error_form_field = "error_said"

    class Status(models.TextChoices):
        STREAMING = "streaming", "streaming"
        DONE = "done", "done"
        STOPPED = "stopped", "stopped"
        FAILED = "failed", "failed"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="answers")
    # "Ask again with other settings": the answer this one is compared with.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries")
    question = models.TextField()
    settings = models.JSONField(default=dict)
    prompt = models.TextField(blank=True)
    text = models.TextField(blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.STREAMING)
    error = models.TextField(blank=True)
    error_said = models.JSONField(null=True, blank=True, default=None)  # ``said.KeepsError``
    sources = models.JSONField(default=list)
    timings = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    # While streaming: when its process last wrote the text so far (``rag.keeper``); a stamp older than
    # ``keeper.ORPHAN_S`` means the process is gone and the answer is saved stopped.
    beat_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return self.question[:60]
