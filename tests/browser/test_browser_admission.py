"""The chat admission on the real chat page (Debian's chromium through Playwright): with one slot on
the engine, a second learner's question waits in line (its position, the expected wait, a cancel
button, read out by an aria-live region), then runs and shows its wait apart from TTFT; a third,
past the full line, is refused at once with the seconds after which to ask again.

A web server of its own (Daphne, the run's database and Redis) in front of the scripted engine in
a thread of this process, whose answers take a few seconds: no real engine, about 20 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from labapp.ops import scripted
from labapp.ops.stack import components, launch
from tests import harness
from tests.settings import free_port

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

MAKE_LEARNERS = """
import json, uuid
from django.contrib.auth.models import User
from django.test import Client
cookies = []
for n in range(3):
    user = User.objects.create(username=f"line-{n}-{uuid.uuid4().hex[:8]}")
    client = Client()
    client.force_login(user)
    cookies.append(client.cookies["sessionid"].value)
print(json.dumps(cookies))
"""


@pytest.fixture
def engine_script() -> scripted.Script:
    # An answer takes ~6 s: sixty different words (counted ones, " 조각0 조각1 …", the repeat guard
    # cuts after six, and the first answer gave its slot back before the others asked).
    return scripted.Script(pieces=scripted.plain_words(60), delay_s=0.1)


@pytest.fixture
def one_slot_site(
    redis_server: str, migrated_database: None, scripted_engine: tuple[scripted.Script, str]
) -> Iterator[tuple[str, list[str]]]:
    """A web server whose chat engine (the scripted one) has one slot and a line of one; three learners."""
    _script, engine_url = scripted_engine
    port = free_port()
    env = {
        "VLLM_BASE_URL": engine_url,
        "VLLM_MODEL": "",
        "LAB_ROUTER": "false",
        "CHAT_SLOTS_PER_ENGINE": "1",
        "CHAT_LINE_MAX": "1",
        "CHAT_WAIT_MAX_S": "90",
    }
    cookies = json.loads(
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", MAKE_LEARNERS],
            cwd=ROOT,
            env=os.environ | env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    web = own_web(port, env, "web-admission")
    try:
        yield f"http://127.0.0.1:{port}", cookies
    finally:
        web.stop()


def own_web(port: int, env: dict[str, str], log_name: str) -> launch.Service:
    """The stack's own web process (``components.web``, as ``make run`` starts it) at ``port``, with ``env``
    over this process's environment, logged to ``log_name``; started and answering."""
    with override_settings(WEB_PORT=port):
        component = components.web()
    component.env = component.env | env
    service = launch.start_component(component, harness.LOG_DIR, log_name)
    service.wait_ready()
    return service


def _chat_page(browser: Any, url: str, session: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.add_cookies([{"name": "sessionid", "value": session, "url": url}])
    page = context.new_page()
    page.goto(f"{url}/chat/")
    page.wait_for_selector("#socket-state[data-state=open]", timeout=15_000)
    return page


def _ask(page: Any, question: str) -> Any:
    page.fill("textarea[name=question]", question)
    page.fill("input[name=top_k]", "0")  # no retrieval: the engine's line is what is tested
    page.click("#ask-button")
    return page.locator(".answer").last


def test_a_question_past_the_engines_slots_waits_in_line_visibly_then_runs_and_one_past_the_line_is_refused(
    one_slot_site: tuple[str, list[str]], browser: Any
) -> None:
    url, (first_cookie, second_cookie, third_cookie) = one_slot_site
    first, second, third = (_chat_page(browser, url, c) for c in (first_cookie, second_cookie, third_cookie))
    running = _ask(first, "프리필이란?")
    words = scripted.plain_words(2)
    expect(running.locator(".text")).to_contain_text(words[1].strip(), timeout=15_000)  # the engine's one slot is taken

    waiting = _ask(second, "디코드란?")
    expect(waiting).to_have_attribute("data-status", "queued", timeout=5_000)
    line = waiting.locator(".queue-state")
    expect(line).to_contain_text("대기 1번째")
    assert running.get_attribute("data-status") == "streaming"  # the slot is the first answer's, held while it streams
    assert line.get_attribute("role") == "status" and line.get_attribute("aria-live") == "polite"
    assert waiting.locator("button.stop").inner_text() == "대기 취소"
    ARTIFACTS.mkdir(exist_ok=True)
    second.screenshot(path=str(ARTIFACTS / "chat-queued.png"), full_page=True)

    refused = _ask(third, "KV 캐시란?")
    expect(refused).to_have_attribute("data-status", "refused", timeout=5_000)
    expect(refused.locator(".error")).to_contain_text("초 후에 다시 물어보세요")
    retry = refused.locator("button.retry")
    assert retry.is_visible() and retry.is_disabled() and "초 후" in retry.inner_text()
    third.screenshot(path=str(ARTIFACTS / "chat-refused.png"), full_page=True)

    # The first answer ends; the waiting one runs, and its wait is its own row, apart from TTFT.
    expect(running).to_have_attribute("data-status", "done", timeout=20_000)
    expect(waiting).to_have_attribute("data-status", "done", timeout=20_000)
    expect(line).to_contain_text("기다린 뒤 시작")
    assert "ms" in (waiting.locator("table.timing [data-k=admission_wait]").text_content() or "")
    assert "ms" in (waiting.locator("table.timing [data-k=ttft]").text_content() or "")
    assert (running.locator("table.timing [data-k=admission_wait]").text_content() or "") == "기다리지 않음"
    for page in (first, second, third):
        page.context.close()
