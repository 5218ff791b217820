"""The LMS's doors: OIDC login initiation, the launch (resource link and deep linking), the deep-link
choice, and the instructor's roster sync and score resend for a course's class.

A launch is checked by django-lti and PyLTI1p3 before anything is changed: a refused one (expired,
for another tool, badly signed, replayed) makes no row and leaves whoever is signed in signed in.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import translation
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from lti_tool.constants import SESSION_KEY
from lti_tool.models import LtiLaunch
from lti_tool.utils import DjangoToolConfig, sync_data_from_launch
from lti_tool.views import LtiLaunchBaseView, OIDCLoginInitView
from pylti1p3.contrib.django.oidc_login import DjangoOIDCLogin
from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.exception import LtiException, OIDCException
from pylti1p3.lineitem import LineItem

from labapp.classes import access
from labapp.labs.catalog import LABS
from lti import grades, launches, refusals, roster, services
from lti.models import CourseClass

log = logging.getLogger(__name__)
BACKEND = "django.contrib.auth.backends.ModelBackend"
DEEP_LINKING_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
PRESENTATION = "https://purl.imsglobal.org/spec/lti/claim/launch_presentation"


def refused(request: HttpRequest, reason: str) -> HttpResponse:
    return render(request, "lti/refused.html", {"reason": reason}, status=400)


@method_decorator(csrf_exempt, name="dispatch")
class LoginInitView(OIDCLoginInitView):
    """OIDC third-party login initiation: a plain redirect to the LMS's authorization endpoint (PyLTI1p3's
    cookie check is an inline script, which this site's Content-Security-Policy does not run)."""

    def get_oidc_response(self, request: HttpRequest, registration_uuid: Any, params: Any) -> HttpResponse:
        target = params.get("target_link_uri")
        if not target or any("\x00" in str(value) for value in params.values()):  # no database takes a NUL
            return refused(request, refusals.reason("missing target_link_uri"))
        login_ = DjangoOIDCLogin(  # type: ignore[no-untyped-call]
            request,
            DjangoToolConfig(registration_uuid),
            launch_data_storage=launches.storage(),
        )
        try:
            return login_.disable_check_cookies().redirect(self.get_redirect_url(target))  # type: ignore[no-any-return]
        except (LtiException, OIDCException) as exc:
            log.warning("LTI login initiation refused: %s", exc)
            return refused(request, refusals.reason(str(exc)))


def lms_language(request: HttpRequest, launch: LtiLaunch) -> str | None:
    """The language the LMS shows this person (the launch's ``launch_presentation.locale``: "en-US" →
    "en"), or None: no locale, one the site does not speak, or a language already chosen on this site
    (their choice here wins)."""
    locale = (launch.get_claim(PRESENTATION) or {}).get("locale")
    if not locale or settings.LANGUAGE_COOKIE_NAME in request.COOKIES:
        return None
    try:
        return translation.get_supported_language_variant(str(locale).lower())
    except LookupError:
        return None


def language_kept(response: HttpResponse, language: str | None) -> HttpResponse:
    """``response`` with the LMS's language kept for the pages after it, as the site's switch keeps it."""
    if language is not None:
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            language,
            max_age=settings.LANGUAGE_COOKIE_AGE,
            samesite=settings.LANGUAGE_COOKIE_SAMESITE,
            secure=settings.LANGUAGE_COOKIE_SECURE,
            httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
        )
    return response


