"""The whole classroom story in Chromium, on a class-mode web server over the real stack.

An instructor makes a class and assigns Labs 1 and 4; a learner signs up with the join
code, uses the estimator and the KV-cache stepper, runs Labs 1, 4 and 6 against the real
engine with a prediction each (watching Lab 1's progress arrive, then reading its job
page), hands in Labs 1 and 4, asks the chat, sweeps the team demo and compares two runs.
Every page the learner saw (and the home, a chapter, /bench/ and /status/ pages) is then
checked with axe-core (no serious or critical violation, no two landmarks alike) and shown
at 1280 and 1920 wide, in Korean and in English,
saved under ``test-artifacts/story/``, and read: a Korean page may show no English word
outside the reviewed technical terms (the checker of ``tests/site/test_korean.py``), an
English page no Hangul. What the model wrote, the question typed and the chapter's prose
are content and are taken out first. Last, the instructor sees both hand-ins in the
gradebook and downloads the CSV.

One learner does all of it so that each lab runs once in the browser tests: a run on two
cores takes a minute or more even at the lab's minimum settings.
"""

from __future__ import annotations

import csv
import io
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError

from labapp.ops.stack.components import DAPHNE_FLAGS
from tests import axe, harness
from tests.settings import free_port
from tests.site.test_korean import english_words, hangul, shown
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
WIDTHS = (1280, 1920)
# Content, not the interface: the chapter's prose, the model's answer and the question, the
# retrieved passages and their titles, the prompt as sent, the job's raw settings.
CONTENT = (
    "details.chapter",
    ".chapter-prose",
    ".answer .text",
    ".answer header",
    ".sources li a",
    ".sources blockquote",
    "details.prompt pre",
    ".notices",
    # The engine that answered, by its name as saved with the answer: an admin's name for a
    # registered engine, or the configured one's in the language the question was asked in.
    ".engine [data-k=engine]",
    "code",
    "pre",
)
# What the story's people typed: the learner's name (the sign-out button's title) and the class's
# name (in the chat's collection menu) are theirs, in whatever language they chose.
TYPED = ("minji", "16장 실습반")
DROP_CONTENT = "sel => { for (const s of sel) document.querySelectorAll(s).forEach(n => n.remove()); }"


def _run_lab(page: object, site: str, number: int, prediction: str) -> tuple[set[int], bool]:
    """The lab's run button with a prediction typed in; waits for the checks (the page reloads itself).

    Returns the progress values the page showed while the run went, and whether any came over the
    job's websocket.
    """
    page.goto(f"{site}/labs/{number}/")  # type: ignore[attr-defined]
    box = page.locator("#prediction")  # type: ignore[attr-defined]
    if not box.input_value():
        box.fill(prediction)
    page.click("#run-lab")  # type: ignore[attr-defined]
    page.wait_for_selector("#job-state")  # type: ignore[attr-defined]
    # The real worker on the real engine, at the lab's minimum settings (tests/settings.py: the test servers'
    # run buttons; a default Lab 1 or 4 run takes about 4 min on two quiet cores).
    seen: set[int] = set()
    pushed = False
    deadline = time.monotonic() + LAB_WAIT_S
    while not page.locator("#lab-checks").count():  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise AssertionError(f"lab {number} did not finish: " + page.locator("#lab-run").inner_text())  # type: ignore[attr-defined]
        progress = page.locator("#job-progress")  # type: ignore[attr-defined]
        try:
            if progress.count():
                seen.add(int(progress.get_attribute("value", timeout=1000) or 0))
                pushed = pushed or int(page.evaluate("Number(document.body.dataset.pushes || 0)")) > 0  # type: ignore[attr-defined]
        except PlaywrightError:  # the page reloaded itself between the two reads
            pass
        page.wait_for_timeout(300)  # type: ignore[attr-defined]
    comparison = page.locator("#lab-results .prediction")  # type: ignore[attr-defined]
    assert comparison.count() == 1, f"lab {number}: the prediction is not shown beside the measurement"
    assert comparison.get_attribute("data-predicted")
    return seen, pushed


def _hand_in(page: object, reflection: str, name: str) -> None:
    page.fill("#reflection", reflection)  # type: ignore[attr-defined]
    page.click("#submit-lab")  # type: ignore[attr-defined]
    page.wait_for_load_state()  # type: ignore[attr-defined]
    assert page.locator("#lab-status").get_attribute("data-status") == "submitted"  # type: ignore[attr-defined]
    _shot(page, name)


