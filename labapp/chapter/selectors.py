"""Reads of the chapter: a section or all of them in the reader's language, Korean where it has none."""

from __future__ import annotations

from labapp.models import ChapterSection

FALLBACK_LANGUAGE = "ko"  # the chapter is written in Korean; other languages may lack a page


def sections_in(language: str) -> list[ChapterSection]:
    sections = list(ChapterSection.objects.filter(language=language))
    return sections or list(ChapterSection.objects.filter(language=FALLBACK_LANGUAGE))


def section_in(slug: str, language: str) -> ChapterSection | None:
    return (
        ChapterSection.objects.filter(slug=slug, language=language).first()
        or ChapterSection.objects.filter(slug=slug, language=FALLBACK_LANGUAGE).first()
    )


def neighbours(sections: list[ChapterSection], slug: str) -> tuple[ChapterSection | None, ChapterSection | None]:
    """The sections just before and just after ``slug`` in reading order (None past either end, and both
    None for a page shown in Korean among sections of another language)."""
    slugs = [section.slug for section in sections]
    if slug not in slugs:
        return None, None
    i = slugs.index(slug)
    return (sections[i - 1] if i > 0 else None), (sections[i + 1] if i + 1 < len(sections) else None)
