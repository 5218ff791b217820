"""The status page: each component up or down, as HTML, as JSON and as the banner; and liveness.

On a class server anonymous visitors and learners see each component's name and state
only; the details (addresses, versions, errors, round trips, worker hosts) are for admins
(``labapp.access.may_see_status_details``). A local learner sees everything.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from labapp.access import may_see_status_details
from labapp.status import engines
from labapp.status import probes as status


@never_cache
@require_GET
def status_page(request: HttpRequest) -> HttpResponse:
    partial = request.headers.get("HX-Request") == "true"  # htmx refreshes only the table
    template = "status_table.html" if partial else "status.html"
    components = engines.with_roles(status.check_all())
    context = {"components": components, "details": may_see_status_details(request.user)}
    return render(request, template, context)


@never_cache
@require_GET
def status_json(request: HttpRequest) -> JsonResponse:
    components = engines.with_roles(status.check_all())
    if may_see_status_details(request.user):
        shown: list[dict[str, Any]] = [asdict(c) for c in components]
    else:
        shown = [{"key": c.key, "label": c.label, "ok": c.ok, "state": c.state} for c in components]
    return JsonResponse({"ok": all(c.ok for c in components), "components": shown})


@never_cache
@require_GET
def status_banner(request: HttpRequest) -> HttpResponse:
    found = status.not_ok()
    if found is None:
        found = [c for c in status.check_all() if not c.ok]
    down = [c.label for c in found if c.state == status.State.DOWN]
    starting = [c for c in found if c.state == status.State.STARTING]
    return render(request, "status_banner.html", {"down": down, "starting": starting})


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness of the web process alone (the supervisor's readiness check)."""
    return HttpResponse("ok", content_type="text/plain")
