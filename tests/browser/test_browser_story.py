"""The whole classroom story in Chromium, on a class-mode web server over the real stack.

An instructor makes a class and assigns Labs 1 and 4; a learner signs up with the join
code, uses the estimator and the KV-cache stepper, runs Lab 1 against the real engine,
sees its checks and submits; runs Lab 4 and submits; the instructor sees both in the
gradebook and downloads the CSV. Every page is saved as a screenshot.
"""

from __future__ import annotations

import csv
import io
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from labapp.ops.stack.components import DAPHNE_FLAGS
from tests import harness
from tests.settings import free_port
from tests.tls_proxy import TlsProxy, self_signed

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "story"
PASSWORD = "a-long-story-passphrase-7"  # noqa: S105 - a throwaway account in the test database
PAGE = {"viewport": {"width": 1400, "height": 1000}, "ignore_https_errors": True}  # the proxy's own certificate
# The first instructor is made by an admin, as docs/instructors.md says: the admin (here: the
# shell) makes a class and makes the teacher, a plain account (not staff), its instructor,
# as a class's memberships in /admin/ do. Teaching a class, the teacher may create the
# story's class themselves.
ADMIN_STEP = f"""
from django.contrib.auth.models import User
from labapp.classes.services import classroom_create
from labapp.models import Classroom, Membership
User.objects.filter(username__in=["teacher", "story-admin"]).delete()
Classroom.objects.filter(name="교원 연수반").delete()
admin = User.objects.create_superuser("story-admin", password="{PASSWORD}")
teacher = User.objects.create_user("teacher", password="{PASSWORD}")
staff_room = classroom_create(name="교원 연수반", instructor=admin)
Membership.objects.create(classroom=staff_room, user=teacher, role=Membership.Role.INSTRUCTOR)
"""


