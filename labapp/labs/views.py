"""The lab pages: the run button (with a prediction) on top, the chapter's prose, results inline,
auto-checks, hand-in."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone, translation
from django.views.decorators.http import require_POST

from bench import charts, engines, pools, services
from bench import selectors as bench_selectors
from labapp.chapter.selectors import section_in
from labapp.labs import predict
from labapp.labs import selectors as lab_selectors
from labapp.labs import services as lab_services
from labapp.labs.catalog import LABS, Lab, LabState, states_for
from labapp.labs.forms import RunForm
from lti import grades as lti_grades


def _me(request: HttpRequest) -> int:
    return int(request.user.pk or 0)


def _lab(number: int) -> Lab:
    if number not in LABS:
        raise Http404("no such lab")
    return LABS[number]


def _draft_key(number: int) -> str:
    return f"lab-{number}-prediction-draft"


@login_required
def lab_list(request: HttpRequest) -> HttpResponse:
    states = states_for([_me(request)])
    assigned = lab_selectors.assignments_of(request.user)  # type: ignore[arg-type]
    now = timezone.now()
    rows = [{"state": states[(_me(request), n)], "assignments": assigned.get(n, [])} for n in LABS]
    return render(request, "labs/list.html", {"rows": rows, "now": now})


def _estimate_now(request: HttpRequest, number: int) -> tuple[Any, predict.Estimate | None]:
    """The learner's speeds on the chosen engine and the chapter's estimate of the lab's number with them."""
    speeds = bench_selectors.learner_speeds(request.user, engines.chosen_url(request.session))  # type: ignore[arg-type]
    settings = lab_services.run_settings(number)
    return speeds, predict.estimate(number, settings, speeds.prefill, speeds.decode) if speeds else None


def _own_prediction(job: Any) -> str:
    """The value the learner typed for their latest run ("" when they typed none)."""
    found = predict.compare(job) if job is not None else None
    return f"{found.predicted:g}" if found is not None else ""


def _run_context(request: HttpRequest, number: int, state: LabState) -> dict[str, Any]:
    """The run card: the prediction form (holding the learner's own latest prediction, or a refused draft;
    never the estimator's value, which is shown apart under its own name), the estimate's formula, the
    prediction of a run under way, and the run's expected time."""
    speeds, estimate = _estimate_now(request, number)
    settings = lab_services.run_settings(number)
    target = predict.target(number)
    example = predict.estimate(number, settings, 1000.0, 50.0) if speeds is None else None
    draft = request.session.get(_draft_key(number))  # a refused run's prediction, shown as typed, with its error
    if draft is not None:
        form = RunForm({"prediction": draft}, target=target)
        form.is_valid()
    else:
        form = RunForm(initial={"prediction": _own_prediction(state.job)}, target=target)
    running = state.job is not None and state.job.active
    return {
        "run_form": form,
        "target": target,
        "target_what": target.what(settings) if settings is not None else "",
        "estimate": estimate,
        "example_estimate": example,
        "speeds": speeds,
        "running_prediction": predict.compare(state.job) if running else None,
        "run_time": lab_selectors.run_time(number, engines.chosen_url(request.session), speeds),
    }


@login_required
def lab_page(request: HttpRequest, number: int) -> HttpResponse:
    lab = _lab(number)
    # A class watches its lab pages, not /bench/: a run whose worker was killed goes back to its queue
    # from here too, or every run behind it on that engine waits for it (the rehearsal's worker fault).
    services.jobs_reap_stale()
    state = states_for([_me(request)], [number])[(_me(request), number)]
    language = translation.get_language() or "ko"
    checked, handed = state.checked_job, state.shown_job if state.submission is not None else None
    context = {
        "lab": lab,
        "state": state,
        "section": section_in(lab.slug, language),
        "job": state.job,
        "place": pools.place(state.job) if state.job is not None else None,
        "engine_name": engines.name_of(state.job.engine_url) if state.job is not None else "",
        "checked_engine_name": engines.name_of(checked.engine_url) if checked else "",
        "charts": (
            charts.charts(lab.job_kind, [(f"#{checked.pk}", checked.results)], engine_panels=lab.engine_panels)
            if checked
            else []
        ),
        "comparison": predict.compare(checked) if checked else None,
        "handed_comparison": predict.compare(handed) if handed else None,
        "failed_advice": any(c.failed for c in state.checks),
        "assignment": lab_services.assignment_for(_me(request), number),
        "reflection_max": lab_services.REFLECTION_MAX,
        "draft": request.session.get(f"lab-{number}-draft", ""),
    }
    return render(request, "labs/lab.html", context | _run_context(request, number, state))


@login_required
@require_POST
def lab_run(request: HttpRequest, number: int) -> HttpResponse:
    _lab(number)
    form = RunForm(request.POST, target=predict.target(number))
    if not form.is_valid():
        for error in form.errors.get("prediction", []):
            messages.error(request, str(error))
        request.session[_draft_key(number)] = request.POST.get("prediction", "")[:40]  # nothing is lost
        return redirect("lab_page", number=number)
    engine_url = engines.chosen_url(request.session)
    try:
        lab_services.lab_run(
            user=request.user,  # type: ignore[arg-type]
            number=number,
            engine_url=engine_url,
            prediction=form.cleaned_data["prediction"],
            estimated=_estimate_now(request, number)[1],  # kept apart from the learner's, under its own name
        )
    except services.JobsBusy as exc:
        messages.error(request, str(exc))
        request.session[_draft_key(number)] = request.POST.get("prediction", "")[:40]
        return redirect("lab_page", number=number)
    request.session.pop(_draft_key(number), None)
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
    _score_to_lms(request, done.submission)
    return redirect("lab_page", number=number)


def _score_to_lms(request: HttpRequest, submission: Any) -> None:
    """A hand-in of a lab placed in an LMS course sends its score there (kept and sent again if it fails)."""
    sends = lti_grades.send_for(submission=submission)
    if any(sent.sent_at is None for sent in sends):
        messages.error(
            request,
            translation.gettext(
                "제출은 저장했지만 점수를 LMS에 보내지 못했습니다. "
                "다시 제출하거나 강사가 수업 페이지에서 다시 보낼 수 있습니다."
            ),
        )
    elif sends:
        messages.success(request, translation.gettext("점수를 LMS 성적부에 보냈습니다."))
