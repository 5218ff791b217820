"""A web process killed while it streams an answer, on the real chat page (Debian's chromium through
Playwright): the card says the connection was cut and keeps the text it showed, offers "ask again" once the
socket is back (on the web process started again), and the answer's row is saved stopped with the text its
process had written (``rag.keeper``) and a notice that reads in Korean and English.

A Daphne of its own (the run's file database and Redis) in front of the scripted engine in a thread of this
process, killed with SIGKILL: nothing in it gets to save anything. About 30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from labapp.ops import scripted
from labapp.ops.stack import launch
from rag import keeper
from tests.browser.test_browser_admission import MAKE_LEARNERS, _ask, _chat_page, own_web
from tests.settings import free_port

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "chat-cut"


@pytest.fixture
def engine_script() -> scripted.Script:
    # An answer takes ~10 s: a hundred different words, a tenth of a second apart.
    return scripted.Script(pieces=scripted.plain_words(100), delay_s=0.1)


@dataclass
class Site:
    """The stack's own web process on a fixed port, which the test can kill (SIGKILL) and start again."""

    env: dict[str, str]
    port: int
    service: launch.Service | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.service = own_web(self.port, self.env, "web-cut")

    def kill(self) -> None:
        assert self.service is not None
        self.service.kill()


@pytest.fixture
def site(
    redis_server: str, shared_database: None, scripted_engine: tuple[scripted.Script, str]
) -> Iterator[tuple[Site, str]]:
    _script, engine_url = scripted_engine
    env = {"VLLM_BASE_URL": engine_url, "VLLM_MODEL": "", "LAB_ROUTER": "false"}
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", MAKE_LEARNERS],
        cwd=ROOT,
        env=os.environ | env,
        check=True,
        capture_output=True,
    )
    cookie = json.loads(made.stdout.decode().strip().splitlines()[-1])[0]
    web = Site(env, free_port())
    web.start()
    try:
        yield web, cookie
    finally:
        if web.service is not None:
            web.service.stop()


def _row(answer_id: int) -> Any:
    from rag.models import Answer

    return Answer.objects.get(pk=answer_id)


def _shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 1920):
        page.set_viewport_size({"width": width, "height": 1000})
        page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)


def test_an_answer_cut_by_a_killed_web_process_is_kept_on_the_page_asked_again_and_saved_stopped(
    site: tuple[Site, str], browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    web, cookie = site
    monkeypatch.setenv(
        "DJANGO_ALLOW_ASYNC_UNSAFE", "true"
    )  # rows read beside Playwright's loop (its web started before)
    page = _chat_page(browser, web.url, cookie)
    card = _ask(page, "프리필이란?")
    words = scripted.plain_words(5)
    expect(card.locator(".text")).to_contain_text(words[4].strip(), timeout=15_000)
    answer_id = int(card.get_attribute("data-answer-id") or 0)

    web.kill()  # mid-answer: the process saves nothing on its way out
    killed_at = time.monotonic()
    expect(card).to_have_attribute("data-status", "cut", timeout=10_000)
    shown = card.locator(".text").inner_text()
    assert words[4].strip() in shown  # the text the page showed stays
    expect(card.locator(".error")).to_contain_text("연결이 끊겼습니다")
    again = card.locator("button.retry")
    assert again.is_visible() and again.inner_text() == "다시 묻기" and not card.locator("button.stop").is_visible()
    _shoot(page, "cut-ko")

    web.start()  # chat.js opens its socket again, 2 s apart
    page.wait_for_selector("#socket-state[data-state=open]", timeout=15_000)
    again.click()
    answers = page.locator(".answer")
    expect(answers).to_have_count(2)
    asked_again = answers.last
    assert card.locator("xpath=..").get_attribute("class") == "turn side-by-side"  # beside the cut one
    expect(asked_again).to_have_attribute("data-status", "done", timeout=30_000)

    # Saved stopped by the next reader of the conversation once its stamp is older than ``ORPHAN_S``
    # (with a class server's worker: by its timer, whoever reads it).
    time.sleep(max(0.0, keeper.ORPHAN_S + 1 - (time.monotonic() - killed_at)))
    page.reload()
    saved_card = page.locator(f".answer[data-answer-id='{answer_id}']")
    expect(saved_card).to_have_attribute("data-status", "stopped")
    row = _row(answer_id)
    saved = row.text.strip()  # what its process had written: the page's text, or all but its last moment
    assert row.status == "stopped" and saved and (shown.strip().startswith(saved) or saved.startswith(shown.strip()))
    expect(saved_card.locator(".notices")).to_contain_text("웹 프로세스가 답변 도중 멈췄습니다")
    # Its timings as far as they came (its keeper wrote them with the text): TTFT and the sources, no estimate.
    assert row.timings["client"]["ttft_ms"] and row.timings["estimate_state"] == "cut" and row.prompt
    ttft = saved_card.locator('.keynums [data-k="prefill"]')
    assert ttft.inner_text().endswith("ms"), ttft.inner_text()
    _shoot(page, "saved-ko")
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": web.url}])
    page.reload()
    expect(saved_card.locator(".notices")).to_contain_text("The web process sending this answer stopped")
    _shoot(page, "saved-en")
    page.context.close()
