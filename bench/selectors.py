"""Reads of benchmark jobs that other parts of the lab use."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.utils.translation import gettext as _

from bench.kinds import speed
from bench.models import BenchJob
from rag.chat import Speeds
from rag.conversations import answer_speeds

SPEED_KIND = speed.KIND.name  # Lab 1's job kind


def speed_probe_speeds(user: AbstractBaseUser) -> Speeds | None:
    """The prefill and decode speeds of the learner's latest finished Lab 1 speed probe (None: none yet)."""
    probe = (
        BenchJob.objects.filter(owner_id=user.pk, kind=SPEED_KIND, status=BenchJob.Status.DONE)
        .order_by("-finished_at", "-pk")
        .values("pk", "results")
        .first()
    )
    results = probe["results"] if probe else {}
    if not (probe and results.get("prefill_speed") and results.get("decode_speed")):
        return None
    return Speeds(
        prefill=float(results["prefill_speed"]),
        decode=float(results["decode_speed"]),
        basis=_("실습 1 속도 측정 #%(id)d에서 잰 내 속도") % {"id": probe["pk"]},
        samples=len(results.get("cells", [])),
    )


def learner_speeds(user: AbstractBaseUser) -> Speeds | None:
    """The learner's own speeds, for the chapter's estimator and the chat's estimate: from
    their latest Lab 1 speed probe, else the median over their recent finished answers."""
    return speed_probe_speeds(user) or answer_speeds(user)
