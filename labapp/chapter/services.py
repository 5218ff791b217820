"""Writes of the lab domain (services: <entity>_<action>)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from labapp.models import ChapterSection

CONTENT_DIR = Path(__file__).resolve().parent / "content" / "chapter"
_NAME = re.compile(r"^(?P<position>\d\d)-(?P<slug>[a-z0-9-]+)\.(?P<language>[a-z]{2})\.md$")
_SUMMARY = re.compile(r"^<!--\s*summary:\s*(?P<summary>.*?)\s*-->$")


@dataclass(frozen=True)
class LoadReport:
    created: int
    updated: int
    unchanged: int
    removed: int


def parse_section(path: Path) -> dict[str, object]:
    match = _NAME.match(path.name)
    if not match:
        raise ValueError(f"{path.name}: expected NN-slug.LANG.md")
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise ValueError(f"{path.name}: the first line must be '# Title'")
    summary = ""
    body_start = 1
    if len(lines) > 1 and (found := _SUMMARY.match(lines[1].strip())):
        summary = found["summary"]
        body_start = 2
    return {
        "slug": match["slug"],
        "language": match["language"],
        "position": int(match["position"]),
        "title": lines[0][2:].strip(),
        "summary": summary,
        "body": "\n".join(lines[body_start:]).strip() + "\n",
        "content_hash": hashlib.sha256(text.encode()).hexdigest(),
    }


@transaction.atomic
def chapter_load(*, directory: Path = CONTENT_DIR) -> LoadReport:
    """Make the ChapterSection rows match the Markdown files; idempotent."""
    created = updated = unchanged = 0
    seen: set[tuple[str, str]] = set()
    for path in sorted(directory.glob("*.md")):
        fields = parse_section(path)
        key = (str(fields["slug"]), str(fields["language"]))
        seen.add(key)
        section = ChapterSection.objects.filter(slug=key[0], language=key[1]).first()
        if section is None:
            ChapterSection.objects.create(**fields)
            created += 1
        elif section.content_hash != fields["content_hash"]:
            for name, value in fields.items():
                setattr(section, name, value)
            section.save()
            updated += 1
        else:
            unchanged += 1
    stale = [s.pk for s in ChapterSection.objects.all() if (s.slug, s.language) not in seen]
    ChapterSection.objects.filter(pk__in=stale).delete()
    return LoadReport(created, updated, unchanged, len(stale))
