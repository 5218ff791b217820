"""The course's roster from the LMS (Names and Role Provisioning): every active member gets an account
and a place in the course's class, in the role the LMS gives them. Nobody is removed: a member the LMS
no longer lists keeps their work and their place until an instructor decides."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests
from django.utils import timezone
from lti_tool.models import LtiMembership
from pylti1p3.exception import LtiException
from pylti1p3.names_roles import NamesRolesProvisioningService

from lti.connector import connector
from lti.models import CourseClass
from lti.services import account_for, member_set

log = logging.getLogger(__name__)


class RosterUnavailable(RuntimeError):
    """The LMS gave no roster: it offers no NRPS for the course, or did not answer."""


@dataclass(frozen=True)
class Synced:
    members: int  # active members the LMS listed
    added: int  # of them, new in the class


def roster_sync(*, course: CourseClass) -> Synced:
    context = course.context
    if not context.memberships_url:
        raise RosterUnavailable("the LMS offers no Names and Role Provisioning for this course")
    service = NamesRolesProvisioningService(
        connector(context.deployment.registration), {"context_memberships_url": context.memberships_url}
    )
    try:
        members = service.get_members()
    except (LtiException, requests.RequestException) as exc:
        log.warning("roster of course %s not fetched: %s", course.pk, exc)
        raise RosterUnavailable(str(exc)) from exc
    for member in members:
        member.setdefault("status", "Active")  # NRPS: optional, Active when absent (django-lti reads it)
    context.update_memberships(members)  # django-lti's LtiUser and LtiMembership rows
    added = 0
    active = LtiMembership.objects.filter(context=context, is_active=True).select_related("user")
    before = set(course.classroom.memberships.values_list("user_id", flat=True))
    for membership in active:
        user = account_for(membership.user)
        member_set(
            classroom=course.classroom,
            user=user,
            instructor=membership.is_instructor or membership.is_administrator,
        )
        added += user.pk not in before
    course.roster_synced_at = timezone.now()
    course.save(update_fields=["roster_synced_at"])
    return Synced(members=len(active), added=added)
