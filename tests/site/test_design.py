"""The site's design system: readable tables, a first step on the home page, previous/next through the
chapter, a favicon, and landmarks a screen reader can tell apart (axe-core's landmark-unique rule)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.test import Client
from django.urls import reverse
from django.utils import translation

from labapp.chapter.selectors import neighbours, sections_in
from labapp.chapter.services import chapter_load
from labapp.labs.catalog import LABS
from tests.site import test_korean

ROOT = Path(__file__).resolve().parents[2]
STYLESHEET = ROOT / "labapp" / "static" / "lab" / "lab.css"
FAVICON = "lab/favicon.svg"
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})
# The roles a landmark takes from its tag (a <section> or <form> only when it has a name, an <aside> always).
TAG_ROLES = {"nav": "navigation", "aside": "complementary", "section": "region", "form": "form"}
NAMED_ONLY = frozenset({"section", "form"})
LANDMARK_ROLES = frozenset({"navigation", "complementary", "region", "form", "search"})

# The walk of every page, with its world of real objects, is test_korean's (one list of the site's pages).
measured = test_korean.measured
readings = test_korean.readings
world = test_korean.world
stubbed_status = test_korean.stubbed_status


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""


@dataclass
class _Tree(HTMLParser):
    """Every element with its attributes and its text (its descendants' text too)."""

    elements: list[Element] = field(default_factory=list)
    _open: list[Element] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):  # close up to the matching tag (lenient, as browsers are)
            if self._open[i].tag == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text += data


def tree(html: str) -> list[Element]:
    parser = _Tree()
    parser.feed(html)
    return parser.elements


def accessible_name(element: Element, by_id: dict[str, Element]) -> str:
    if element.attrs.get("aria-labelledby"):
        return " ".join(" ".join(by_id[i].text.split()) for i in element.attrs["aria-labelledby"].split() if i in by_id)
    return " ".join(element.attrs.get("aria-label", "").split())


def landmarks(html: str) -> list[tuple[str, str, str]]:
    """(role, accessible name, tag) of each landmark but the page's one banner, main and contentinfo."""
    elements = tree(html)
    by_id = {e.attrs["id"]: e for e in elements if "id" in e.attrs}
    found = []
    for element in elements:
        role = element.attrs.get("role") or TAG_ROLES.get(element.tag, "")
        if role not in LANDMARK_ROLES:
            continue
        name = accessible_name(element, by_id)
        if element.tag in NAMED_ONLY and "role" not in element.attrs and not name:
            continue  # an unnamed <section> or <form> is no landmark
        found.append((role, name, element.tag))
    return found


def landmark_faults(html: str) -> list[str]:
    """Navigation and complementary landmarks without a name, and any two landmarks of one role sharing a name."""
    marks = landmarks(html)
    faults = [f"<{tag}> ({role}) has no aria-label" for role, name, tag in marks if not name]
    counted = Counter((role, name) for role, name, _ in marks)
    faults += [f"{n} {role} landmarks named {name!r}" for (role, name), n in counted.items() if n > 1]
    return faults


def _client(language: str = "ko") -> Client:
    client = Client()
    client.cookies["django_language"] = language
    return client


# --- 1. tables ------------------------------------------------------------------------------


def _rules(css: str) -> list[tuple[list[str], str]]:
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"@media[^{]*\{((?:[^{}]*\{[^{}]*\})*)\s*\}", r"\1", css)  # a media block's rules count too
    return [([s.strip() for s in sel.split(",")], body) for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)]


def test_every_table_cell_on_the_site_has_padding_in_the_stylesheet() -> None:
    """Not only tables marked .table: the lab list, the history tables, the chapter's markdown tables."""
    padded = {sel for selectors, body in _rules(STYLESHEET.read_text()) if "padding" in body for sel in selectors}
    assert {"th", "td"} <= padded or {"table th", "table td"} <= padded, "no padding rule for every table's cells"
    collapsed = [body for selectors, body in _rules(STYLESHEET.read_text()) if "table" in selectors]
    assert any("border-collapse" in body for body in collapsed), "cells' borders are not collapsed into one line"


def test_no_table_sets_its_own_style_inline_to_override_the_padding() -> None:
    for template in (ROOT / "templates").rglob("*.html"):
        assert not re.search(r"<(table|thead|tbody|tr|th|td)\b[^>]*\bstyle=", template.read_text()), template


