"""The fair queue in Chromium: a learner's lab run that waits for the only measuring engine shows its
position and expected start, then starts and ends by itself and shows the engine that measured it.

Two learners, each in their own browser (a third for the waiting learner's English view), on the
harness's web server and Celery worker. The engine is the scripted vLLM-compatible server in a
thread of this process, registered in a pool of its own as its only measuring engine, slowed so
that a Lab 1 run (a warm-up and four requests, at the test servers' minimum settings) lasts about
ten seconds. Learner A's first run ends, so the queue knows how long a run of these settings
takes; A runs again, and B's run waits behind it: B's page says it is first in the queue and
starts in about so many seconds (and B's run does start about then), then, without B touching
anything, that it runs and on which engine, and, once the page has reloaded itself, the result
with the engine that measured it. Screenshots of B's waiting and finished page at 1280 and 1920
wide, in Korean and in English, go to ``test-artifacts/queue/``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Error as PlaywrightError

from bench.models import BenchJob, Engine
from labapp.ops import scripted
from tests.site.test_korean import english_words, hangul, shown

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "queue"
PASSWORD = "a-long-queue-passphrase-3"  # noqa: S105 - throwaway accounts in the test database
# A token every 0.4 s, four tokens and a pause: 2 s a request, about 10 s a Lab 1 run of five requests.
TOKEN_DELAY_S = 0.4
WIDTHS = {1280: 900, 1920: 1080}
LAB = 1
# What the shown-text check leaves out: code (addresses, settings), the charts, the chapter's prose.
NOT_INTERFACE = "pre, code, script, style, svg, .chart, details.chapter"


@pytest.fixture
def engine_script() -> scripted.Script:
    return scripted.Script(delay_s=TOKEN_DELAY_S)


@dataclass
class Queue:
    """The scripted engine, registered as the only measuring engine of its pool, and two learners."""

    site: str
    engine: Engine
    learners: dict[str, User]

    def job(self, who: str) -> BenchJob | None:
        return BenchJob.objects.filter(owner=self.learners[who], lab=LAB).order_by("-pk").first()


@pytest.fixture
def orm_beside_the_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test reads and writes rows in its own thread while Playwright's sync API keeps an event loop
    running there (tests/conftest.py), which Django takes for an async context: its documented switch
    lets the ORM run anyway. Set after the session's services started (they do not inherit it), and
    taken off after the shared database's connection has closed."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def queue(
    web_server: str,
    celery_worker: object,
    orm_beside_the_browser: None,
    shared_database: None,
    scripted_engine: tuple[scripted.Script, str],
) -> Iterator[Queue]:
    _, url = scripted_engine
    tag = uuid.uuid4().hex[:6]
    engine = Engine.objects.create(
        name=f"scripted-{tag}", base_url=url, pool=f"queue-{tag}", hardware="scripted", role=Engine.Role.MEASURE
    )
    learners = {who: User.objects.create_user(f"q{who}-{tag}", password=PASSWORD) for who in ("a", "b")}
    try:
        yield Queue(web_server, engine, learners)
    finally:
        for user in learners.values():
            user.delete()  # their jobs with them
        engine.delete()


def _wait(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


def _learner(browser: Any, queue: Queue, who: str, language: str = "ko") -> Any:
    """A signed-in page of the learner's own browser, with the queue's engine picked on the engines page."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{queue.site}/accounts/login/")
    page.fill("input[name=username]", queue.learners[who].username)
    page.fill("input[name=password]", PASSWORD)
    page.click("main form button[type=submit]")
    page.wait_for_load_state()
    page.goto(f"{queue.site}/engines/")
    if language != "ko":
        page.click(f"button[value={language}]")
        page.wait_for_load_state()
    assert page.locator("html").get_attribute("lang") == language
    page.click(f"tr[data-engine='{queue.engine.pk}'] button[type=submit]")
    page.wait_for_load_state()
    assert queue.engine.name in page.locator(f"tr[data-engine='{queue.engine.pk}']").inner_text()
    return page


def _run(page: Any, site: str) -> None:
    page.goto(f"{site}/labs/{LAB}/")
    page.click("#run-lab")
    page.wait_for_selector("#job-state")


def _shots(page: Any, name: str, top: str) -> None:
    """The page at both widths, scrolled to ``top``: ``queue-<name>-<language>-<width>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    language = page.locator("html").get_attribute("lang")
    for width, height in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.locator(top).evaluate("e => e.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / f"queue-{name}-{language}-{width}.png"))
    page.set_viewport_size({"width": 1280, "height": 900})


def _misread(page: Any, section: str, queue: Queue) -> object:
    """Words of the other language in a section's interface text (aside from what people chose: the
    engine's name and hardware label, the learners' names)."""
    html = page.locator(section).evaluate(
        "(e, drop) => { const c = e.cloneNode(true); c.querySelectorAll(drop).forEach(n => n.remove()); "
        "return c.outerHTML; }",
        NOT_INTERFACE,
    )
    for made in (queue.engine.name, queue.engine.hardware, *(u.username for u in queue.learners.values())):
        html = html.replace(made, "")
    texts = shown(section, html.encode(), "text/html").texts
    return english_words(texts) if page.locator("html").get_attribute("lang") == "ko" else hangul(texts)


def _status(page: Any) -> str:
    """The job panel's status, or "ended" once the page shows the results of a finished run instead."""
    try:
        state = page.locator("#job-state")
        return str(state.get_attribute("data-status", timeout=500)) if state.count() else "ended"
    except PlaywrightError:  # the page reloaded itself between the two reads
        return "reloading"