@method_decorator(csrf_exempt, name="dispatch")
class LaunchView(LtiLaunchBaseView):
    """The LMS's launch: checked first, then the LMS user signed in to their account in the course's class."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            launch = launches.checked(request)
        except LtiException as exc:
            log.warning("LTI launch refused: %s", exc)
            return refused(request, refusals.reason(str(exc)))
        if not launch.deployment.is_active:
            return refused(request, refusals.inactive())
        if not launches.first_use(str(launch.get_claim("nonce"))):
            return refused(request, refusals.reason("nonce used"))
        sync_data_from_launch(launch)  # django-lti's rows: user, context, membership, resource link
        user = services.account_for(launch.user)
        login(request, user, backend=BACKEND)
        request.session[SESSION_KEY] = launch.get_launch_id()
        language = lms_language(request, launch)
        if language is not None:
            translation.activate(language)  # this response's page too (the deep-link choice)
        if launch.is_deep_link_launch:
            return language_kept(self.deep_linking(request, launch, user), language)
        if launch.is_resource_launch:
            return language_kept(self.resource(request, launch, user), language)
        return refused(request, _("이 실습실은 이 종류의 LMS 요청을 다루지 않습니다."))

    def resource(self, request: HttpRequest, launch: LtiLaunch, user: User) -> HttpResponse:
        classroom = services.class_for(launch.context)
        instructor = services.is_instructor(launch.roles_claim)
        services.member_set(classroom=classroom, user=user, instructor=instructor)
        lab = services.lab_of(launch)
        if lab is not None:
            services.link_from_launch(launch, lab)
        course = CourseClass.objects.get(classroom=classroom)
        if instructor or course.roster_synced_at is None:
            _roster_quietly(course)
        if instructor:
            return redirect("class_detail", classroom_id=classroom.pk)
        return redirect("lab_page", number=lab) if lab is not None else redirect("lab_list")

    def deep_linking(self, request: HttpRequest, launch: LtiLaunch, user: User) -> HttpResponse:
        if not services.is_instructor(launch.roles_claim):
            return refused(request, _("실습을 과정에 넣는 일은 강사만 할 수 있습니다."))
        classroom = services.class_for(launch.context)
        services.member_set(classroom=classroom, user=user, instructor=True)
        return render(request, "lti/choose.html", {"labs": LABS.values(), "classroom": classroom})


def _roster_quietly(course: CourseClass) -> None:
    """The roster at a launch: a missing or silent NRPS does not stop the person launching."""
    try:
        roster.roster_sync(course=course)
    except roster.RosterUnavailable:
        pass  # logged by roster_sync; the instructor's sync button says it in words


@login_required
@require_POST
def deep_link_choose(request: HttpRequest) -> HttpResponse:
    """The instructor's chosen lab back to the LMS: a deep-linking response signed with the tool's key."""
    launch_id = request.session.get(SESSION_KEY)
    if not launch_id:
        return refused(request, refusals.reason("state"))
    try:
        launch = launches.kept(request, launch_id)
    except LtiException as exc:
        log.warning("deep-linking choice without its launch: %s", exc)
        return refused(request, refusals.reason("state"))
    try:
        lab = LABS[int(request.POST.get("lab", ""))]
    except (KeyError, ValueError):
        return refused(request, _("고를 수 있는 실습이 아닙니다."))
    if not launch.is_deep_link_launch or launch.user.auth_user_id != request.user.pk:
        return refused(request, refusals.reason("state"))
    classroom = services.class_for(launch.context)
    services.assignment_place(classroom=classroom, lab=lab.number)
    item = (
        LineItem()
        .set_label(str(lab.title))
        .set_score_maximum(grades.SCORE_MAXIMUM)
        .set_resource_id(f"lab-{lab.number}")
        .set_tag("vllm-lab")
    )
    resource = (
        DeepLinkResource()
        .set_url(request.build_absolute_uri(reverse("lti:launch")))
        .set_title(str(lab.title))
        .set_custom_params({services.LAB_CLAIM: str(lab.number)})
        .set_lineitem(item)
    )
    linking = launch.get_claim(DEEP_LINKING_SETTINGS) or {}
    context = {
        "return_url": linking.get("deep_link_return_url", ""),
        "jwt": launch.get_message_launch().get_deep_link().get_response_jwt([resource]),
        "lab": lab,
    }
    return render(request, "lti/deep_link_return.html", context)


@login_required
@require_POST
def roster_sync(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    course = CourseClass.objects.filter(classroom=classroom).first()
    if course is None:
        messages.error(request, _("이 수업은 LMS 과정에서 만든 수업이 아닙니다."))
        return redirect("class_detail", classroom_id=classroom.pk)
    try:
        done = roster.roster_sync(course=course)
    except roster.RosterUnavailable:
        messages.error(
            request,
            _("LMS에서 명단을 받지 못했습니다. LMS가 이 도구에 명단 서비스를 허용했는지 확인하고 다시 해 보세요."),
        )
        return redirect("class_detail", classroom_id=classroom.pk)
    messages.success(
        request,
        _("LMS 명단을 맞췄습니다: 구성원 %(n)d명, 새로 들어온 사람 %(added)d명.")
        % {"n": done.members, "added": done.added},
    )
    return redirect("class_detail", classroom_id=classroom.pk)


@login_required
@require_POST
def grades_resend(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    sends = grades.resend_unsent(classroom=classroom)
    left = sum(1 for sent in sends if sent.sent_at is None)
    if left:
        messages.error(request, _("점수 %(n)d개를 아직 LMS에 보내지 못했습니다.") % {"n": left})
    else:
        messages.success(request, _("점수 %(n)d개를 LMS에 보냈습니다.") % {"n": len(sends)})
    return redirect("class_detail", classroom_id=classroom.pk)