# --- 2. where to start ----------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("language", "heading"), [("ko", "여기서 시작"), ("en", "Start here")])
def test_the_home_page_tells_a_first_time_learner_to_read_the_first_page_then_run_lab_1(
    language: str, heading: str
) -> None:
    chapter_load()
    html = _client(language).get("/").content.decode()
    card = re.search(r'<section[^>]*\bid="start-here".*?</section>', html, flags=re.S)
    assert card is not None, "no start-here card"
    elements = tree(card.group(0))
    assert heading in elements[0].text
    first = sections_in(language)[0]
    hrefs = [e.attrs["href"] for e in elements if e.tag == "a"]
    first_page, lab_1 = reverse("chapter_section", args=[first.slug]), reverse("lab_page", args=[min(LABS)])
    assert first_page in hrefs and lab_1 in hrefs
    assert hrefs.index(first_page) < hrefs.index(lab_1), "the chapter's first page comes before Lab 1"
    assert first.title in elements[0].text


# --- 3. previous and next -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["ko", "en"])
def test_every_chapter_page_links_its_previous_and_next_section_in_order(language: str) -> None:
    chapter_load()
    sections = sections_in(language)
    assert len(sections) > 2
    client = _client(language)
    for i, section in enumerate(sections):
        elements = tree(client.get(reverse("chapter_section", args=[section.slug])).content.decode())
        around = {"prev": sections[i - 1] if i > 0 else None, "next": next(iter(sections[i + 1 :]), None)}
        for rel, neighbour in around.items():
            links = [e for e in elements if e.tag == "a" and e.attrs.get("rel") == rel]
            if neighbour is None:
                assert not links, (section.slug, rel)
                continue
            assert [e.attrs["href"] for e in links] == [reverse("chapter_section", args=[neighbour.slug])]
            # The link's own words are its name (an aria-label that differs from them fails axe's
            # label-content-name-mismatch, which the browser story runs).
            assert "aria-label" not in links[0].attrs and neighbour.title in links[0].text, (section.slug, rel)


@pytest.mark.django_db
def test_the_previous_and_next_labels_say_which_way_in_the_readers_language() -> None:
    chapter_load()
    slug = sections_in("ko")[1].slug
    for language, words in (("ko", ("이전", "다음")), ("en", ("Previous", "Next"))):
        with translation.override(language):
            elements = tree(_client(language).get(reverse("chapter_section", args=[slug])).content.decode())
        labels = {e.attrs["rel"]: " ".join(e.text.split()) for e in elements if e.tag == "a" and "rel" in e.attrs}
        assert labels["prev"].startswith("← " + words[0]) and labels["next"].startswith(words[1]), labels


# --- 4. favicon -----------------------------------------------------------------------------


def test_the_favicon_is_a_static_svg() -> None:
    path = finders.find(FAVICON)
    assert path is not None
    assert Path(str(path)).read_text().lstrip().startswith("<svg")


@pytest.mark.django_db
def test_every_page_links_the_favicon_and_favicon_ico_leads_to_it() -> None:
    elements = tree(_client().get("/").content.decode())
    icons = [e for e in elements if e.tag == "link" and "icon" in e.attrs.get("rel", "").split()]
    assert [(e.attrs["href"], e.attrs.get("type")) for e in icons] == [(static(FAVICON), "image/svg+xml")]
    response = _client().get("/favicon.ico")
    assert response.status_code in (301, 302) and response["Location"] == static(FAVICON)
    served = _client().get(static(FAVICON))
    assert served.status_code == 200 and served["Content-Type"].startswith("image/svg+xml")


# --- 5. landmarks ---------------------------------------------------------------------------


def test_the_landmark_check_finds_unnamed_and_twice_named_landmarks() -> None:
    page = (
        '<header><nav aria-label="사이트"></nav></header><nav></nav><nav aria-label="사이트"></nav>'
        '<section aria-labelledby="h"><h2 id="h">가</h2></section><section><h2>나</h2></section>'
        '<section aria-labelledby="g"><h2 id="g">가</h2></section><aside role="note"></aside><aside></aside>'
    )
    assert sorted(landmark_faults(page)) == sorted(
        [
            "<nav> (navigation) has no aria-label",
            "<aside> (complementary) has no aria-label",
            "2 navigation landmarks named '사이트'",
            "2 region landmarks named '가'",
        ]
    )


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["ko", "en"])
def test_every_page_names_each_landmark_and_no_two_share_a_name(
    world: test_korean.World, stubbed_status: None, language: str
) -> None:
    found = {}
    for who, url in test_korean._urls(world):
        with translation.override(language):
            response = test_korean._client(who, language).get(url)
        if response["Content-Type"].startswith("text/html") and (faults := landmark_faults(response.content.decode())):
            found[url] = faults
    assert not found, "\n".join(f"{url}: {faults}" for url, faults in found.items())


@pytest.mark.django_db
def test_a_page_shown_in_korean_among_sections_of_another_language_has_no_neighbours() -> None:
    chapter_load()
    english = sections_in("en")
    assert neighbours(english, "no-such-slug") == (None, None)
    assert neighbours(english, english[0].slug) == (None, english[1])
