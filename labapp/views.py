from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import translation
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from labapp import status
from labapp.models import ChapterSection
from rag.conversations import learner_speeds

# Sections that carry an interactive widget under their text (slug -> template).
SECTION_WIDGETS = {"estimator": "widgets/estimator.html", "kv-cache": "widgets/kv_stepper.html"}


def _sections(language: str) -> list[ChapterSection]:
    sections = list(ChapterSection.objects.filter(language=language))
    return sections or list(ChapterSection.objects.filter(language="ko"))


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The chapter's sections, and for a signed-in learner where they are in the six labs."""
    from labapp.labs import LABS, states_for

    states = []
    if request.user.is_authenticated:
        me = int(request.user.pk or 0)
        found = states_for([me])
        states = [found[(me, n)] for n in LABS]
    context = {"sections": _sections(translation.get_language() or "ko"), "lab_states": states}
    return render(request, "home.html", context)


@require_GET
def chapter_section(request: HttpRequest, slug: str) -> HttpResponse:
    language = translation.get_language() or "ko"
    section = (
        ChapterSection.objects.filter(slug=slug, language=language).first()
        or ChapterSection.objects.filter(slug=slug, language="ko").first()
    )
    if section is None:
        raise Http404
    context: dict[str, Any] = {
        "section": section,
        "sections": _sections(language),
        "widget": SECTION_WIDGETS.get(section.slug),
    }
    if section.slug == "estimator":
        context["speeds"] = _estimator_speeds(request)
    return render(request, "chapter_section.html", context)


def _estimator_speeds(request: HttpRequest) -> dict[str, Any] | None:
    """The learner's own speeds for the estimator's fill-in button (None: nothing measured yet)."""
    if not request.user.is_authenticated:
        return None
    speeds = learner_speeds(request.user)
    if speeds is None:
        return None
    return {
        "prefill": round(speeds.prefill, 1),
        "decode": round(speeds.decode, 1),
        "basis": str(speeds.basis),
        "samples": speeds.samples,
    }


@never_cache
@require_GET
def status_page(request: HttpRequest) -> HttpResponse:
    partial = request.headers.get("HX-Request") == "true"  # htmx refreshes only the table
    template = "status_table.html" if partial else "status.html"
    return render(request, template, {"components": status.check_all()})


@never_cache
@require_GET
def status_json(request: HttpRequest) -> JsonResponse:
    components = status.check_all()
    return JsonResponse({"ok": all(c.ok for c in components), "components": [asdict(c) for c in components]})


@never_cache
@require_GET
def status_banner(request: HttpRequest) -> HttpResponse:
    down = status.down_components()
    if down is None:
        down = [c.label for c in status.check_all() if not c.ok]
    return render(request, "status_banner.html", {"down": down})


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness of the web process alone (the supervisor's readiness check)."""
    return HttpResponse("ok", content_type="text/plain")