def _read_speed_job(page: object, site: str) -> None:
    """Lab 1's job page, from the lab's results: the speed kind's chart, timeline and both speeds."""
    page.goto(f"{site}/labs/1/")  # type: ignore[attr-defined]
    page.click("#lab-results .job-name a")  # type: ignore[attr-defined]
    page.wait_for_selector("#job-chart[data-drawn=true]", timeout=10_000)  # type: ignore[attr-defined]
    assert page.locator("#job-chart .main-svg").count() >= 1  # type: ignore[attr-defined]
    page.wait_for_selector("#job-timeline[data-drawn=true]", timeout=10_000)  # type: ignore[attr-defined]
    assert float(page.locator("#prefill-speed").inner_text().replace(",", "")) > 0  # type: ignore[attr-defined]
    assert float(page.locator("#decode-speed").inner_text().replace(",", "")) > 0  # type: ignore[attr-defined]
    _shot(page, "06-lab1-speed-job")


def _ask(page: object, site: str) -> str:
    """One question on the chat; the address of its conversation (the saved answer card)."""
    page.goto(f"{site}/chat/")  # type: ignore[attr-defined]
    page.wait_for_selector("#socket-state[data-state=open]", timeout=15_000)  # type: ignore[attr-defined]
    page.fill("textarea[name=question]", "연차는 며칠인가요?")  # type: ignore[attr-defined]
    page.fill("input[name=max_tokens]", "24")  # type: ignore[attr-defined]
    page.click("#ask-button")  # type: ignore[attr-defined]
    answer = page.locator(".answer").nth(0)  # type: ignore[attr-defined]
    for _ in range(1200):
        if answer.get_attribute("data-status") not in (None, "streaming", "retrieving", "queued"):
            break
        page.wait_for_timeout(100)  # type: ignore[attr-defined]
    else:
        raise AssertionError("the chat answer did not finish")
    page.goto(f"{site}/chat/history/")  # type: ignore[attr-defined]
    links = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")  # type: ignore[attr-defined]
    return site + next(str(h) for h in links if re.fullmatch(r"/chat/[0-9]+/", str(h)))


def _sweep_demo(page: object, site: str) -> str:
    """A two-cell sweep on the demo; its address (``/demo/?job=N``) keeps what was swept."""
    page.goto(f"{site}/demo/")  # type: ignore[attr-defined]
    page.eval_on_selector("input[name=top_k_max]", "el => { el.value = '2'; el.dispatchEvent(new Event('input')); }")  # type: ignore[attr-defined]
    page.eval_on_selector("input[name=chunk_size_max]", "el => { el.value = '200'; }")  # type: ignore[attr-defined]
    page.click("#demo-start")  # type: ignore[attr-defined]
    progress = page.locator("#demo-progress")  # type: ignore[attr-defined]
    for _ in range(1500):
        if progress.get_attribute("data-status") in ("done", "failed", "cancelled"):
            break
        page.wait_for_timeout(200)  # type: ignore[attr-defined]
    assert progress.get_attribute("data-status") == "done"
    return str(page.url)  # type: ignore[attr-defined]


def _job_ids(page: object, site: str) -> list[str]:
    page.goto(f"{site}/bench/")  # type: ignore[attr-defined]
    return [str(v) for v in page.eval_on_selector_all("input[name=ids]", "els => els.map(e => e.value)")]  # type: ignore[attr-defined]


def _switch(page: object, language: str) -> None:
    page.click(f"button[value={language}]")  # type: ignore[attr-defined]
    page.wait_for_load_state()  # type: ignore[attr-defined]
    assert page.locator("html").get_attribute("lang") == language  # type: ignore[attr-defined]


