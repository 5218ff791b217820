"""Reads of benchmark jobs that other parts of the lab use."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.utils.translation import gettext as _

from bench.kinds import speed
from bench.models import BenchJob
from rag.chat import Speeds
from rag.conversations import answer_speeds
from rag.vllm import client as vllm_client

SPEED_KIND = speed.KIND.name  # Lab 1's job kind


def _same_engine(url: str) -> list[str]:
    """The spellings of one engine's URL a job may carry (with and without the trailing slash)."""
    bare = url.rstrip("/")
    return [bare, bare + "/"]


def speed_probe_speeds(user: AbstractBaseUser, engine_url: str) -> Speeds | None:
    """The prefill and decode speeds of the learner's latest finished Lab 1 speed probe on ``engine_url``
    (None: none yet there). Another engine's speeds would estimate this one's times wrongly."""
    probe = (
        BenchJob.objects.filter(
            owner_id=user.pk, kind=SPEED_KIND, status=BenchJob.Status.DONE, engine_url__in=_same_engine(engine_url)
        )
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


def learner_speeds(user: AbstractBaseUser, engine_url: str) -> Speeds | None:
    """The learner's own speeds on ``engine_url``, for the chapter's estimator and the chat's estimate:
    from their latest Lab 1 speed probe there, else (on the configured engine, where the chat
    answers) the median over their recent finished answers."""
    found = speed_probe_speeds(user, engine_url)
    if found is None and engine_url.rstrip("/") == vllm_client.base_url().rstrip("/"):
        return answer_speeds(user)
    return found


def chat_speeds(user: AbstractBaseUser) -> Speeds | None:
    """``learner_speeds`` on the engine the chat answers on (the configured one)."""
    return learner_speeds(user, vllm_client.base_url())
