"""A real browser (Debian's chromium through Playwright) against the real stack."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
COMPONENTS = ["database", "redis", "chroma", "vllm", "celery", "embeddings"]


def test_every_component_is_green_on_the_status_page(full_stack: str, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page.goto(f"{full_stack}/status/", timeout=120_000)
    for key in COMPONENTS:
        row = page.locator(f"#component-{key}")
        assert row.get_attribute("class") == "ok", f"{key}: {row.inner_text()}"
        assert " ms" in row.locator(".rtt").inner_text()
    page.wait_for_selector("#ws-row[data-ok='true']", timeout=15_000)
    assert "channel layer" in page.locator("#ws-row .detail").inner_text()
    assert page.locator("#status-banner .banner").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "status-all-green.png"), full_page=True)
    page.close()


def test_the_language_switch_turns_the_site_english(full_stack: str, browser: object) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(f"{full_stack}/")
    assert page.locator("html").get_attribute("lang") == "ko"
    page.click("button[value=en]")
    page.wait_for_load_state()
    assert page.locator("html").get_attribute("lang") == "en"
    assert "Chapter 16" in page.locator("h1").inner_text()
    page.close()
