from __future__ import annotations

from dataclasses import asdict

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import translation
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from labapp import status
from labapp.models import ChapterSection


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
    return render(request, "chapter_section.html", {"section": section, "sections": _sections(language)})


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
