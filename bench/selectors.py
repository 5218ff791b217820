"""Reads of benchmark jobs that other parts of the lab use."""

from __future__ import annotations

from importlib import import_module

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F
from django.utils.translation import gettext as _

from bench import engines, pools
from bench.kinds import registry
from bench.models import BenchJob
from labapp import said
from rag.chat import Engine, Speeds
from rag.vllm import client as vllm_client

PROBES_LOOKED_AT = 20  # how far back a finished run without both speeds is skipped


def speeds_lab() -> int | None:
    """The lab whose runs measure a learner's prefill and decode speeds (its declaration says ``speeds``)."""
    return next((lab.number for _kind, lab in registry.labs() if lab.speeds), None)


def speed_probe_speeds(user: AbstractBaseUser, engine_url: str) -> Speeds | None:
    """The prefill and decode speeds of the learner's latest finished run of the speeds lab (Lab 1) on
    ``engine_url``, or on an engine of its pool with the same hardware (where its lab runs go,
    ``bench.pools``), that measured both (None: none yet there). Only runs made for that lab count
    (``BenchJob.lab``), never a /bench/ job or a chat answer; other hardware's speeds would estimate
    this one's times wrongly."""
    number = speeds_lab()
    if number is None:
        return None
    probes = (
        BenchJob.objects.filter(
            owner_id=user.pk, lab=number, status=BenchJob.Status.DONE, engine_url__in=pools.comparable_urls(engine_url)
        )
        .order_by(F("finished_at").desc(nulls_last=True), "-pk")
        .values("pk", "results")[:PROBES_LOOKED_AT]
    )
    for probe in probes:
        results = probe["results"] or {}
        if results.get("prefill_speed") and results.get("decode_speed"):
            return Speeds(
                prefill=float(results["prefill_speed"]),
                decode=float(results["decode_speed"]),
                basis=_("실습 1 속도 측정 #%(id)d에서 잰 내 속도") % {"id": probe["pk"]},
                samples=len(results.get("cells", [])),
                basis_job=int(probe["pk"]),
            )
    return None


def learner_speeds(user: AbstractBaseUser, engine_url: str) -> Speeds | None:
    """The learner's own speeds on ``engine_url``, for the chapter's estimator and the chat's estimate:
    from their latest Lab 1 run there (chat answers never count: their prompts are mostly cached)."""
    return speed_probe_speeds(user, engine_url)


def chat_speeds(user: AbstractBaseUser, engine_url: str | None = None) -> Speeds | None:
    """``learner_speeds`` on the engine a chat answer came from (default: the configured one)."""
    return learner_speeds(user, engine_url or vllm_client.base_url())


def chat_engine(session_key: str | None) -> Engine:
    """Where the chat answers: the engine the learner picked on the engines page (kept in their session,
    read afresh; the configured one when they picked none or their pick is gone), or, when it does not
    chat or is measuring a job, another chatting engine of its pool (``bench.pools.chat_engine``)."""
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key) if session_key else None
    options = engines.choices()  # one read of the registered engines
    url = engines.chosen_url(session, options)
    choice = pools.chat_engine(url, options)
    routed = settings.LAB_ROUTER and choice.url.rstrip("/") in {u.rstrip("/") for u in settings.LAB_ROUTER_ENGINES}
    if routed:  # vllm-router in front of the chat pool picks the engine (vllm_client.chat_url)
        return Engine(name=said.gettext("vLLM 라우터") if not choice.configured or choice.number > 1 else choice.name)
    if choice.configured and choice.number == 1:
        return Engine(name=choice.name)
    return Engine(url=choice.url, name=choice.name, model=choice.model)
