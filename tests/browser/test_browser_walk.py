"""A learner's walk in Chromium over the real stack, looked at as they would see it.

Labs 1, 4 and 6 each with a prediction, the chat, the team demo and the compare page;
every page is then shown at 1280 and 1920 wide, in Korean and in English, saved under
``test-artifacts/walk/``, and read: a Korean page may show no English word outside the
reviewed technical terms (the checker of ``tests/site/test_korean.py``), an English page
no Hangul. What the model wrote, the question typed and the chapter's own prose are the
learner's or the chapter's content and are taken out first.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.site.test_korean import english_words, hangul, shown

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "walk"
WIDTHS = (1280, 1920)
# Content, not the interface: the chapter's prose, the model's answer and the question, the
# retrieved passages and their titles, the prompt as sent, the job's raw settings.
CONTENT = (
    "details.chapter",
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
DROP_CONTENT = "sel => { for (const s of sel) document.querySelectorAll(s).forEach(n => n.remove()); }"


def _run_lab(page: object, site: str, number: int) -> None:
    """The lab's run button with a prediction typed in; waits for the checks (the page reloads itself)."""
    page.goto(f"{site}/labs/{number}/")  # type: ignore[attr-defined]
    box = page.locator("#prediction")  # type: ignore[attr-defined]
    if not box.input_value():
        box.fill("2.5")
    page.click("#run-lab")  # type: ignore[attr-defined]
    page.wait_for_selector("#job-state")  # type: ignore[attr-defined]
    # The real worker on the real engine, at the lab's minimum settings (tests/settings.py: the test
    # servers' run buttons); a default run takes about 4 min on two quiet cores.
    deadline = time.monotonic() + 720
    while not page.locator("#lab-checks").count():  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise AssertionError(f"lab {number} did not finish: " + page.locator("#lab-run").inner_text())  # type: ignore[attr-defined]
        page.wait_for_timeout(500)  # type: ignore[attr-defined]
    comparison = page.locator("#lab-results .prediction")  # type: ignore[attr-defined]
    assert comparison.count() == 1, f"lab {number}: the prediction is not shown beside the measurement"
    assert comparison.get_attribute("data-predicted")


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


def _looked_at(page: object, name: str, language: str) -> dict[str, str] | set[str]:
    """Screenshots of the page at both widths; what reads wrong for ``language`` (empty: nothing)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1080 if width == 1920 else 900})  # type: ignore[attr-defined]
        page.wait_for_timeout(600)  # type: ignore[attr-defined]  # charts resize to the new width
        page.screenshot(path=str(ARTIFACTS / f"{name}-{language}-{width}.png"), full_page=True)  # type: ignore[attr-defined]
    page.evaluate(DROP_CONTENT, list(CONTENT))  # type: ignore[attr-defined]
    html = str(page.content())  # type: ignore[attr-defined]
    # The JSON blocks are data; what the charts drew from them is read from their SVG below.
    html = re.sub(r'<script type="application/json"[^>]*>.*?</script>', "", html, flags=re.S)
    texts = shown(name, html.encode(), "text/html").texts
    texts += [str(t) for t in page.eval_on_selector_all(".js-plotly-plot text", "els => els.map(e => e.textContent)")]  # type: ignore[attr-defined]
    return english_words(texts) if language == "ko" else hangul(texts)


def _pages(site: str, chat: str, demo: str, compare: str) -> Iterator[tuple[str, str]]:
    for number in (1, 4, 6):
        yield f"lab{number}", f"{site}/labs/{number}/"
    yield "chat", chat
    yield "demo", demo
    yield "compare", compare


@pytest.mark.timeout(1800)  # three lab runs on the real engine at their minimum settings
def test_a_learner_predicts_runs_labs_1_4_6_asks_demos_compares_and_every_page_reads_in_its_language(
    full_stack: str, chapter_indexed: None, browser: object
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page = context.new_page()
    for number in (1, 4, 6):
        _run_lab(page, full_stack, number)
    chat = _ask(page, full_stack)
    demo = _sweep_demo(page, full_stack)
    ids = _job_ids(page, full_stack)[:2]
    assert len(ids) == 2
    compare = f"{full_stack}/bench/compare/?ids={ids[0]}&ids={ids[1]}"
    wrong: dict[str, object] = {}
    for language in ("ko", "en"):
        page.goto(f"{full_stack}/")
        _switch(page, language)
        for name, url in _pages(full_stack, chat, demo, compare):
            page.goto(url)
            page.wait_for_load_state("networkidle")
            if found := _looked_at(page, name, language):
                wrong[f"{name} ({language})"] = found
    _switch(page, "ko")
    context.close()
    assert not wrong, "\n".join(f"{where}: {found}" for where, found in wrong.items())
