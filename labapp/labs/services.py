"""Writes of the labs: start a lab's job, hand a lab in (with the class's dates and late rule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from labapp.labs import predict
from labapp.labs.catalog import LABS, state_for
from labapp.models import Assignment, LabSubmission

REFLECTION_MAX = 5000


class SubmitError(ValueError):
    """Why a lab cannot be handed in now (shown to the learner; nothing is lost)."""


def run_config(number: int) -> dict[str, Any]:
    """The raw settings of the lab's run button (``catalog.Lab.run_config``)."""
    return LABS[number].run_config()


def run_settings(number: int) -> Any:
    """The typed settings of the lab's run button (None if they no longer read)."""
    return LABS[number].run_settings()


def lab_run(
    *,
    user: AbstractBaseUser,
    number: int,
    engine_url: str | None = None,
    prediction: float | None = None,
    estimated: predict.Estimate | None = None,
) -> Any:
    """A run made for the lab (``BenchJob.lab``), with the learner's prediction of its key number if given
    (and apart from it, ``estimated``: the estimator's value the run card showed)."""
    from bench import services

    lab = LABS[number]  # past the per-user job limit: services.JobsBusy, nothing made
    config = run_settings(number)
    predicted = None if prediction is None else predict.prediction_for(number, config, prediction, estimated)
    return services.job_submit(
        owner=user,
        kind=lab.job_kind,
        config=run_config(number),
        engine_url=engine_url,
        lab=number,
        prediction=predicted,
    )


def assignment_for(user_id: int, number: int) -> Assignment | None:
    """The learner's class assignment of this lab (the one due last when several classes assign it)."""
    return Assignment.objects.filter(lab=number, classroom__memberships__user_id=user_id).order_by("-due_at").first()


@dataclass(frozen=True)
class Submitted:
    submission: LabSubmission
    created: bool


def lab_submit(*, user: AbstractBaseUser, number: int, reflection: str) -> Submitted:
    text = (reflection or "").strip()
    if not text:
        raise SubmitError(_("생각해 볼 질문에 대한 답을 적어 주세요."))
    if len(text) > REFLECTION_MAX:
        raise SubmitError(_("답은 %(n)d자까지입니다 (지금 %(m)d자).") % {"n": REFLECTION_MAX, "m": len(text)})
    state = state_for(int(user.pk), number)
    if state.checked_job is None:
        raise SubmitError(_("제출하려면 먼저 이 실습을 끝까지 실행하세요."))
    if state.missing:
        raise SubmitError(
            _(
                "이 실행의 설정이 실습의 최소 조건에 못 미쳐 제출할 수 없습니다 (부족: %(what)s). "
                "조건을 채워 다시 실행하세요."
            )
            % {"what": "; ".join(state.missing)}
        )
    now = timezone.now()
    late = False
    assignment = assignment_for(int(user.pk), number)
    if assignment is not None:
        if now < assignment.opens_at:
            when = timezone.localtime(assignment.opens_at).strftime("%Y-%m-%d %H:%M %Z")
            raise SubmitError(_("이 과제는 %(when)s에 열립니다.") % {"when": when})
        if now > assignment.due_at:
            if assignment.late_rule == Assignment.LateRule.REFUSE:
                when = timezone.localtime(assignment.due_at).strftime("%Y-%m-%d %H:%M %Z")
                raise SubmitError(
                    _("마감(%(when)s)이 지나 제출을 받지 않습니다. 강사에게 문의하세요.") % {"when": when}
                )
            late = True
    job = state.checked_job
    with transaction.atomic():
        submission, created = LabSubmission.objects.update_or_create(
            user_id=user.pk,
            lab=number,
            defaults={
                "job": job,
                "reflection": text,
                "checks": [c.as_dict() for c in state.checks],
                "key_numbers": state.lab.key_numbers(job.results or {}),
                "passed": state.passed,
                "engine_url": job.engine_url,
                "submitted_at": now,
                "late": late,
            },
        )
    return Submitted(submission, created)
