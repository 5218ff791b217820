"""LTI 1.3 Advantage against the emulated LMS (tests/lti/platform.py), through the Django test client:
login initiation, launch, deep linking, a hand-in's score over AGS, the roster over NRPS, and refused
launches. Every token is signed and checked for real (the platform's JWKS and the tool's served on
loopback); only the browser is the test client."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from lti_tool.models import LtiUser

from bench.models import BenchJob
from labapp.labs.catalog import LABS
from labapp.models import Assignment, Classroom, LabSubmission, Membership
from lti.models import CourseClass, GradeSend, LabLink
from tests.lti.conftest import register
from tests.lti.platform import INSTRUCTOR, LEARNER, Link, Person, Platform, launch_url, new_key
from tests.site.test_labs import GOOD

pytestmark = pytest.mark.django_db
LAUNCH = "http://testserver/lti/launch/"
ANNA = Person("u-anna", "Anna", "Kim", [LEARNER])
TEACHER = Person("u-teach", "Tae", "Park", [INSTRUCTOR])


def _launch(client: Client, platform: Platform, registration: Any, hint: str, **overrides: Any) -> Any:
    """The browser's part of a launch: the login initiation, the LMS's authorization, the form post."""
    init = client.get(f"/lti/init/{registration.uuid}/", platform.login_params(hint))
    assert init.status_code == 302, init.content.decode()
    auth, params = launch_url(init["Location"])
    assert auth == platform.auth_url and params["redirect_uri"] == LAUNCH
    return client.post(LAUNCH, platform.authorize(params, **overrides))


def _placed(platform: Platform, lab: int) -> Link:
    """A lab already placed in the course (as deep linking leaves it), with its grade column."""
    lineitem = f"{platform.base}/lineitems/{len(platform.lineitems) + 1}"
    platform.lineitems[lineitem] = {"id": lineitem, "label": str(LABS[lab].title), "scoreMaximum": 100}
    link = Link(id=f"link-{lab}", title=str(LABS[lab].title), custom={"lab": str(lab)}, lineitem=lineitem)
    platform.links[link.id] = link
    return link


@pytest.fixture
def registration(platform: Platform, client: Client) -> Any:
    found = register(platform)
    platform.tool_jwks = client.get("/lti/jwks/").json()
    return found


def test_a_learner_launched_from_the_lms_is_signed_in_in_the_courses_class(
    platform: Platform, registration: Any, client: Client
) -> None:
    link = _placed(platform, 1)
    response = _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH))
    assert response.status_code == 302 and response["Location"] == "/labs/1/"
    user = LtiUser.objects.get(sub=ANNA.sub).auth_user
    assert user is not None and user.first_name == "Anna" and user.email == ANNA.email
    assert not user.has_usable_password()  # the LMS signs them in; no password to guess
    assert int(client.session["_auth_user_id"]) == user.pk
    course = CourseClass.objects.get(context__id_on_platform=platform.context_id)
    assert course.classroom.name == platform.context_title and not course.classroom.join_open
    assert Membership.objects.get(user=user, classroom=course.classroom).role == Membership.Role.LEARNER
    assert LabLink.objects.get(resource_link__id_on_platform=link.id).lineitem_url == link.lineitem
    assert client.get("/labs/1/").status_code == 200
    # A second launch: the same account, class and membership.
    _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH))
    assert User.objects.filter(lti_users__sub=ANNA.sub).count() == 1
    assert Classroom.objects.count() == 1 and Membership.objects.filter(user=user).count() == 1


def test_deep_linking_returns_a_signed_response_placing_the_chosen_lab_with_its_grade_column(
    platform: Platform, registration: Any, client: Client
) -> None:
    hint = platform.prepare(TEACHER, message="LtiDeepLinkingRequest", target=LAUNCH)
    chooser = _launch(client, platform, registration, hint)
    assert chooser.status_code == 200
    page = chooser.content.decode()
    assert all(f'value="{n}"' in page for n in LABS) and "과정에 넣기" in page
    answer = client.post("/lti/deep-link/", {"lab": 4})
    assert answer.status_code == 200
    html = answer.content.decode()
    action = re.search(r'action="([^"]+)" id="deep-link-return"', html)
    token = re.search(r'name="JWT" value="([^"]+)"', html)
    assert action and action[1] == f"{platform.base}/deep_link_return" and token
    returned = requests.post(action[1], data={"JWT": token[1]}, timeout=10)  # the browser's auto-post
    assert returned.status_code == 200, returned.text
    (item,) = platform.returned[0]["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert item["type"] == "ltiResourceLink" and item["url"] == LAUNCH and item["custom"] == {"lab": "4"}
    assert item["lineItem"]["scoreMaximum"] == 100 and item["lineItem"]["label"] == str(LABS[4].title)
    (link,) = platform.links.values()
    assert link.custom == {"lab": "4"} and link.lineitem in platform.lineitems
    classroom = CourseClass.objects.get().classroom
    assert Assignment.objects.filter(classroom=classroom, lab=4).exists()
    assert Membership.objects.get(classroom=classroom).role == Membership.Role.INSTRUCTOR
    # A learner's deep-linking launch is refused: placing labs is the instructor's.
    other = Client()
    refused = _launch(
        other, platform, registration, platform.prepare(ANNA, message="LtiDeepLinkingRequest", target=LAUNCH)
    )
    assert refused.status_code == 400 and "강사만" in refused.content.decode()


PRESENTATION = "https://purl.imsglobal.org/spec/lti/claim/launch_presentation"


def test_a_launch_opens_the_site_in_the_language_the_lms_shows_unless_one_was_chosen_here(
    platform: Platform, registration: Any, client: Client
) -> None:
    link = _placed(platform, 1)
    english = {PRESENTATION: {"locale": "en-US", "document_target": "window"}}
    anna = Person(ANNA.sub, ANNA.given_name, ANNA.family_name, ANNA.roles, locale="en-US")  # as the LMS sends it
    response = _launch(client, platform, registration, platform.prepare(anna, link=link, target=LAUNCH))
    assert response.status_code == 302 and response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "en"
    assert "Run this lab" in client.get("/labs/1/").content.decode()
    # The deep-link choice is the launch's own response: drawn in the LMS's language already.
    chooser = _launch(
        Client(),
        platform,
        registration,
        platform.prepare(TEACHER, message="LtiDeepLinkingRequest", target=LAUNCH),
        **english,
    )
    assert "Add to the course" in chooser.content.decode()
    # A language chosen on this site wins; one the site does not speak leaves Korean.
    chose = Client()
    chose.cookies[settings.LANGUAGE_COOKIE_NAME] = "ko"
    kept = _launch(chose, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH), **english)
    assert (
        settings.LANGUAGE_COOKIE_NAME not in kept.cookies and "이 실습 실행" in chose.get("/labs/1/").content.decode()
    )
    french = Client()
    _launch(
        french,
        platform,
        registration,
        platform.prepare(ANNA, link=link, target=LAUNCH),
        **{PRESENTATION: {"locale": "fr-FR"}},
    )
    assert settings.LANGUAGE_COOKIE_NAME not in french.cookies


def test_a_hand_in_posts_the_learners_score_to_the_lms_grade_column(
    platform: Platform, registration: Any, client: Client
) -> None:
    link = _placed(platform, 1)
    _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH))
    user = LtiUser.objects.get(sub=ANNA.sub).auth_user
    BenchJob.objects.create(
        owner=user, kind=LABS[1].job_kind, engine_url="http://e", status="done", lab=1, results=GOOD[1]
    )
    response = client.post("/labs/1/submit/", {"reflection": "프리필이 디코드보다 훨씬 빠릅니다."}, follow=True)
    assert "점수를 LMS 성적부에 보냈습니다" in response.content.decode()
    ((lineitem, score),) = platform.scores
    assert lineitem == link.lineitem and score["userId"] == ANNA.sub
    assert score["scoreGiven"] == 100.0 and score["scoreMaximum"] == 100.0
    assert score["activityProgress"] == "Submitted" and score["gradingProgress"] == "FullyGraded"
    sent = GradeSend.objects.get()
    assert sent.sent_at is not None and sent.failure == "" and sent.submission == LabSubmission.objects.get(user=user)


def test_a_score_the_lms_did_not_take_is_kept_and_sent_again(
    platform: Platform, registration: Any, client: Client
) -> None:
    link = _placed(platform, 1)
    _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH))
    user = LtiUser.objects.get(sub=ANNA.sub).auth_user
    BenchJob.objects.create(
        owner=user, kind=LABS[1].job_kind, engine_url="http://e", status="done", lab=1, results=GOOD[1]
    )
    keys, platform.tool_jwks = platform.tool_jwks, {"keys": []}  # the LMS no longer knows the tool's key
    response = client.post("/labs/1/submit/", {"reflection": "답"}, follow=True)
    assert "점수를 LMS에 보내지 못했습니다" in response.content.decode()
    assert LabSubmission.objects.filter(user=user, lab=1).exists() and not platform.scores
    assert GradeSend.objects.get().failure == GradeSend.Failure.REFUSED
    platform.tool_jwks = keys
    teacher = Client()
    _launch(teacher, platform, registration, platform.prepare(TEACHER, link=link, target=LAUNCH))
    classroom = CourseClass.objects.get().classroom
    page = teacher.get(f"/classes/{classroom.pk}/").content.decode()
    assert "점수 다시 보내기" in page, page[page.find("<main") :]
    teacher.post(f"/lti/classes/{classroom.pk}/grades/")
    assert [s["userId"] for _, s in platform.scores] == [ANNA.sub]
    assert GradeSend.objects.get().sent_at is not None


def test_the_roster_from_nrps_makes_memberships_on_launch_and_on_the_instructors_sync(
    platform: Platform, registration: Any, client: Client
) -> None:
    platform.members = [
        TEACHER,
        ANNA,
        Person("u-ben", "Ben", "Lee", [LEARNER]),
        Person("u-gone", "Go", "Ne", [LEARNER], "Inactive"),
    ]
    link = _placed(platform, 2)
    response = _launch(client, platform, registration, platform.prepare(TEACHER, link=link, target=LAUNCH))
    classroom = CourseClass.objects.get().classroom
    assert response["Location"] == f"/classes/{classroom.pk}/" and platform.nrps_calls == 1
    members = Membership.objects.filter(classroom=classroom)
    roles = {LtiUser.objects.get(auth_user_id=m.user_id).sub: m.role for m in members}
    assert roles == {"u-teach": "instructor", "u-anna": "learner", "u-ben": "learner"}
    platform.members.append(Person("u-cho", "Cho", "Yun", [LEARNER]))
    page = client.post(f"/lti/classes/{classroom.pk}/roster/", follow=True).content.decode()
    assert "구성원 4명, 새로 들어온 사람 1명" in page and 'id="lti-course"' in page
    assert Membership.objects.filter(classroom=classroom, role="learner").count() == 3
    # A learner may not sync: the class does not exist for them.
    learner = Client()
    learner.force_login(User.objects.get(lti_users__sub="u-ben"))
    assert learner.post(f"/lti/classes/{classroom.pk}/roster/").status_code == 404


@pytest.mark.parametrize(
    ("overrides", "korean", "english"),
    [
        ({"exp": 1_000_000_000, "iat": 999_999_000}, "유효 시간이 지났습니다", "has expired"),
        ({"aud": "another-tool"}, "받는 쪽이 다름", "addressed to another tool"),
        ({"key": "other"}, "서명을 확인할 수 없습니다", "signature could not be checked"),
    ],
    ids=["expired", "wrong-audience", "wrong-key"],
)
def test_a_bad_token_is_refused_in_words_and_changes_nothing(
    platform: Platform, registration: Any, client: Client, overrides: dict[str, Any], korean: str, english: str
) -> None:
    if overrides.get("key") == "other":
        overrides = {"key": new_key()}
    someone = User.objects.create_user("someone", password="a-long-passphrase-9")  # noqa: S106 - test account
    client.force_login(someone)
    link = _placed(platform, 1)
    counts = [m.objects.count() for m in (User, LtiUser, Classroom, Membership, LabLink)]
    response = _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH), **overrides)
    assert response.status_code == 400 and korean in response.content.decode()
    assert [m.objects.count() for m in (User, LtiUser, Classroom, Membership, LabLink)] == counts
    assert int(client.session["_auth_user_id"]) == someone.pk  # still signed in as before
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"
    again = _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH), **overrides)
    assert again.status_code == 400 and english in again.content.decode()


def test_a_replayed_launch_is_refused(platform: Platform, registration: Any, client: Client) -> None:
    link = _placed(platform, 1)
    init = client.get(
        f"/lti/init/{registration.uuid}/", platform.login_params(platform.prepare(ANNA, link=link, target=LAUNCH))
    )
    _auth, params = launch_url(init["Location"])
    form = platform.authorize(params)
    assert client.post(LAUNCH, form).status_code == 302
    stranger = Client()  # the same id_token and state posted from another browser
    replayed = stranger.post(LAUNCH, form)
    anna = LtiUser.objects.get(sub=ANNA.sub).auth_user
    assert replayed.status_code == 400 and "이미 쓰인 실행" in replayed.content.decode()
    assert anna is not None and stranger.session.get("_auth_user_id") != str(anna.pk)


def test_a_launch_from_a_deployment_not_turned_on_is_refused_and_changes_nothing(
    platform: Platform, registration: Any, client: Client
) -> None:
    registration.deployments.update(is_active=False)
    link = _placed(platform, 1)
    counts = [m.objects.count() for m in (User, LtiUser, Classroom, Membership, LabLink)]
    response = _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH))
    assert response.status_code == 400 and "배포를 켜야 합니다" in response.content.decode()
    assert [m.objects.count() for m in (User, LtiUser, Classroom, Membership, LabLink)] == counts


def test_a_lab_placed_without_a_grade_column_is_handed_in_without_a_score_or_a_warning(
    platform: Platform, registration: Any, client: Client
) -> None:
    link = Link(id="ungraded", title="실습 1", custom={"lab": "1"}, lineitem="")
    platform.links[link.id] = link
    _launch(client, platform, registration, platform.prepare(ANNA, link=link, target=LAUNCH))
    user = LtiUser.objects.get(sub=ANNA.sub).auth_user
    BenchJob.objects.create(
        owner=user, kind=LABS[1].job_kind, engine_url="http://e", status="done", lab=1, results=GOOD[1]
    )
    page = client.post("/labs/1/submit/", {"reflection": "답"}, follow=True).content.decode()
    assert "제출했습니다" in page and "LMS" not in page.split('class="messages"')[1].split("</ul>")[0]
    assert LabSubmission.objects.filter(user=user).exists() and not GradeSend.objects.exists() and not platform.scores
