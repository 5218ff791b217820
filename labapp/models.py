from __future__ import annotations

from django.db import models


class ChapterSection(models.Model):
    """One page of the chapter in one language, loaded from labapp/content/chapter/."""

    slug = models.SlugField(max_length=80)
    language = models.CharField(max_length=8)
    position = models.PositiveSmallIntegerField()
    title = models.CharField(max_length=200)
    summary = models.CharField(max_length=500, blank=True)
    body = models.TextField()
    content_hash = models.CharField(max_length=64)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["slug", "language"], name="unique_section_per_language"),
        ]

    def __str__(self) -> str:
        return f"{self.position:02d} {self.title} ({self.language})"
