"""The chapter widgets in a real browser (Debian's chromium through Playwright), keyboard first.

Needs only the web server (and its Redis): no engine. The learners are made by a
`manage.py shell` child process, because once Playwright runs, this process's main
thread may no longer use the ORM.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rag.estimator import gen_seconds

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

MAKE_LEARNERS = """
import json, uuid
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from bench.models import BenchJob
from rag.vllm import client as vllm_client
cookies = {}
for name, measured in (("unmeasured", False), ("measured", True)):
    user = User.objects.create(username=f"widgets-{name}-{uuid.uuid4().hex[:8]}")
    if measured:
        BenchJob.objects.create(
            owner=user, kind="speed", lab=1, status="done", engine_url=vllm_client.base_url(),
            finished_at=timezone.now(),
            results={"prefill_speed": 600.0, "decode_speed": 25.0, "cells": []},
        )
    client = Client()
    client.force_login(user)
    cookies[name] = client.cookies["sessionid"].value
print(json.dumps(cookies))
"""


@pytest.fixture(scope="module")
def learner_sessions(migrated_database: None) -> dict[str, str]:
    """Session cookies of two new learners on the web server's database: one without and
    one with a finished Lab 1 speed probe (600 and 25 tokens/s)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", MAKE_LEARNERS],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    cookies: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return cookies


def new_page_as(browser: Any, web_server: str, session: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.add_cookies([{"name": "sessionid", "value": session, "url": web_server}])
    return context.new_page()


def type_into(page: Any, selector: str, text: str) -> None:
    page.focus(selector)
    page.keyboard.press("Control+A")
    page.keyboard.type(text)


def result(page: Any) -> tuple[str, str, str]:
    return (
        page.inner_text("#est-prefill"),
        page.inner_text("#est-decode"),
        page.inner_text("#est-total"),
    )


def test_a_learner_types_into_the_estimator_and_fills_in_their_own_speeds(
    web_server: str, learner_sessions: dict[str, str], browser: object
) -> None:
    page = new_page_as(browser, web_server, learner_sessions["unmeasured"])
    page.goto(f"{web_server}/chapter/estimator/")
    page.wait_for_selector("#estimator[data-ready=true]")

    # The example table is filled in by the script, as gen_seconds gives it.
    rows = page.locator("#est-examples tbody tr")
    computed = [[rows.nth(i).locator(f"[data-k={k}]").inner_text() for k in ("prefill", "decode")] for i in range(3)]
    assert computed == [["0.1", "1.0"], ["1.5", "1.0"], ["0.1", "10.0"]]

    # The learner types the second row's shape at the example speeds.
    type_into(page, "#est-prompt", "1500")
    type_into(page, "#est-output", "50")
    type_into(page, "#est-prefill-speed", "1000")
    type_into(page, "#est-decode-speed", "50")
    assert result(page) == ("1.5", "1.0", "2.5")
    assert "20" in page.inner_text("#est-ratio")
    assert page.get_attribute("#est-result", "aria-live") == "polite"

    # A zero speed or a negative count shows a message instead of a result.
    type_into(page, "#est-decode-speed", "0")
    assert page.is_visible("#est-error") and not page.is_visible("#est-values")
    assert page.get_attribute("#est-decode-speed", "aria-invalid") == "true"
    type_into(page, "#est-decode-speed", "50")
    type_into(page, "#est-output", "-5")
    assert page.is_visible("#est-error") and "0" in page.inner_text("#est-error")
    type_into(page, "#est-output", "50")
    assert not page.is_visible("#est-error") and result(page) == ("1.5", "1.0", "2.5")

    # The third row, loaded from the keyboard.
    page.locator("#est-examples tbody tr").nth(2).locator("button.load-row").focus()
    page.keyboard.press("Enter")
    assert result(page) == ("0.1", "10.0", "10.1")
    assert page.input_value("#est-output") == "500"

    # Without a finished speed probe the button is off and says where to measure.
    assert page.is_disabled("#est-my-speeds")
    assert page.locator("#est-my-speeds-note a[href='/bench/']").count() == 1

    # The script rounds exactly as Python's round(x, 2) does, halves included.
    rng = random.Random(16)
    cases: list[list[float]] = [
        [125, 375, 1000, 1000],
        [1, 3, 8, 8],
        [1, 3, 3, 7],
        [1625, 1, 10000, 8],
        [0, 0, 0.5, 0.25],
    ]
    cases += [
        [rng.randint(0, 5000), rng.randint(0, 2000), rng.uniform(1, 3000), rng.uniform(0.5, 200)] for _ in range(300)
    ]
    from_script = page.evaluate("cases => cases.map(c => window.labWidgets.genSeconds(...c))", cases)
    assert [tuple(pair) for pair in from_script] == [gen_seconds(int(a), int(b), c, d) for a, b, c, d in cases]

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "widget-estimator-no-speeds.png"), full_page=True)
    page.context.close()

    # A learner with a finished Lab 1 probe fills in their own speeds from the keyboard.
    page = new_page_as(browser, web_server, learner_sessions["measured"])
    page.goto(f"{web_server}/chapter/estimator/")
    page.wait_for_selector("#estimator[data-ready=true]")
    assert not page.is_disabled("#est-my-speeds")
    assert "600.0" in page.inner_text("#est-my-speeds-note")
    type_into(page, "#est-prompt", "1500")
    page.focus("#est-my-speeds")
    page.keyboard.press("Space")
    assert (page.input_value("#est-prefill-speed"), page.input_value("#est-decode-speed")) == ("600", "25")
    assert result(page) == ("2.5", "2.0", "4.5")
    assert "24" in page.inner_text("#est-ratio")
    assert page.get_attribute("#estimator", "data-source") == "mine"
    page.locator("#estimator").screenshot(path=str(ARTIFACTS / "widget-estimator-my-speeds.png"))
    page.context.close()


