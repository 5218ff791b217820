from __future__ import annotations

from django.db import models


class ChapterSection(models.Model):
    """One page of the chapter in one language, loaded from labapp/chapter/content/chapter/."""

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
    join_open = models.BooleanField(default=True)  # the instructor can stop sign-ups with the code
    join_code_expires_at = models.DateTimeField(null=True, blank=True)  # empty: the code never expires

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


class LabSubmission(models.Model):
    """A learner's hand-in of one lab: the job whose checks it stands on, the numbers and the reflection."""

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="lab_submissions")
    lab = models.PositiveSmallIntegerField()
    job = models.ForeignKey("bench.BenchJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reflection = models.TextField()
    checks = models.JSONField(default=list)
    key_numbers = models.JSONField(default=dict)
    passed = models.BooleanField(default=False)
    engine_url = models.CharField(max_length=300, blank=True)
    submitted_at = models.DateTimeField()
    late = models.BooleanField(default=False)

    class Meta:
        ordering = ["lab"]
        constraints = [models.UniqueConstraint(fields=["user", "lab"], name="one_submission_per_lab")]

    def __str__(self) -> str:
        return f"lab {self.lab} by {self.user_id}"


class Assignment(models.Model):
    """A lab assigned to a class with its dates and what happens after the due date."""

    class LateRule(models.TextChoices):
        ACCEPT = "accept", "accept"  # accepted, marked late
        REFUSE = "refuse", "refuse"  # no submission after the due date

    classroom = models.ForeignKey(Classroom, on_delete=models.CASCADE, related_name="assignments")
    lab = models.PositiveSmallIntegerField()
    opens_at = models.DateTimeField()
    due_at = models.DateTimeField()
    late_rule = models.CharField(max_length=8, choices=LateRule.choices, default=LateRule.ACCEPT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["lab"]
        constraints = [
            models.UniqueConstraint(fields=["classroom", "lab"], name="one_assignment_per_lab"),
            models.CheckConstraint(condition=models.Q(due_at__gt=models.F("opens_at")), name="due_after_open"),
        ]

    def __str__(self) -> str:
        return f"lab {self.lab} in {self.classroom_id}"


class TemporaryPassword(models.Model):
    """A password someone else chose (an instructor's reset, a roster import): changed at the next sign-in."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="temporary_password")
    set_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    set_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"temporary password of {self.user_id}"
