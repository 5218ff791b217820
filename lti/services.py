"""Writes of a launch: the LMS user's account, the course's class, the member's role, the placed lab.

django-lti has already checked the id_token (signature against the platform's JWKS, issuer, audience,
expiry, nonce, deployment) and kept its own rows of the launch (``sync_data_from_launch``); this module
turns them into the lab's own: an account signed in without a password, a class without a join code.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone
from lti_tool.models import LtiContext, LtiLaunch, LtiUser

from labapp.classes.services import join_code_new
from labapp.labs.catalog import LABS
from labapp.models import Assignment, Classroom, Membership
from lti.models import CourseClass, LabLink

LAB_CLAIM = "lab"  # the custom parameter a deep-linked lab carries (set in views.deep_link_choose)
INSTRUCTOR_ROLES = ("#Instructor", "#Administrator", "/Instructor", "/Administrator", "#ContentDeveloper")
ASSIGNMENT_DAYS = 365  # an assignment placed from the LMS: the LMS keeps its own due date


def is_instructor(roles: list[str] | None) -> bool:
    """An LMS role that teaches the course (instructor, administrator, content developer)."""
    return any(role.endswith(INSTRUCTOR_ROLES) for role in roles or [])


def _username(lti_user: LtiUser) -> str:
    digest = hashlib.sha256(f"{lti_user.registration_id}:{lti_user.sub}".encode()).hexdigest()[:16]
    return f"lti-{digest}"


def account_for(lti_user: LtiUser) -> User:
    """The lab account of an LMS user (made at their first launch or roster sync): no password, the LMS signs in."""
    if lti_user.auth_user_id is not None:
        return User.objects.get(pk=lti_user.auth_user_id)
    name = _username(lti_user)
    user = User.objects.filter(username=name).first()
    if user is None:
        try:
            with transaction.atomic():
                user = User.objects.create_user(  # no password (unusable): the LMS signs them in
                    name,
                    email=lti_user.email,
                    first_name=lti_user.given_name[:150],
                    last_name=lti_user.family_name[:150],
                )
        except IntegrityError:  # the same user's first launch twice at once
            user = User.objects.get(username=name)
    lti_user.auth_user = user
    lti_user.save(update_fields=["auth_user", "datetime_modified"])
    return user


def class_for(context: LtiContext) -> Classroom:
    """The class made from an LMS course (at its first launch): closed to join codes."""
    found = CourseClass.objects.filter(context=context).select_related("classroom").first()
    if found is not None:
        return found.classroom
    name = (context.title or context.label or context.id_on_platform or "LMS")[:200]
    for _attempt in range(5):
        try:
            with transaction.atomic():
                classroom = Classroom.objects.create(name=name, join_code=join_code_new(), join_open=False)
                CourseClass.objects.create(context=context, classroom=classroom)
                return classroom
        except IntegrityError:  # the same code drawn at once elsewhere, or the same course's first launch twice
            found = CourseClass.objects.filter(context=context).select_related("classroom").first()
            if found is not None:
                return found.classroom
    raise RuntimeError("could not make the course's class")


def member_set(*, classroom: Classroom, user: User, instructor: bool) -> Membership:
    """The user's role in the class as the LMS says it (an instructor stays one)."""
    role = Membership.Role.INSTRUCTOR if instructor else Membership.Role.LEARNER
    membership, created = Membership.objects.get_or_create(classroom=classroom, user=user, defaults={"role": role})
    if not created and instructor and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    return membership


def lab_of(launch: LtiLaunch) -> int | None:
    """The lab a launch opens: the custom parameter deep linking put on its link, if it names a lab."""
    value = launch.get_custom_claim(LAB_CLAIM)
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if number in LABS else None


def link_from_launch(launch: LtiLaunch, lab: int) -> LabLink:
    """The launched link's lab and grade column (AGS's ``lineitem`` for this link), kept for the hand-in."""
    ags = launch.ags_claim or {}
    link, _created = LabLink.objects.update_or_create(
        resource_link=launch.resource_link,
        defaults={"lab": lab, "lineitem_url": str(ags.get("lineitem") or "")[:500]},
    )
    return link


def assignment_place(*, classroom: Classroom, lab: int) -> Assignment:
    """The lab assigned in the course's class when an instructor places it by deep linking (open from now)."""
    now = timezone.now()
    assignment, _created = Assignment.objects.get_or_create(
        classroom=classroom,
        lab=lab,
        defaults={"opens_at": now, "due_at": now + timedelta(days=ASSIGNMENT_DAYS)},
    )
    return assignment
