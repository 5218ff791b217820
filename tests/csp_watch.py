"""A Playwright browser that notes every Content-Security-Policy violation its pages report.

The browser tests run under the site's real policy (labapp/settings.py); anything it blocks
(an inline script or handler, a style, a socket to another origin) is a bug the page would
have in a learner's browser, so tests/conftest.py's ``browser`` fails the test on any of them.
"""

from __future__ import annotations

from typing import Any

# Chromium's words: "Executing inline script violates the following Content Security Policy
# directive ...", "Applying inline style violates ...", "Connecting to 'ws://...' violates
# ...", older builds "Refused to execute inline script because it violates ...".
CSP_MARKS = ("Content Security Policy", "Content-Security-Policy", "Refused to ")


def is_csp_report(text: str) -> bool:
    return any(mark in text for mark in CSP_MARKS)


class CspWatchingBrowser:
    """Stands in for a Playwright ``Browser``: pages from ``new_page`` or a ``new_context``'s
    pages report their console and uncaught errors to ``violations`` when they are CSP's."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser
        self.violations: list[str] = []

    def watch(self, page: Any) -> Any:
        page.on("console", lambda message: self._note(page, str(message.text)))
        page.on("pageerror", lambda error: self._note(page, str(error)))
        return page

    def _note(self, page: Any, text: str) -> None:
        if is_csp_report(text):
            self.violations.append(f"{page.url}: {text}")

    def new_page(self, **options: Any) -> Any:
        return self.watch(self._browser.new_page(**options))

    def new_context(self, **options: Any) -> Any:
        context = self._browser.new_context(**options)
        context.on("page", self.watch)  # also fired for the context's own new_page()
        return context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._browser, name)