@pytest.fixture(scope="module")
def class_site(full_stack: str, chapter_indexed: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second web server on the same database, Redis and engine, with a class server's real settings.

    LAB_MODE=class with DEBUG off: secure cookies, the https redirect and HSTS
    (labapp/settings.py), static files from whitenoise (WHITENOISE_USE_FINDERS: no
    collectstatic). The browser reaches it as a class reaches a class server, over https
    through a TLS-terminating proxy (tests/tls_proxy.py) that sets X-Forwarded-Proto, which
    Django trusts through SECURE_PROXY_SSL_HEADER; CSRF_TRUSTED_ORIGINS names the proxy's
    origin as docs/operations.md says for a proxy (the websockets check it too).
    """
    port = free_port()
    certificate = self_signed(tmp_path_factory.mktemp("tls"))
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    proxy = TlsProxy(("127.0.0.1", port), certificate)
    url = proxy.start()
    env = os.environ | {
        "LAB_MODE": "class",
        "SECRET_KEY": "story-test-secret-key-0123456789abcdef",
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "true",
        "CSRF_TRUSTED_ORIGINS": url,
    }
    log = (harness.LOG_DIR / "web-class.log").open("ab")
    command = [
        sys.executable,
        "-m",
        "daphne",
        *DAPHNE_FLAGS,
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "labapp.asgi:application",
    ]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(150):
            try:
                if httpx.get(f"{url}/healthz", timeout=1, verify=trusting).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("the class-mode web server did not start")
        # Plain http to the server itself is sent to https: the real class-mode settings are on.
        assert httpx.get(f"http://127.0.0.1:{port}/accounts/login/").status_code == 301
        subprocess.run([sys.executable, "manage.py", "shell", "-c", ADMIN_STEP], cwd=ROOT, env=env, check=True)
        yield url
    finally:
        proxy.stop()  # first: it holds the browser's websockets open to the server
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _shot(page: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def _sign_in(page: object, site: str, username: str) -> None:
    page.goto(f"{site}/accounts/login/")  # type: ignore[attr-defined]
    page.fill("input[name=username]", username)  # type: ignore[attr-defined]
    page.fill("input[name=password]", PASSWORD)  # type: ignore[attr-defined]
    page.click("main form button[type=submit]")  # type: ignore[attr-defined]
    page.wait_for_load_state()  # type: ignore[attr-defined]


LAB_WAIT_S = 720


def _run_lab(page: object, site: str, number: int) -> None:
    page.goto(f"{site}/labs/{number}/")  # type: ignore[attr-defined]
    page.click("#run-lab")  # type: ignore[attr-defined]
    page.wait_for_selector("#job-state")  # type: ignore[attr-defined]
    # The real worker on the real engine, at the lab's minimum settings (tests/settings.py: the test servers'
    # run buttons; a default Lab 1 or 4 run takes about 4 min on two quiet cores); the page reloads itself.
    deadline = time.monotonic() + LAB_WAIT_S
    while time.monotonic() < deadline:
        if page.locator("#lab-checks").count():  # type: ignore[attr-defined]
            return
        page.wait_for_timeout(500)  # type: ignore[attr-defined]
    raise AssertionError(f"lab {number} did not finish: " + page.locator("#lab-run").inner_text())  # type: ignore[attr-defined]


@pytest.mark.timeout(1800)  # two lab runs on the real engine at their minimum settings
def test_an_instructor_assigns_a_learner_does_labs_1_and_4_and_the_gradebook_shows_them(
    class_site: str, browser: object
) -> None:
    teacher = browser.new_page(**PAGE)  # type: ignore[attr-defined]
    _sign_in(teacher, class_site, "teacher")
    teacher.goto(f"{class_site}/classes/new/")
    teacher.fill("input[name=name]", "16장 실습반")
    teacher.click("#class-form button[type=submit]")
    teacher.wait_for_selector("#join-code")
    code = teacher.locator(".join-code").inner_text().strip()
    class_url = teacher.url
    now = datetime.now()
    for lab in ("1", "4"):
        teacher.select_option("#assignment-form select[name=lab]", lab)
        teacher.fill("#assignment-form input[name=opens_at]", (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
        teacher.fill("#assignment-form input[name=due_at]", (now + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M"))
        teacher.click("#assignment-form button[type=submit]")
        teacher.wait_for_load_state()
    assert teacher.locator("#assignments").inner_text().count("실습") >= 2
    _shot(teacher, "01-class-with-assignments")

    learner = browser.new_page(**PAGE)  # type: ignore[attr-defined]
    learner.goto(f"{class_site}/accounts/signup/")
    learner.fill("input[name=username]", "minji")
    learner.fill("input[name=password1]", PASSWORD)
    learner.fill("input[name=password2]", PASSWORD)
    learner.fill("input[name=join_code]", "WRONG-CODE")
    learner.click("main form button[type=submit]")
    learner.wait_for_load_state()
    assert learner.locator(".errorlist, .form-error, .error").count() >= 1  # a wrong code says so
    _shot(learner, "02-signup-wrong-code")
    learner.fill("input[name=password1]", PASSWORD)
    learner.fill("input[name=password2]", PASSWORD)
    learner.fill("input[name=join_code]", code)
    learner.click("main form button[type=submit]")
    learner.wait_for_load_state()
    assert "/accounts/signup/" not in learner.url, learner.content()[-2000:]

    learner.goto(f"{class_site}/chapter/estimator/")
    learner.fill("#est-prompt", "1500")
    learner.fill("#est-output", "50")
    learner.fill("#est-prefill-speed", "1000")
    learner.fill("#est-decode-speed", "50")
    assert "1.5" in learner.locator("#est-result").inner_text()
    _shot(learner, "03-estimator")
    learner.goto(f"{class_site}/chapter/kv-cache/")
    for _ in range(4):
        learner.click("#kv-step")
    assert "7" in learner.locator("#kv-status").inner_text()
    _shot(learner, "04-kv-stepper")

    _run_lab(learner, class_site, 1)
    checks = learner.locator("#lab-checks li")
    assert checks.count() == 5  # the lab's three, its minimum settings, no other traffic
    assert learner.locator("#lab-checks li[data-passed=true]").count() >= 2, learner.locator("#lab-checks").inner_text()
    learner.fill("#reflection", "측정한 프리필은 디코드보다 토큰당 수십 배 빠릅니다.")
    learner.click("#submit-lab")
    learner.wait_for_load_state()
    assert learner.locator("#lab-status").get_attribute("data-status") == "submitted"
    _shot(learner, "05-lab1-submitted")

    _run_lab(learner, class_site, 4)
    assert learner.locator("#lab-checks li").count() == 5
    learner.fill("#reflection", "top-k와 청크가 클수록 문맥 토큰이 늘고 TTFT가 올라갑니다.")
    learner.click("#submit-lab")
    learner.wait_for_load_state()
    assert learner.locator("#lab-status").get_attribute("data-status") == "submitted"
    _shot(learner, "06-lab4-submitted")

    teacher.goto(class_url)
    teacher.click("#results-link")
    teacher.wait_for_selector("#gradebook")
    row = teacher.locator("#gradebook tr", has_text="minji")
    assert row.locator("td[data-lab='1'][data-status=submitted]").count() == 1
    assert row.locator("td[data-lab='4'][data-status=submitted]").count() == 1
    for chart in ("#class-speeds", "#class-ttft"):  # the class-wide charts draw from the learners' runs
        teacher.wait_for_selector(f"{chart}[data-drawn=true]", timeout=10_000)
    _shot(teacher, "07-gradebook")
    with teacher.expect_download() as download:
        teacher.click("#csv-export")
    text = Path(download.value.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO(text)))
    assert any("minji" in r for r in rows), rows[:3]
    teacher.close()
    learner.close()