def test_a_learner_steps_the_kv_cache_with_the_keyboard_and_plays_it_to_the_end(
    web_server: str, learner_sessions: dict[str, str], browser: object
) -> None:
    page = new_page_as(browser, web_server, learner_sessions["unmeasured"])
    page.goto(f"{web_server}/chapter/kv-cache/")
    page.wait_for_selector("#kv-stepper[data-ready=true]")
    cells = page.locator("#kv-cache .kv-cell:visible")
    assert cells.count() == 0
    assert page.inner_text("#kv-count") == "캐시 칸: 0 (입력 0 + 출력 0)"

    page.focus("#kv-reset")
    page.keyboard.press("Tab")  # from "처음" to "한 단계"
    assert page.evaluate("document.activeElement.id") == "kv-step"
    assert page.evaluate("document.activeElement.matches(':focus-visible')")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    page.keyboard.press("Enter")
    assert cells.count() == 4
    assert page.inner_text("#kv-count") == "캐시 칸: 4 (입력 4 + 출력 0)"
    assert "프리필" in page.inner_text("#kv-explain")
    for expected, key in ((5, "Enter"), (6, "Space"), (7, "Space")):
        page.keyboard.press(key)
        assert cells.count() == expected
    assert page.inner_text("#kv-count") == "캐시 칸: 7 (입력 4 + 출력 3)"
    assert [cells.nth(i).get_attribute("class") for i in range(7)] == ["kv-cell kv-prompt"] * 4 + [
        "kv-cell kv-answer"
    ] * 2 + ["kv-cell kv-answer fresh"]
    assert cells.nth(6).locator(".token").inner_text() == "입니다"
    page.keyboard.press("Enter")  # past the last step nothing changes and focus stays
    assert cells.count() == 7
    assert page.evaluate("document.activeElement.id") == "kv-step"
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#kv-stepper").screenshot(path=str(ARTIFACTS / "widget-kv-stepper.png"))

    page.focus("#kv-reset")
    page.keyboard.press("Enter")
    assert cells.count() == 0

    # Play runs the steps by itself and stops at the end.
    page.focus("#kv-play")
    page.keyboard.press("Space")
    assert page.inner_text("#kv-play") == "멈춤"
    page.wait_for_selector("#kv-stepper[data-playing=false][data-cells='7']", timeout=15_000)
    assert page.inner_text("#kv-play") == "재생"
    assert page.get_attribute("#kv-status", "aria-live") == "polite"

    # The language switch turns the stepper's labels and its live text English.
    page.click("button[value=en]")
    page.wait_for_selector("html[lang=en] #kv-stepper[data-ready=true]")
    assert page.inner_text("#kv-play") == "Play"
    page.focus("#kv-step")
    page.keyboard.press("Enter")
    assert page.inner_text("#kv-count") == "Cache cells: 4 (input 4 + output 0)"
    assert page.inner_text("#kv-explain").startswith("Prefill:")
    page.locator("#kv-stepper").screenshot(path=str(ARTIFACTS / "widget-kv-stepper-en.png"))
    page.context.close()
