"""Chapter content loading and the pages (in-process, no outside services)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.test import Client

from labapp.chapter.services import chapter_load
from labapp.models import ChapterSection
from labapp.status import probes as status

pytestmark = pytest.mark.django_db


def test_loading_the_chapter_twice_changes_nothing_the_second_time() -> None:
    first = chapter_load()
    second = chapter_load()
    assert first.created >= 14 and first.created == ChapterSection.objects.count()
    assert (second.created, second.updated, second.removed) == (0, 0, 0)
    assert second.unchanged == first.created


def test_an_edited_file_updates_and_a_removed_file_disappears(tmp_path: Path) -> None:
    (tmp_path / "01-a.ko.md").write_text("# 가\n<!-- summary: 요약 -->\n본문\n")
    (tmp_path / "02-b.ko.md").write_text("# 나\n본문\n")
    chapter_load(directory=tmp_path)
    (tmp_path / "01-a.ko.md").write_text("# 가가\n본문\n")
    (tmp_path / "02-b.ko.md").unlink()
    report = chapter_load(directory=tmp_path)
    assert (report.updated, report.removed) == (1, 1)
    assert list(ChapterSection.objects.values_list("title", flat=True)) == ["가가"]


def test_home_is_korean_even_for_an_english_browser_until_the_switch_says_english(client: Client) -> None:
    chapter_load()
    korean = client.get("/")
    assert korean.status_code == 200
    assert "16장" in korean.content.decode() and 'lang="ko"' in korean.content.decode()
    assert 'lang="ko"' in client.get("/", HTTP_ACCEPT_LANGUAGE="en-US,en").content.decode()
    client.cookies["django_language"] = "en"  # what the language switch sets
    english = client.get("/")
    assert 'lang="en"' in english.content.decode()
    assert "Chapter 16" in english.content.decode()


def test_a_chapter_page_renders_markdown_and_escapes_html(client: Client) -> None:
    chapter_load()
    page = client.get("/chapter/prefill-decode/")
    assert page.status_code == 200
    assert "<table>" in page.content.decode()
    assert client.get("/chapter/no-such-page/").status_code == 404


def test_the_status_page_shows_a_failing_component_red_with_its_error(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> dict[str, str]:
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    def hanging() -> dict[str, str]:
        time.sleep(3)
        return {}

    monkeypatch.setattr(
        status,
        "PROBES",
        [
            status.ComponentProbe("database", "DB", status.probe_database, 5.0),
            status.ComponentProbe("redis", "Redis", broken, 5.0),
            status.ComponentProbe("vllm", "vLLM", hanging, 0.5),
            status.ComponentProbe("chroma", "Chroma", dict, 5.0, warmup=broken),
        ],
    )
    page = client.get("/status/")
    body = page.content.decode()
    assert page.status_code == 200
    assert 'id="component-database" class="ok"' in body
    assert 'id="component-redis" class="down"' in body and "꺼져 있거나" in body  # words, not the exception
    assert 'id="component-vllm" class="down"' in body
    assert "정해진 시간 안에 답하지 않았습니다" in body and "Connection refused" not in body
    assert 'id="component-chroma" class="down"' in body
    banner = client.get("/status/banner/").content.decode()
    assert "Redis" in banner and "vLLM" in banner
    data = client.get("/status.json").json()
    assert data["ok"] is False
    assert [c["ok"] for c in data["components"]] == [True, False, False, False]


def test_the_database_is_the_one_database_url_names() -> None:
    """CI runs the database tests a second time with DATABASE_URL=postgres://…: prove which one ran."""
    import os

    from django.db import connection

    expected = "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
    assert connection.vendor == expected
