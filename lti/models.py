"""What the lab keeps of an LMS beside django-lti's own rows (registrations, deployments, contexts,
users, resource links, keys): which class a course became, which lab a placed link opens and where its
grade goes, and each hand-in's score as sent (or why not yet)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class CourseClass(models.Model):
    """The lab's class made from an LMS course (an LTI context): no join code, its roster comes from the LMS."""

    context = models.OneToOneField(
        "lti_tool.LtiContext", verbose_name=_("LMS 과정"), on_delete=models.CASCADE, related_name="course_class"
    )
    classroom = models.OneToOneField(
        "labapp.Classroom", verbose_name=_("수업"), on_delete=models.CASCADE, related_name="lti_course"
    )
    roster_synced_at = models.DateTimeField(_("명단을 맞춘 때"), null=True, blank=True)

    class Meta:
        verbose_name = _("LMS 과정의 수업")
        verbose_name_plural = pgettext_lazy("여럿", "LMS 과정의 수업")

    def __str__(self) -> str:
        return str(self.classroom)


class LabLink(models.Model):
    """A lab placed in a course by deep linking: the link the LMS launches, its lab, its grade column."""

    resource_link = models.OneToOneField(
        "lti_tool.LtiResourceLink", verbose_name=_("LMS 링크"), on_delete=models.CASCADE, related_name="lab_link"
    )
    lab = models.PositiveSmallIntegerField(_("실습"))
    lineitem_url = models.URLField(_("성적 열 주소"), max_length=500, blank=True)

    class Meta:
        verbose_name = _("LMS의 실습 링크")
        verbose_name_plural = pgettext_lazy("여럿", "LMS의 실습 링크")

    def __str__(self) -> str:
        return _("실습 %(lab)s, %(link)s") % {"lab": self.lab, "link": self.resource_link}


class GradeSend(models.Model):
    """One hand-in's score for one grade column of the LMS: sent, or the reason (a key) it is not yet."""

    class Failure(models.TextChoices):
        NONE = "", _("없음")
        UNREACHABLE = "unreachable", _("LMS에 연결하지 못했습니다")
        REFUSED = "refused", _("LMS가 점수를 받지 않았습니다")
        NO_SCOPE = "no_scope", _("LMS가 이 도구에 점수 쓰기를 허용하지 않았습니다")
        NO_LMS_USER = "no_lms_user", _("이 학습자는 LMS에서 이 링크를 연 적이 없습니다")

    submission = models.ForeignKey(
        "labapp.LabSubmission", verbose_name=_("실습 제출"), on_delete=models.CASCADE, related_name="grade_sends"
    )
    link = models.ForeignKey(LabLink, verbose_name=_("LMS의 실습 링크"), on_delete=models.CASCADE, related_name="sends")
    score = models.FloatField(_("점수"))
    sent_at = models.DateTimeField(_("보낸 때"), null=True, blank=True)
    failure = models.CharField(_("못 보낸 까닭"), max_length=16, choices=Failure.choices, blank=True)
    tried_at = models.DateTimeField(_("시도한 때"), auto_now=True)

    class Meta:
        verbose_name = _("LMS로 보낸 점수")
        verbose_name_plural = pgettext_lazy("여럿", "LMS로 보낸 점수")
        constraints = [models.UniqueConstraint(fields=["submission", "link"], name="one_send_per_link")]

    def __str__(self) -> str:
        return f"{self.submission} -> {self.link}"
