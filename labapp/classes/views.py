"""Class pages: list and create classes, members and join codes, rosters, assignments, results.

Every view reaches its class through ``access.classroom_for`` (instructors of the class
and admins; anyone else gets 404), a learner through ``access.learner_for`` and their
job through ``access.learner_job_for``; who may do what is ``labapp.access``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from bench import charts as bench_charts
from labapp import access as roles
from labapp.classes import access, charts, roster, selectors, services, throttle
from labapp.classes.forms import (
    AssignmentForm,
    ClassroomForm,
    JoinCodeForm,
    JoinForm,
    RosterUploadForm,
    TemporaryPasswordForm,
)
from labapp.labs.catalog import LABS
from labapp.labs.predict import compare
from labapp.models import Assignment, Classroom, Membership
from lti import selectors as lti_selectors


def _roster_key(classroom: Classroom) -> str:
    return f"roster-{classroom.pk}"


def _list_context(request: HttpRequest, join_form: JoinForm) -> dict[str, Any]:
    taught = list(roles.classes_managed(request.user))
    joined = list(
        roles.classes_learning(request.user).exclude(pk__in=[c.pk for c in taught]).prefetch_related("assignments")
    )
    return {
        "taught": taught,
        "joined": joined,
        "can_create": roles.may_create_class(request.user),
        "join_form": join_form,
        "labs": LABS,
    }


@login_required
@require_GET
def class_list(request: HttpRequest) -> HttpResponse:
    return render(request, "classes/list.html", _list_context(request, JoinForm()))


@login_required
def class_create(request: HttpRequest) -> HttpResponse:
    if not roles.may_create_class(request.user):
        return render(request, "classes/cannot_create.html", status=403)
    form = ClassroomForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        classroom = services.classroom_create(name=form.cleaned_data["name"], instructor=request.user)  # type: ignore[arg-type]
        messages.success(request, _("수업을 만들었습니다. 가입 코드를 학습자에게 알려 주세요."))
        return redirect("class_detail", classroom_id=classroom.pk)
    return render(request, "classes/create.html", {"form": form})


@login_required
@require_POST
def class_join(request: HttpRequest) -> HttpResponse:
    if wait_s := throttle.join_code_wait_s(request):
        messages.error(request, throttle.join_code_refusal(wait_s))
        return render(request, "classes/list.html", _list_context(request, JoinForm()), status=429)
    form = JoinForm(request.POST)
    if form.has_error("join_code", code="join_code"):
        throttle.join_code_failed(request)
    if not form.is_valid():
        return render(request, "classes/list.html", _list_context(request, form), status=400)
    assert form.classroom is not None
    if not roles.is_member(request.user, form.classroom) and (refusal := throttle.join_refusal(form.classroom)):
        messages.error(request, refusal)
        return render(request, "classes/list.html", _list_context(request, form), status=429)
    if services.classroom_join(user=request.user, classroom=form.classroom):  # type: ignore[arg-type]
        messages.success(request, _("%(name)s 수업에 들어왔습니다.") % {"name": form.classroom.name})
    else:
        messages.info(request, _("이미 이 수업에 있습니다."))
    return redirect("class_list")


def _detail_context(request: HttpRequest, classroom: Classroom, **extra: Any) -> dict[str, Any]:
    members = list(
        Membership.objects.filter(classroom=classroom).select_related("user").order_by("role", "user__username")
    )
    resettable = roles.password_resettable(request.user, classroom)
    for m in members:
        m.resettable = m.user_id in resettable  # type: ignore[attr-defined]
    expired = classroom.join_code_expires_at is not None and classroom.join_code_expires_at <= timezone.now()
    context = {
        "classroom": classroom,
        "members": members,
        "learner_count": sum(m.role == Membership.Role.LEARNER for m in members),
        "assignments": list(Assignment.objects.filter(classroom=classroom)),
        "assignment_form": AssignmentForm(classroom=classroom),
        "join_code_form": JoinCodeForm(),
        "code_expired": expired,
        "labs": LABS,
        "lti": lti_selectors.course_of(classroom),  # the LMS course it was made from, or None
    }
    return context | extra


@login_required
@require_GET
def class_detail(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    return render(request, "classes/detail.html", _detail_context(request, classroom))


@login_required
@require_POST
def class_join_code(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    form = JoinCodeForm(request.POST)
    if not form.is_valid():
        context = _detail_context(request, classroom, join_code_form=form)
        return render(request, "classes/detail.html", context, status=400)
    action = form.cleaned_data["action"]
    if action == "regenerate":
        services.classroom_join_code_regenerate(classroom=classroom, expires_at=form.expires_at())
        messages.success(request, _("새 가입 코드를 만들었습니다. 이전 코드는 더 이상 쓸 수 없습니다."))
    else:
        services.classroom_join_set(classroom=classroom, open_=action == "open")
        messages.success(
            request, _("이제 가입 코드로 들어올 수 있습니다.") if action == "open" else _("가입 코드를 막았습니다.")
        )
    return redirect("class_detail", classroom_id=classroom.pk)


@login_required
@require_POST
def learner_password(request: HttpRequest, classroom_id: int, user_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    learner = access.learner_for(request.user, classroom, user_id)
    if not roles.may_reset_password(request.user, learner):
        messages.error(
            request,
            _(
                "이 계정의 비밀번호는 여기서 바꿀 수 없습니다: 강사나 관리자이거나, "
                "내가 가르치지 않는 수업에도 있는 학습자입니다. 관리자에게 부탁하세요."
            ),
        )
        return redirect("class_detail", classroom_id=classroom.pk)
    form = TemporaryPasswordForm(request.POST, learner=learner)
    if not form.is_valid():
        context = {"classroom": classroom, "learner": learner, "form": form}
        return render(request, "classes/password.html", context, status=400)
    password = services.password_set_temporary(
        learner=learner,
        by=request.user,  # type: ignore[arg-type]
        password=form.cleaned_data["password"],
    )
    context = {"classroom": classroom, "learner": learner, "password": password}
    response = render(request, "classes/password.html", context)
    response["Cache-Control"] = "no-store"
    return response


@login_required
def roster_upload(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    form = RosterUploadForm(request.POST or None, request.FILES or None)
    context: dict[str, Any] = {"classroom": classroom, "form": form}
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["roster"]
        data = upload.read(roster.MAX_BYTES + 1)
        try:
            rows = roster.roster_read(data, classroom)
        except roster.RosterFileError as exc:
            form.add_error("roster", str(exc))
            return render(request, "classes/roster.html", context, status=400)
        # The file (and any passwords in it) goes back in the confirm form, signed; the
        # session keeps only the nonce that lets this preview be confirmed once.
        nonce = request.session[_roster_key(classroom)] = secrets.token_urlsafe(16)
        signed = roster.roster_sign(data.decode("utf-8-sig"), classroom=classroom, by=request.user, nonce=nonce)  # type: ignore[arg-type]
        good = [r for r in rows if r.ok]
        context |= {"rows": rows, "good": len(good), "bad": len(rows) - len(good), "filename": upload.name}
        response = render(request, "classes/roster_preview.html", context | {"signed": signed})
        response["Cache-Control"] = "no-store"
        return response
    return render(request, "classes/roster.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def roster_confirm(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    nonce = request.session.pop(_roster_key(classroom), None)  # one confirm per preview
    signed = request.POST.get("roster", "")
    text = roster.roster_unsign(signed, classroom=classroom, by=request.user, nonce=nonce)  # type: ignore[arg-type]
    if not text:
        messages.error(request, _("확인할 명단이 없습니다. CSV 파일을 다시 올려 주세요."))
        return redirect("roster_upload", classroom_id=classroom.pk)
    try:
        created, skipped = roster.roster_import(classroom=classroom, data=text.encode(), by=request.user)  # type: ignore[arg-type]
    except roster.RosterFileError as exc:
        messages.error(request, str(exc))
        return redirect("roster_upload", classroom_id=classroom.pk)
    context = {"classroom": classroom, "created": created, "skipped": skipped}
    response = render(request, "classes/roster_done.html", context)
    response["Cache-Control"] = "no-store"  # generated passwords are shown once
    return response


@login_required
def assignment_create(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    form = AssignmentForm(request.POST or None, classroom=classroom)
    if request.method == "POST" and form.is_valid():
        services.assignment_create(classroom=classroom, **form.cleaned_data)
        messages.success(request, _("실습 %(lab)d을 과제로 냈습니다.") % {"lab": form.cleaned_data["lab"]})
        return redirect("class_detail", classroom_id=classroom.pk)
    status = 400 if form.errors else 200
    return render(request, "classes/assignment.html", {"classroom": classroom, "form": form}, status=status)


@login_required
def assignment_edit(request: HttpRequest, classroom_id: int, assignment_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    assignment = access.assignment_for(request.user, classroom, assignment_id)
    form = AssignmentForm(request.POST or None, classroom=classroom, instance=assignment)
    if request.method == "POST" and form.is_valid():
        services.assignment_update(assignment=assignment, **form.cleaned_data)
        messages.success(request, _("과제를 고쳤습니다."))
        return redirect("class_detail", classroom_id=classroom.pk)
    context = {"classroom": classroom, "form": form, "assignment": assignment}
    return render(request, "classes/assignment.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def assignment_delete(request: HttpRequest, classroom_id: int, assignment_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    assignment = access.assignment_for(request.user, classroom, assignment_id)
    services.assignment_delete(assignment=assignment)
    messages.success(request, _("과제를 지웠습니다. 이미 낸 제출물은 남아 있습니다."))
    return redirect("class_detail", classroom_id=classroom.pk)


@login_required
@require_GET
def class_results(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    book = selectors.gradebook(classroom)
    class_charts, empty = charts.charts_and_empty([row.learner for row in book.rows])
    context = {"classroom": classroom, "book": book, "charts": class_charts, "empty_charts": empty}
    return render(request, "classes/results.html", context)


@login_required
@require_GET
def class_results_csv(request: HttpRequest, classroom_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    body = selectors.gradebook_csv(selectors.gradebook(classroom))
    response = HttpResponse("\ufeff" + body, content_type="text/csv; charset=utf-8")  # BOM: spreadsheets read UTF-8
    response["Content-Disposition"] = f'attachment; filename="class-{classroom.pk}-results.csv"'
    return response


@login_required
@require_GET
def class_charts_json(request: HttpRequest, classroom_id: int) -> JsonResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    learners = list(roles.learners_of(classroom).only("pk", "username"))
    return JsonResponse(charts.chart_data(learners))


@login_required
@require_GET
def learner_detail(request: HttpRequest, classroom_id: int, user_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    learner = access.learner_for(request.user, classroom, user_id)
    work = selectors.learner_work(learner)
    return render(request, "classes/learner.html", {"classroom": classroom, "work": work, "learner": learner})


@login_required
@require_GET
def learner_job(request: HttpRequest, classroom_id: int, user_id: int, job_id: int) -> HttpResponse:
    classroom = access.classroom_for(request.user, classroom_id)
    learner = access.learner_for(request.user, classroom, user_id)
    job = access.learner_job_for(request.user, learner, job_id)
    results = job.results or {}
    lab = next((lab for lab in LABS.values() if lab.job_kind == job.kind), None)
    cells = [c for c in results.get("cells", []) if isinstance(c, dict)]
    columns = [k for k in dict.fromkeys(k for c in cells for k, v in c.items() if not isinstance(v, dict | list))]
    context = {
        "classroom": classroom,
        "learner": learner,
        "job": job,
        "lab": lab,
        "checks": lab.checks(results, job.config or {}) if lab is not None and job.status == "done" else [],
        "key_numbers": lab.key_numbers(results) if lab is not None else {},
        "comparison": compare(job),
        "columns": columns,
        "rows": [[c.get(k) for k in columns] for c in cells],
        "config": json.dumps(job.config, ensure_ascii=False, indent=1),
        "charts": bench_charts.charts(job.kind, [(f"#{job.pk}", results)]),
    }
    return render(request, "classes/job.html", context)