@pytest.mark.timeout(180)
def test_a_waiting_lab_run_shows_its_place_and_start_then_its_result_with_the_engine_that_measured_it(
    queue: Queue, browser: Any
) -> None:
    engine, site = queue.engine, queue.site
    a = _learner(browser, queue, "a")
    b = _learner(browser, queue, "b")
    b_english = _learner(browser, queue, "b", "en")

    # A's first run: it ends, and the queue knows how long a run of these settings takes.
    _run(a, site)
    first = _wait(lambda: (job := queue.job("a")) and job.status in ("done", "failed") and job, "A's first run ends")
    assert first.status == "done", first.error
    usual_s = (first.finished_at - first.started_at).total_seconds()

    # A's second run takes the engine; B's run, asked for at once, waits behind it.
    _run(a, site)
    second = _wait(lambda: (job := queue.job("a")) and job.pk != first.pk and job.status == "running" and job, "A runs")
    _run(b, site)
    seen_at = timezone.now()
    b.evaluate("window.sameLoad = true")  # gone if the page is reloaded
    mine = queue.job("b")
    assert mine is not None and mine.status == "queued", mine and mine.status
    panel = b.locator("#job-state")
    assert panel.get_attribute("data-status") == "queued"
    text = panel.inner_text()
    assert "대기 중" in text and "대기열 1번째" in text, text
    # The expected start, in seconds: the rest of A's run, by the finished one's time.
    eta = b.locator("#job-state .eta")
    expected_s = float(eta.get_attribute("data-starts-in") or "nan")
    assert 0 < expected_s <= 2 * usual_s, (expected_s, usual_s)
    said = re.fullmatch(r"약 (\d+)초 뒤 시작", eta.inner_text().strip())
    assert said and int(said[1]) == round(expected_s), eta.inner_text()
    assert "측정 엔진 중 먼저 비는 곳" in b.locator("#job-engine").inner_text()
    assert not _misread(b, "#lab-run", queue)
    _shots(b, "waiting", "body")
    b_english.goto(f"{site}/labs/{LAB}/")
    english = b_english.locator("#job-state").inner_text()
    assert "Queued" in english and "number 1 in the queue" in english, english
    assert re.search(r"Starts in about \d+ s", english), english
    assert not _misread(b_english, "#lab-run", queue)
    _shots(b_english, "waiting", "body")
    assert BenchJob.objects.get(pk=mine.pk).status == "queued", (
        "B's run started before its waiting page was seen: A's run is too short"
    )
    b.evaluate("window.scrollTo(0, 0)")

    # B's run starts by itself once A's ends, shown without a reload, with the engine measuring it.
    statuses: list[str] = []
    running_engine = ""
    deadline = time.monotonic() + 60
    while (status := _status(b)) in ("queued", "running", "reloading") and time.monotonic() < deadline:
        if not statuses or statuses[-1] != status:
            statuses.append(status)
        if status == "running" and not running_engine:
            # Read once, briefly: the run may end and the page reload itself between two reads (CI saw a
            # second read wait 30 s for a panel that was gone).
            try:
                text = b.locator("#job-engine").inner_text(timeout=1000)
                same_load = b.evaluate("window.sameLoad === true")
            except PlaywrightError:
                text, same_load = "", True
            if "측정한 엔진" in text:
                running_engine = text
                assert same_load, "the page reloaded to show the run starting"
        b.wait_for_timeout(200)
    assert statuses[:2] == ["queued", "running"], statuses
    assert engine.name in running_engine and engine.base_url.removeprefix("http://") in running_engine
    done = queue.job("b")
    assert done is not None and done.status == "done", done and done.error
    assert done.engine_url.rstrip("/") == engine.base_url.rstrip("/")
    assert done.started_at is not None
    waited_s = (done.started_at - seen_at).total_seconds()
    # It started when the page said, give or take the worker's next look (every 3 s) and this machine's load.
    assert expected_s - 3 <= waited_s <= expected_s + 6, (expected_s, waited_s)
    second.refresh_from_db()
    assert second.status == "done" and second.finished_at <= done.started_at

    # The result, once the page has reloaded itself: the engine that measured it, by name and address.
    b.wait_for_selector("#lab-engine")
    result = b.locator("#lab-engine").inner_text()
    assert result.startswith("측정한 엔진: ") and engine.name in result and engine.base_url.split("//")[1] in result
    assert b.locator(f"#lab-results .job-name[data-job='{done.pk}']").count() == 1
    assert not _misread(b, "#lab-results", queue)
    _shots(b, "result", "#lab-results")
    b_english.wait_for_selector("#lab-engine", timeout=15_000)  # that page reloaded itself too
    result = b_english.locator("#lab-engine").inner_text()
    assert result.startswith("Measured on: ") and engine.name in result, result
    assert not _misread(b_english, "#lab-results", queue)
    _shots(b_english, "result", "#lab-results")
    print(f"\nA's first run {usual_s:.1f} s; B's expected start {expected_s:.1f} s, started after {waited_s:.1f} s")
    for page in (a, b, b_english):
        page.close()
