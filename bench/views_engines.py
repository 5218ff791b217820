"""Engines: everyone sees each one's status and picks one for their runs; admins and instructors add them,
and whoever added one (or an admin) removes it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from bench import access, engines
from bench.models import Engine
from labapp.access import may_register_engine


@login_required
def engine_list(request: HttpRequest) -> HttpResponse:
    can_manage = may_register_engine(request.user)
    context = {
        "rows": engines.probed(engines.choices()),
        "chosen": engines.chosen_url(request.session),
        "can_manage": can_manage,
        "show_detail": can_manage,  # who registers engines may read why one is down; learners the reason only
        "removable": access.removable_engines(request.user),
        "form": request.session.pop("engine_form", {}),
        "roles": Engine.Role.choices,
    }
    return render(request, "bench/engines.html", context)


@login_required
@require_POST
def engine_pick(request: HttpRequest) -> HttpResponse:
    choice = access.engine_to_pick(request.user, request.POST.get("engine", ""))
    if choice is None:
        messages.error(request, _("등록되지 않은 엔진입니다."))
    else:
        request.session[engines.SESSION_KEY] = choice.url  # kept on the server, never sent back
        messages.success(request, _("이제 내 실행은 %(name)s 엔진을 씁니다.") % {"name": choice.name})
    return redirect("engine_list")


@login_required
@require_POST
def engine_add(request: HttpRequest) -> HttpResponse:
    if not may_register_engine(request.user):
        raise Http404("not allowed")
    fields = {key: request.POST.get(key, "") for key in ("name", "base_url", "model", "hardware", "pool", "role")}
    fields["role"] = fields["role"] or Engine.Role.BOTH
    try:
        engines.engine_add(user=request.user, **fields)
    except engines.EngineError as exc:
        messages.error(request, f"{exc.field}: {exc.message}")
        request.session["engine_form"] = fields  # what was typed comes back
    return redirect("engine_list")


@login_required
@require_POST
def engine_delete(request: HttpRequest, engine_id: int) -> HttpResponse:
    access.engine_for(request.user, engine_id).delete()
    return redirect("engine_list")
