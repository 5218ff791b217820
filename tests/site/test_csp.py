"""The Content-Security-Policy: every response carries it, and no page needs it loosened for scripts.

Chromium enforces it in the browser tests (tests/conftest.py's ``browser`` fails a test on
any CSP report in a page's console); these tests keep the markup clean without a browser.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

from bench.models import BenchJob
from labapp.classes import services as class_services
from labapp.models import Membership
from tests.csp_watch import CspWatchingBrowser

ROOT = Path(__file__).resolve().parents[2]
POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],  # plotly.js's run-time <style>: see settings
    "connect-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "frame-ancestors": ["'none'"],
}
DATA_SCRIPT_TYPES = ("application/json", "application/ld+json")


def policy_of(response: Any) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy", "")
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


class InlineCode(HTMLParser):
    """What in a page a strict script-src (or a style-src without 'unsafe-inline') would block."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._script: str | None = None  # the open inline <script>'s text

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        self.found += [
            f"<{tag} {name}=...>" for name, _ in attrs if name.startswith(("on", "hx-on")) or name == "style"
        ]  # hx-on: htmx evals it
        self.found += [f"<{tag} {name}={value}>" for name, value in attrs if (value or "").startswith("javascript:")]
        if tag == "style":
            self.found.append("<style> block")
        if tag == "script" and "src" not in names and names.get("type") not in DATA_SCRIPT_TYPES:
            self._script = ""

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            if self._script.strip():
                self.found.append(f"<script>{self._script.strip()[:60]}</script>")
            self._script = None


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    return parser.found


def test_the_finder_sees_inline_scripts_handlers_and_styles() -> None:
    page = (
        '<script>alert(1)</script><script src="/static/x.js"></script>'
        '<script id="d" type="application/json">{"a": 1}</script>'
        '<input oninput="go()" hx-on:click="go()"><div style="color: red"></div>'
        '<a href="javascript:go()">x</a><style>p{}</style>'
    )
    assert inline_code(page) == [
        "<script>alert(1)</script>",
        "<input oninput=...>",
        "<input hx-on:click=...>",
        "<div style=...>",
        "<a href=javascript:go()>",
        "<style> block",
    ]


@pytest.mark.parametrize("path", sorted((ROOT / "templates").rglob("*.html")), ids=lambda p: p.name)
def test_no_template_has_inline_code(path: Path) -> None:
    source = re.sub(r"{%.*?%}|{{.*?}}|{#.*?#}", "", path.read_text(), flags=re.S)  # the markup, not the tags
    assert inline_code(source) == [], path.relative_to(ROOT)


LOCAL_PAGES = [
    "/",
    "/chapter/prefill-decode/",
    "/chapter/estimator/",
    "/chapter/kv-cache/",
    "/labs/",
    "/labs/1/",
    "/demo/",
    "/bench/",
    "/bench/{job}/",
    "/bench/{job}/export.csv",
    "/bench/{job}/export.json",
    "/documents/",
    "/documents/rows/",
    "/chat/history/",
    "/healthz",
    "/no-such-page/",
]


@pytest.mark.parametrize("path", LOCAL_PAGES)
def test_every_local_page_carries_the_policy_and_runs_no_inline_code(
    path: str, learner_work: tuple[User, BenchJob], settings: Any
) -> None:
    settings.LAB_MODE = "local"
    learner, job = learner_work
    client = Client()
    client.force_login(learner)
    response = client.get(path.format(job=job.pk))
    assert response.status_code in (200, 404), response.status_code
    assert policy_of(response) == POLICY
    if response["Content-Type"].startswith("text/html"):
        assert inline_code(response.content.decode()) == []


@pytest.mark.django_db
def test_every_class_page_carries_the_policy_signed_in_or_not(
    learner_work: tuple[User, BenchJob], settings: Any
) -> None:
    settings.LAB_MODE = "class"
    learner, job = learner_work
    instructor = User.objects.create_user("csp-instructor")
    room = class_services.classroom_create(name="CSP반", instructor=instructor)
    Membership.objects.create(classroom=room, user=learner)
    teacher = Client()
    teacher.force_login(instructor)
    base = f"/classes/{room.pk}"
    pages = [f"{base}/", f"{base}/results/", f"{base}/results.csv", f"{base}/charts.json"]
    pages += [f"{base}/learners/{learner.pk}/", f"{base}/learners/{learner.pk}/jobs/{job.pk}/", "/classes/"]
    anonymous = ["/accounts/login/", "/accounts/signup/", "/admin/login/", "/classes/", "/bench/"]
    responses = [teacher.get(page) for page in pages] + [Client().get(page) for page in anonymous]
    assert [r.status_code for r in responses] == [200] * (len(pages) + 3) + [302, 302]  # sent to sign in
    assert all(policy_of(response) == POLICY for response in responses)
    html = [r.content.decode() for r in responses if r["Content-Type"].startswith("text/html")]
    assert [found for page in html if (found := inline_code(page))] == []


def test_the_policy_is_django_csps_middleware_with_the_settings_dict() -> None:
    assert "csp.middleware.CSPMiddleware" in django_settings.MIDDLEWARE
    assert {k: list(v) for k, v in django_settings.CONTENT_SECURITY_POLICY["DIRECTIVES"].items()} == POLICY


class _Page:
    url = "http://lab.test/demo/"

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def on(self, event: str, handler: Any) -> None:
        self.handlers[event] = handler


class _Context(_Page):
    def new_page(self) -> _Page:
        page = _Page()
        self.handlers["page"](page)
        return page


class _Browser:
    version = "150"

    def new_page(self, **options: Any) -> _Page:
        return _Page()

    def new_context(self, **options: Any) -> _Context:
        return _Context()


def test_the_browser_fixture_notes_what_chromium_says_about_csp_and_nothing_else() -> None:
    watching = CspWatchingBrowser(_Browser())
    page = watching.new_page(viewport={"width": 800, "height": 600})
    said = (
        "Executing inline event handler violates the following Content Security Policy directive 'script-src 'self''."
    )
    page.handlers["console"](SimpleNamespace(text=said))
    page.handlers["console"](SimpleNamespace(text="WebSocket connection to 'ws://lab.test/ws/chat/' failed"))
    other = watching.new_context().new_page()
    other.handlers["console"](SimpleNamespace(text="Refused to load the image 'http://x/a.png' because it violates"))
    other.handlers["pageerror"](
        Exception(
            "EvalError: Evaluating a string as JavaScript violates the following Content Security Policy directive"
        )
    )
    assert [v.split(": ", 1)[1][:20] for v in watching.violations] == [
        "Executing inline eve", "Refused to load the ", "EvalError: Evaluatin"
    ]  # fmt: skip
    assert watching.version == "150"  # everything else is the browser's own
