"""Chapter pages: the home page and each section, with its widget; the site's icon."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils import translation
from django.views.decorators.http import require_GET

from bench import engines
from bench.selectors import learner_speeds
from labapp.chapter.selectors import neighbours, section_in, sections_in

# Sections that carry an interactive widget under their text (slug -> template).
SECTION_WIDGETS = {"estimator": "widgets/estimator.html", "kv-cache": "widgets/kv_stepper.html"}


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Where to start (the chapter's first page, then the first lab), the chapter's sections, and for a
    signed-in learner where they are in the six labs."""
    from labapp.labs.catalog import LABS, states_for

    states = []
    if request.user.is_authenticated:
        me = int(request.user.pk or 0)
        found = states_for([me])
        states = [found[(me, n)] for n in LABS]
    sections = sections_in(translation.get_language() or "ko")
    context = {
        "sections": sections,
        "lab_states": states,
        "first_section": sections[0] if sections else None,
        "first_lab": LABS[min(LABS)],
    }
    return render(request, "home.html", context)


@require_GET
def chapter_index(request: HttpRequest) -> HttpResponse:
    """Every section of the chapter in order, with its summary."""
    return render(request, "chapter_index.html", {"sections": sections_in(translation.get_language() or "ko")})


@require_GET
def chapter_section(request: HttpRequest, slug: str) -> HttpResponse:
    language = translation.get_language() or "ko"
    section = section_in(slug, language)
    if section is None:
        raise Http404
    sections = sections_in(language)
    previous, following = neighbours(sections, section.slug)
    context: dict[str, Any] = {
        "section": section,
        "sections": sections,
        "previous": previous,
        "next": following,
        "widget": SECTION_WIDGETS.get(section.slug),
    }
    if section.slug == "estimator":
        context["speeds"] = _estimator_speeds(request)
    return render(request, "chapter_section.html", context)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers that ask for /favicon.ico without reading the page's icon link get the static SVG."""
    return redirect(static("lab/favicon.svg"), permanent=True)


def _estimator_speeds(request: HttpRequest) -> dict[str, Any] | None:
    """The learner's own speeds on the engine they use, for the estimator's fill-in button (None: nothing
    measured there yet)."""
    if not request.user.is_authenticated:
        return None
    speeds = learner_speeds(request.user, engines.chosen_url(request.session))
    if speeds is None:
        return None
    return {
        "prefill": round(speeds.prefill, 1),
        "decode": round(speeds.decode, 1),
        "basis": str(speeds.basis),
        "samples": speeds.samples,
    }
