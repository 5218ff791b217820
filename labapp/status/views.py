"""The status page: each component up or down, as HTML, as JSON and as the banner; and liveness."""

from __future__ import annotations

from dataclasses import asdict

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from labapp.status import probes as status


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
