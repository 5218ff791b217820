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


class Classroom(models.Model):
    """A class: its members share a document collection (the classroom issue adds the rest)."""

    name = models.CharField(max_length=200)
    join_code = models.CharField(max_length=32, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def collection_name(self) -> str:
        return f"class-{self.pk}"


class Membership(models.Model):
    class Role(models.TextChoices):
        LEARNER = "learner", "learner"
        INSTRUCTOR = "instructor", "instructor"

    classroom = models.ForeignKey(Classroom, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=12, choices=Role.choices, default=Role.LEARNER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["classroom", "user"], name="one_membership_per_class")]

    def __str__(self) -> str:
        return f"{self.user} in {self.classroom} ({self.role})"
