"""A hand-in's score to the LMS (Assignment and Grade Services): one score per grade column the
learner's course placed the lab in. A score that could not be sent is kept with the reason and sent
again at the next hand-in or when an instructor asks (nothing is lost)."""

from __future__ import annotations

import logging
from typing import Final

import requests
from django.db.models import QuerySet
from django.utils import timezone
from lti_tool.models import LtiUser
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.exception import LtiException
from pylti1p3.grade import Grade

from labapp.models import Classroom, LabSubmission, Membership
from lti.connector import connector
from lti.models import GradeSend, LabLink

log = logging.getLogger(__name__)

SCORE_SCOPE: Final = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCORE_MAXIMUM = 100.0


def score_of(submission: LabSubmission) -> float:
    """The hand-in's outcome out of ``SCORE_MAXIMUM``: the share of the lab's checks (those that apply) it passed."""
    applying = [check for check in submission.checks if check.get("applies", True)]
    if not applying:
        return SCORE_MAXIMUM if submission.passed else 0.0
    passed = sum(bool(check.get("passed")) for check in applying)
    return round(SCORE_MAXIMUM * passed / len(applying), 2)


def links_for(submission: LabSubmission) -> QuerySet[LabLink]:
    """The placed links of this lab with a grade column, in the courses where the learner learns (a link
    the LMS gave no column, an ungraded activity, waits for no score)."""
    return (
        LabLink.objects.exclude(lineitem_url="")
        .filter(
            lab=submission.lab,
            resource_link__context__course_class__classroom__memberships__user_id=submission.user_id,
            resource_link__context__course_class__classroom__memberships__role=Membership.Role.LEARNER,
        )
        .distinct()
    )


def _post(link: LabLink, submission: LabSubmission, score: float) -> str:
    """Send the score; the failure's key, or "" when the LMS took it."""
    context = link.resource_link.context
    registration = context.deployment.registration
    lti_user = LtiUser.objects.filter(registration=registration, auth_user_id=submission.user_id).first()
    if lti_user is None:
        return GradeSend.Failure.NO_LMS_USER
    if not context.can_publish_scores:
        return GradeSend.Failure.NO_SCOPE
    grade = (
        Grade()
        .set_score_given(score)
        .set_score_maximum(SCORE_MAXIMUM)
        .set_timestamp(submission.submitted_at.isoformat())
        .set_activity_progress("Submitted")
        .set_grading_progress("FullyGraded")
        .set_user_id(lti_user.sub)
    )
    service = AssignmentsGradesService(connector(registration), {"scope": [SCORE_SCOPE], "lineitem": link.lineitem_url})
    try:
        service.put_grade(grade)
    except requests.RequestException as exc:
        log.warning("score of hand-in %s not sent to %s: %s", submission.pk, link.lineitem_url, exc)
        return GradeSend.Failure.UNREACHABLE
    except LtiException as exc:
        log.warning("score of hand-in %s refused by %s: %s", submission.pk, link.lineitem_url, exc)
        return GradeSend.Failure.REFUSED
    return ""


def send(*, link: LabLink, submission: LabSubmission) -> GradeSend:
    score = score_of(submission)
    failure = _post(link, submission, score)
    sent, _created = GradeSend.objects.update_or_create(
        submission=submission,
        link=link,
        defaults={"score": score, "failure": failure, "sent_at": None if failure else timezone.now()},
    )
    return sent


def send_for(*, submission: LabSubmission) -> list[GradeSend]:
    """Send a hand-in's score to every grade column that waits for it (none outside an LMS course)."""
    return [send(link=link, submission=submission) for link in links_for(submission)]


def unsent(classroom: Classroom) -> QuerySet[GradeSend]:
    return GradeSend.objects.filter(
        sent_at__isnull=True, link__resource_link__context__course_class__classroom=classroom
    ).select_related("submission", "link")


def resend_unsent(*, classroom: Classroom) -> list[GradeSend]:
    """Send again every score of this class the LMS has not taken yet."""
    return [send(link=sent.link, submission=sent.submission) for sent in unsent(classroom)]