def _looked_at(page: object, name: str, language: str) -> dict[str, str] | set[str] | list[str]:
    """Screenshots of the page at both widths; what reads wrong for ``language`` or what axe-core finds
    (empty: nothing)."""
    if broken := axe.violations(page):
        return broken
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1080 if width == 1920 else 900})  # type: ignore[attr-defined]
        page.wait_for_timeout(600)  # type: ignore[attr-defined]  # charts resize to the new width
        page.screenshot(path=str(ARTIFACTS / f"walk-{name}-{language}-{width}.png"), full_page=True)  # type: ignore[attr-defined]
    page.evaluate(DROP_CONTENT, list(CONTENT))  # type: ignore[attr-defined]
    html = str(page.content())  # type: ignore[attr-defined]
    # The JSON blocks are data; what the charts drew from them is read from their SVG below.
    html = re.sub(r'<script type="application/json"[^>]*>.*?</script>', "", html, flags=re.S)
    texts = shown(name, html.encode(), "text/html").texts
    texts += [str(t) for t in page.eval_on_selector_all(".js-plotly-plot text", "els => els.map(e => e.textContent)")]  # type: ignore[attr-defined]
    for typed in TYPED:
        texts = [t.replace(typed, "") for t in texts]
    return english_words(texts) if language == "ko" else hangul(texts)


def _pages(site: str, chat: str, demo: str, compare: str) -> Iterator[tuple[str, str]]:
    yield "home", f"{site}/"
    yield "chapter", f"{site}/chapter/prefill-decode/"
    yield "bench", f"{site}/bench/"
    yield "status", f"{site}/status/"
    for number in (1, 4, 6):
        yield f"lab{number}", f"{site}/labs/{number}/"
    yield "chat", chat
    yield "demo", demo
    yield "compare", compare


def _read_in_both_languages(page: object, site: str, pages: list[tuple[str, str]]) -> dict[str, object]:
    wrong: dict[str, object] = {}
    for language in ("ko", "en"):
        page.goto(f"{site}/")  # type: ignore[attr-defined]
        _switch(page, language)
        for name, url in pages:
            page.goto(url)  # type: ignore[attr-defined]
            page.wait_for_load_state("networkidle")  # type: ignore[attr-defined]
            if found := _looked_at(page, name, language):
                wrong[f"{name} ({language})"] = found
    _switch(page, "ko")
    page.set_viewport_size(PAGE["viewport"])  # type: ignore[attr-defined]
    return wrong


