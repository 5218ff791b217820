"""LTI 1.3 in Chromium: a learner opens a lab from the emulated LMS's course page (tests/lti/platform.py),
lands signed in on the lab page, runs the lab, hands it in, and the LMS receives the score.

Everything but the LMS is the real stack the harness starts: the web server (Daphne) checks the
platform's signed id_token against its JWKS on loopback, the Celery worker runs the lab, and the
hand-in posts the score to the platform's AGS endpoint with a token from its OAuth endpoint. The lab
run is measured on the scripted vLLM-compatible server (the cheapest real run, as in
test_browser_queue.py), registered as the only measuring engine of a pool of its own; the learner picks
it on the engines page, as any learner picks an engine.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User

from bench.models import BenchJob, Engine
from labapp.labs.catalog import LABS
from labapp.models import Assignment, LabSubmission
from labapp.ops import scripted
from lti.models import GradeSend
from tests.lti.conftest import register
from tests.lti.platform import INSTRUCTOR, LEARNER, Link, Person, Platform, PlatformServer, start_url
from tests.settings import free_port

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "lti"
LAB = 1


@pytest.fixture
def orm_beside_the_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test reads rows while Playwright's event loop runs in its thread (see test_browser_queue.py)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@dataclass
class Course:
    site: str
    platform: Platform
    registration: Any
    engine: Engine
    link: Link
    learner: Person


@pytest.fixture
def course(
    web_server: str,
    celery_worker: object,
    orm_beside_the_browser: None,
    shared_database: None,
    scripted_engine: tuple[scripted.Script, str],
) -> Iterator[Course]:
    _, url = scripted_engine
    tag = uuid.uuid4().hex[:6]
    server = PlatformServer(Platform(client_id=f"lab-{tag}", context_id=f"course-{tag}"), free_port())
    platform = server.start()
    registration = register(platform)
    platform.tool_jwks = requests.get(f"{web_server}/lti/jwks/", timeout=10).json()
    lineitem = f"{platform.base}/lineitems/1"
    platform.lineitems[lineitem] = {"id": lineitem, "label": str(LABS[LAB].title), "scoreMaximum": 100}
    link = Link(id=f"link-{tag}", title=str(LABS[LAB].title), custom={"lab": str(LAB)}, lineitem=lineitem)
    platform.links[link.id] = link
    engine = Engine.objects.create(
        name=f"scripted-{tag}", base_url=url, pool=f"lti-{tag}", hardware="scripted", role=Engine.Role.MEASURE
    )
    learner = Person(f"u-{tag}", "Mina", "Seo", [LEARNER])
    try:
        yield Course(web_server, platform, registration, engine, link, learner)
    finally:
        User.objects.filter(lti_users__registration=registration).delete()  # their jobs and hand-ins with them
        from lti.models import CourseClass

        for found in CourseClass.objects.filter(context__deployment__registration=registration):
            found.classroom.delete()
        registration.delete()  # django-lti's rows of this LMS with it
        engine.delete()
        server.stop()


def _wait(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting until {what}")


@pytest.mark.timeout(240)
def test_a_learner_launched_from_the_lms_runs_and_hands_in_a_lab_and_the_lms_gets_the_grade(
    course: Course, browser: Any
) -> None:
    site, platform = course.site, course.platform
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    hint = platform.prepare(course.learner, link=course.link, target=f"{site}/lti/launch/")
    # The course page's link: login initiation, the LMS's authorization, the signed launch, the lab page.
    page.goto(start_url(platform, f"{site}/lti/init/{course.registration.uuid}/", hint))
    page.wait_for_url(f"{site}/labs/{LAB}/")
    assert page.locator("#run-lab").count() == 1
    user = User.objects.get(lti_users__sub=course.learner.sub)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "lti-launched-lab-ko-1280.png"))

    # The learner's engine: the scripted one, picked on the engines page.
    page.goto(f"{site}/engines/")
    page.click(f"tr[data-engine='{course.engine.pk}'] button[type=submit]")
    page.wait_for_load_state()
    page.goto(f"{site}/labs/{LAB}/")
    page.click("#run-lab")
    page.wait_for_load_state()  # the run may end before the page shows its progress: read it from its row
    job = _wait(
        lambda: (
            (found := BenchJob.objects.filter(owner=user, lab=LAB).first())
            and found.status in ("done", "failed")
            and found
        ),
        "the lab run ends",
    )
    assert job.status == "done", job.error

    # The hand-in, and the grade in the LMS.
    page.goto(f"{site}/labs/{LAB}/")
    page.fill("#reflection", "프리필은 토큰을 한꺼번에, 디코드는 하나씩 처리합니다.")
    page.click("#submit-lab")
    page.wait_for_load_state()
    messages = page.locator("ul.messages").inner_text()
    assert "제출했습니다" in messages and "점수를 LMS 성적부에 보냈습니다" in messages, messages
    page.screenshot(path=str(ARTIFACTS / "lti-handed-in-ko-1280.png"))
    submission = LabSubmission.objects.get(user=user, lab=LAB)
    sent = GradeSend.objects.get(submission=submission)
    ((lineitem, score),) = platform.scores
    assert lineitem == course.link.lineitem and score["userId"] == course.learner.sub
    assert score["scoreGiven"] == sent.score and score["scoreMaximum"] == 100
    assert sent.sent_at is not None
    print(f"\nlab {LAB} run {job.pk} handed in; the LMS got {score['scoreGiven']}/{score['scoreMaximum']}")
    page.close()


@pytest.mark.timeout(120)
def test_an_instructor_adds_a_lab_to_the_course_by_deep_linking_and_the_lms_gets_the_signed_link(
    course: Course, browser: Any
) -> None:
    site, platform = course.site, course.platform
    teacher = Person(f"t-{course.learner.sub}", "Tae", "Park", [INSTRUCTOR])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    hint = platform.prepare(teacher, message="LtiDeepLinkingRequest", target=f"{site}/lti/launch/")
    page.goto(start_url(platform, f"{site}/lti/init/{course.registration.uuid}/", hint))
    page.wait_for_selector("#lti-choose")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "lti-deep-link-choose-ko-1280.png"))
    page.check("#lti-choose input[value='4']")
    page.click("#lti-choose button[type=submit]")
    # The signed answer posts itself back to the LMS (lti/static/lti/deep_link.js, under the site's CSP).
    page.wait_for_url(f"{platform.base}/deep_link_return")
    assert page.locator("li.dl-link").inner_text() == str(LABS[4].title)
    (link,) = [found for found in platform.links.values() if found.custom == {"lab": "4"}]
    assert link.lineitem in platform.lineitems and platform.lineitems[link.lineitem]["scoreMaximum"] == 100
    assert Assignment.objects.filter(classroom__lti_course__context__id_on_platform=platform.context_id, lab=4).exists()
    page.close()


@pytest.mark.timeout(120)
def test_the_lms_pages_read_in_the_lms_language_and_a_refused_launch_says_why(course: Course, browser: Any) -> None:
    """What an instructor of an English course sees (the LMS's locale carried by the launch) and what a
    learner sees when the LMS's launch is refused (here: it expired on the way), at both widths."""
    site, platform = course.site, course.platform
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    teacher = Person(f"t-{course.learner.sub}", "Tae", "Park", [INSTRUCTOR], locale="en-US")
    for width in (1280, 1920):
        context = browser.new_context(viewport={"width": width, "height": 1080})
        page = context.new_page()
        hint = platform.prepare(teacher, message="LtiDeepLinkingRequest", target=f"{site}/lti/launch/")
        page.goto(start_url(platform, f"{site}/lti/init/{course.registration.uuid}/", hint))
        page.wait_for_selector("#lti-choose")
        assert page.locator("h1").inner_text() == "Choose a lab to add to the course"
        assert page.locator("#lti-choose button[type=submit]").inner_text() == "Add to the course"
        page.screenshot(path=str(ARTIFACTS / f"lti-deep-link-choose-en-{width}.png"), full_page=True)
        for language, words in (("ko", "유효 시간이 지났습니다"), ("en", "expired")):
            context.add_cookies([{"name": "django_language", "value": language, "url": site}])
            expired = {"exp": int(time.time()) - 600, "iat": int(time.time()) - 900}
            hint = platform.prepare(course.learner, link=course.link, target=f"{site}/lti/launch/", claims=expired)
            page.goto(start_url(platform, f"{site}/lti/init/{course.registration.uuid}/", hint))
            page.wait_for_selector("#lti-refused")
            assert words in page.locator("#lti-refused").inner_text()
            page.screenshot(path=str(ARTIFACTS / f"lti-refused-{language}-{width}.png"), full_page=True)
        context.close()
    assert not User.objects.filter(lti_users__sub=course.learner.sub).exists()  # the refused launches made no one
