"""The site's Content-Security-Policy in Chromium: it blocks inline code, and the ``browser``
fixture hears about it (so every other browser test fails on a page the policy breaks)."""

from __future__ import annotations

import pytest
from csp.utils import build_policy

from tests.csp_watch import CspWatchingBrowser

pytestmark = [pytest.mark.browser]

PAGE = '<!doctype html><p>x</p><script>document.title = "ran"</script><button onclick="document.title = 1">b</button>'


def test_the_policy_blocks_an_inline_script_and_handler_and_the_fixture_hears_both(browser: object) -> None:
    assert isinstance(browser, CspWatchingBrowser)
    header = build_policy()  # what CSPMiddleware sends, from settings.CONTENT_SECURITY_POLICY
    for page in (browser.new_page(), browser.new_context().new_page()):
        page.route(
            "http://lab.test/**",
            lambda route: route.fulfill(
                status=200, content_type="text/html", headers={"Content-Security-Policy": header}, body=PAGE
            ),
        )
        page.goto("http://lab.test/")
        page.click("button")
        page.wait_for_timeout(300)
        assert page.title() == ""  # neither ran
        page.close()
    assert len(browser.violations) == 4, browser.violations
    assert sum("inline event handler" in v for v in browser.violations) == 2
    browser.violations.clear()  # expected here: the fixture would fail any other test on them