def _make_class(teacher: object, site: str) -> tuple[str, str]:
    """The class with Labs 1 and 4 assigned (open since yesterday, due in a week); its join code and page."""
    _sign_in(teacher, site, "teacher")
    teacher.goto(f"{site}/classes/new/")  # type: ignore[attr-defined]
    teacher.fill("input[name=name]", TYPED[1])  # type: ignore[attr-defined]
    teacher.click("#class-form button[type=submit]")  # type: ignore[attr-defined]
    teacher.wait_for_selector("#join-code")  # type: ignore[attr-defined]
    code = teacher.locator(".join-code").inner_text().strip()  # type: ignore[attr-defined]
    class_url = str(teacher.url)  # type: ignore[attr-defined]
    now = datetime.now()
    for lab in ("1", "4"):
        teacher.select_option("#assignment-form select[name=lab]", lab)  # type: ignore[attr-defined]
        teacher.fill("#assignment-form input[name=opens_at]", (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))  # type: ignore[attr-defined]
        teacher.fill("#assignment-form input[name=due_at]", (now + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M"))  # type: ignore[attr-defined]
        teacher.click("#assignment-form button[type=submit]")  # type: ignore[attr-defined]
        teacher.wait_for_load_state()  # type: ignore[attr-defined]
    assert teacher.locator("#assignments").inner_text().count("실습") >= 2  # type: ignore[attr-defined]
    _shot(teacher, "01-class-with-assignments")
    return code, class_url


def _sign_up(learner: object, site: str, code: str) -> None:
    """A wrong join code first (it says so), then the right one."""
    learner.goto(f"{site}/accounts/signup/")  # type: ignore[attr-defined]
    learner.fill("input[name=username]", TYPED[0])  # type: ignore[attr-defined]
    learner.fill("input[name=password1]", PASSWORD)  # type: ignore[attr-defined]
    learner.fill("input[name=password2]", PASSWORD)  # type: ignore[attr-defined]
    learner.fill("input[name=join_code]", "WRONG-CODE")  # type: ignore[attr-defined]
    learner.click("main form button[type=submit]")  # type: ignore[attr-defined]
    learner.wait_for_load_state()  # type: ignore[attr-defined]
    assert learner.locator(".errorlist, .form-error, .error").count() >= 1  # type: ignore[attr-defined]
    _shot(learner, "02-signup-wrong-code")
    learner.fill("input[name=password1]", PASSWORD)  # type: ignore[attr-defined]
    learner.fill("input[name=password2]", PASSWORD)  # type: ignore[attr-defined]
    learner.fill("input[name=join_code]", code)  # type: ignore[attr-defined]
    learner.click("main form button[type=submit]")  # type: ignore[attr-defined]
    learner.wait_for_load_state()  # type: ignore[attr-defined]
    assert "/accounts/signup/" not in learner.url, learner.content()[-2000:]  # type: ignore[attr-defined]


def _use_the_widgets(learner: object, site: str) -> None:
    learner.goto(f"{site}/chapter/estimator/")  # type: ignore[attr-defined]
    learner.fill("#est-prompt", "1500")  # type: ignore[attr-defined]
    learner.fill("#est-output", "50")  # type: ignore[attr-defined]
    learner.fill("#est-prefill-speed", "1000")  # type: ignore[attr-defined]
    learner.fill("#est-decode-speed", "50")  # type: ignore[attr-defined]
    assert "1.5" in learner.locator("#est-result").inner_text()  # type: ignore[attr-defined]
    _shot(learner, "03-estimator")
    learner.goto(f"{site}/chapter/kv-cache/")  # type: ignore[attr-defined]
    for _ in range(4):
        learner.click("#kv-step")  # type: ignore[attr-defined]
    assert "7" in learner.locator("#kv-status").inner_text()  # type: ignore[attr-defined]
    _shot(learner, "04-kv-stepper")


@pytest.mark.timeout(2400)  # three lab runs on the real engine at their minimum settings, a chat answer, a sweep
def test_an_instructor_assigns_a_learner_runs_labs_asks_demos_compares_all_pages_read_right_and_the_gradebook_shows_it(
    class_site: str, browser: object
) -> None:
    teacher = browser.new_page(**PAGE)  # type: ignore[attr-defined]
    code, class_url = _make_class(teacher, class_site)
    learner = browser.new_page(**PAGE)  # type: ignore[attr-defined]
    _sign_up(learner, class_site, code)
    _use_the_widgets(learner, class_site)

    seen, pushed = _run_lab(learner, class_site, 1, "2.5")
    assert len(seen) >= 3, f"the progress bar did not move: {seen}"
    assert pushed, "no progress arrived over the job's websocket"
    checks = learner.locator("#lab-checks li")
    assert checks.count() == 5  # the lab's three, its minimum settings, no other traffic
    assert learner.locator("#lab-checks li[data-passed=true]").count() >= 2, learner.locator("#lab-checks").inner_text()
    _hand_in(learner, "측정한 프리필은 디코드보다 토큰당 수십 배 빠릅니다.", "05-lab1-submitted")
    _read_speed_job(learner, class_site)

    _run_lab(learner, class_site, 4, "2.5")
    assert learner.locator("#lab-checks li").count() == 5
    _hand_in(learner, "top-k와 청크가 클수록 문맥 토큰이 늘고 TTFT가 올라갑니다.", "07-lab4-submitted")
    _run_lab(learner, class_site, 6, "2.5")

    chat = _ask(learner, class_site)
    demo = _sweep_demo(learner, class_site)
    ids = _job_ids(learner, class_site)[:2]
    assert len(ids) == 2
    compare = f"{class_site}/bench/compare/?ids={ids[0]}&ids={ids[1]}"
    wrong = _read_in_both_languages(learner, class_site, list(_pages(class_site, chat, demo, compare)))
    assert not wrong, "\n".join(f"{where}: {found}" for where, found in wrong.items())

    teacher.goto(class_url)
    teacher.click("#results-link")
    teacher.wait_for_selector("#gradebook")
    row = teacher.locator("#gradebook tr", has_text="minji")
    assert row.locator("td[data-lab='1'][data-status=submitted]").count() == 1
    assert row.locator("td[data-lab='4'][data-status=submitted]").count() == 1
    for chart in ("#class-speeds", "#class-ttft"):  # the class-wide charts draw from the learners' runs
        teacher.wait_for_selector(f"{chart}[data-drawn=true]", timeout=10_000)
    assert not axe.violations(teacher), axe.violations(teacher)
    _shot(teacher, "08-gradebook")
    with teacher.expect_download() as download:
        teacher.click("#csv-export")
    text = Path(download.value.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.reader(io.StringIO(text)))
    assert any("minji" in r for r in rows), rows[:3]
    teacher.close()
    learner.close()
