"""The six lab pages: the chapter's prose, the run button, results inline, auto-checks, hand-in."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import translation
from django.views.decorators.http import require_POST

from bench import charts, engines, services
from labapp.chapter.selectors import section_in
from labapp.labs import services as lab_services
from labapp.labs.catalog import LABS, Lab, states_for


def _me(request: HttpRequest) -> int:
    return int(request.user.pk or 0)


def _lab(number: int) -> Lab:
    if number not in LABS:
        raise Http404("no such lab")
    return LABS[number]


@login_required
def lab_list(request: HttpRequest) -> HttpResponse:
    states = states_for([_me(request)])
    return render(request, "labs/list.html", {"states": [states[(_me(request), n)] for n in LABS]})


@login_required
def lab_page(request: HttpRequest, number: int) -> HttpResponse:
    lab = _lab(number)
    state = states_for([_me(request)], [number])[(_me(request), number)]
    language = translation.get_language() or "ko"
    section = section_in(lab.slug, language)
    shown = state.checked_job
    context = {
        "lab": lab,
        "state": state,
        "section": section,
        "job": state.job,
        "position": services.queue_position(state.job) if state.job is not None else 0,
        "charts": charts.charts(lab.job_kind, [(f"#{shown.pk}", shown.results)]) if shown else [],
        "assignment": lab_services.assignment_for(_me(request), number),
        "reflection_max": lab_services.REFLECTION_MAX,
        "draft": request.session.get(f"lab-{number}-draft", ""),
    }
    return render(request, "labs/lab.html", context)


@login_required
@require_POST
def lab_run(request: HttpRequest, number: int) -> HttpResponse:
    _lab(number)
    engine_url = engines.chosen_url(request.session)
    try:
        lab_services.lab_run(user=request.user, number=number, engine_url=engine_url)  # type: ignore[arg-type]
    except services.JobsBusy as exc:
        messages.error(request, str(exc))
    return redirect("lab_page", number=number)


@login_required
@require_POST
def lab_submit(request: HttpRequest, number: int) -> HttpResponse:
    _lab(number)
    try:
        done = lab_services.lab_submit(
            user=request.user,  # type: ignore[arg-type]
            number=number,
            reflection=request.POST.get("reflection", ""),
        )
    except lab_services.SubmitError as exc:
        messages.error(request, str(exc))
        request.session[f"lab-{number}-draft"] = request.POST.get("reflection", "")[:20000]  # nothing is lost
        return redirect("lab_page", number=number)
    request.session.pop(f"lab-{number}-draft", None)
    note = " (late)" if done.submission.late else ""
    messages.success(request, str(translation.gettext("제출했습니다.")) + note)
    return redirect("lab_page", number=number)
