from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


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

    name = models.CharField(_("이름"), max_length=200)
    join_code = models.CharField(_("참여 코드"), max_length=32, unique=True)
    created_at = models.DateTimeField(_("만든 때"), auto_now_add=True)
    join_open = models.BooleanField(_("참여 코드로 가입 받기"), default=True)  # the instructor can stop sign-ups
    join_code_expires_at = models.DateTimeField(_("참여 코드 만료"), null=True, blank=True)  # empty: never expires

    class Meta:
        ordering = ["name"]
        verbose_name = _("수업")
        verbose_name_plural = pgettext_lazy("여럿", "수업")

    def __str__(self) -> str:
        return self.name

    @property
    def collection_name(self) -> str:
        return f"class-{self.pk}"


class Membership(models.Model):
    class Role(models.TextChoices):
        LEARNER = "learner", _("학습자")
        INSTRUCTOR = "instructor", _("강사")

    classroom = models.ForeignKey(
        Classroom, verbose_name=_("수업"), on_delete=models.CASCADE, related_name="memberships"
    )
    user = models.ForeignKey(
        "auth.User", verbose_name=_("사용자"), on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(_("역할"), max_length=12, choices=Role.choices, default=Role.LEARNER)

    class Meta:
        verbose_name = _("수업 구성원")
        verbose_name_plural = pgettext_lazy("여럿", "수업 구성원")
        constraints = [models.UniqueConstraint(fields=["classroom", "user"], name="one_membership_per_class")]

    def __str__(self) -> str:
        return _("%(user)s, %(classroom)s의 %(role)s") % {
            "user": self.user,
            "classroom": self.classroom,
            "role": self.get_role_display(),
        }


class LabSubmission(models.Model):
    """A learner's hand-in of one lab: the job whose checks it stands on, the numbers and the reflection."""

    user = models.ForeignKey(
        "auth.User", verbose_name=_("학습자"), on_delete=models.CASCADE, related_name="lab_submissions"
    )
    lab = models.PositiveSmallIntegerField(_("실습"))
    job = models.ForeignKey(
        "bench.BenchJob", verbose_name=_("실행"), null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reflection = models.TextField(_("소감"))
    checks = models.JSONField(_("확인"), default=list)
    key_numbers = models.JSONField(_("핵심 수치"), default=dict)
    passed = models.BooleanField(_("통과"), default=False)
    engine_url = models.CharField(_("엔진 주소"), max_length=300, blank=True)
    submitted_at = models.DateTimeField(_("제출한 때"))
    late = models.BooleanField(_("늦은 제출"), default=False)

    class Meta:
        ordering = ["lab"]
        verbose_name = _("실습 제출")
        verbose_name_plural = pgettext_lazy("여럿", "실습 제출")
        constraints = [models.UniqueConstraint(fields=["user", "lab"], name="one_submission_per_lab")]

    def __str__(self) -> str:
        return _("실습 %(lab)s, %(user)s") % {"lab": self.lab, "user": self.user}


class Assignment(models.Model):
    """A lab assigned to a class with its dates and what happens after the due date."""

    class LateRule(models.TextChoices):
        ACCEPT = "accept", _("받고 늦음으로 표시")  # accepted, marked late
        REFUSE = "refuse", _("받지 않음")  # no submission after the due date

    classroom = models.ForeignKey(
        Classroom, verbose_name=_("수업"), on_delete=models.CASCADE, related_name="assignments"
    )
    lab = models.PositiveSmallIntegerField(_("실습"))
    opens_at = models.DateTimeField(_("열리는 시각"))
    due_at = models.DateTimeField(_("마감 시각"))
    late_rule = models.CharField(_("마감 뒤 제출"), max_length=8, choices=LateRule.choices, default=LateRule.ACCEPT)
    created_at = models.DateTimeField(_("만든 때"), auto_now_add=True)

    class Meta:
        ordering = ["lab"]
        verbose_name = _("과제")
        verbose_name_plural = pgettext_lazy("여럿", "과제")
        constraints = [
            models.UniqueConstraint(fields=["classroom", "lab"], name="one_assignment_per_lab"),
            models.CheckConstraint(condition=models.Q(due_at__gt=models.F("opens_at")), name="due_after_open"),
        ]

    def __str__(self) -> str:
        return _("실습 %(lab)s, %(classroom)s") % {"lab": self.lab, "classroom": self.classroom}


class TemporaryPassword(models.Model):
    """A password someone else chose (an instructor's reset, a roster import): changed at the next sign-in."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="temporary_password")
    set_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    set_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"temporary password of {self.user_id}"
