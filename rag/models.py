from __future__ import annotations

from django.db import models


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
