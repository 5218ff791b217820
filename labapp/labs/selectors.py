"""Reads of the lab pages: a run's expected time, and the learner's class assignments of each lab."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from labapp.access import classes_learning
from labapp.labs.catalog import LABS
from labapp.models import Assignment
from rag.estimator import gen_seconds

RECENT = 5  # finished runs a time is the median of
LOOKED_AT = 50  # latest finished runs of the lab on the engine searched for ones with the run button's settings


def same_engine(url: str) -> list[str]:
    """The spellings of one engine's URL a job may carry (with and without the trailing slash)."""
    bare = url.rstrip("/")
    return [bare, bare + "/"]


@dataclass(frozen=True)
class RunTime:
    seconds: float | None  # None: not known yet
    basis: str


def _same_settings_spans(number: int, engine_url: str, config: Any) -> list[float]:
    """Seconds each of the latest finished runs of the lab took on ``engine_url`` with settings ``config``
    (anyone's: the engine and the settings fix the time, not who pressed the button), newest first."""
    from bench.models import BenchJob

    lab = LABS[number]
    rows = (
        BenchJob.objects.filter(
            status=BenchJob.Status.DONE,
            lab=number,
            kind=lab.job_kind,
            engine_url__in=same_engine(engine_url),
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .order_by("-finished_at", "-pk")
        .values("config", "started_at", "finished_at")[:LOOKED_AT]
    )
    spans = [
        (r["finished_at"] - r["started_at"]).total_seconds()
        for r in rows
        if r["started_at"] and r["finished_at"] and lab.kind.saved_config(r["config"] or {}) == config
    ]
    return spans[:RECENT] if config is not None else []


# Why the estimator cannot give a run's time beforehand.
UNSHAPED = gettext_lazy(
    "요청을 여러 개 동시에 보내는 실행이라 한 번에 한 요청을 세는 추정기로 미리 셀 수 없습니다. "
    "한 번 실행하면 그 시간으로 알려 드립니다."
)
FIRST_SPEEDS = gettext_lazy("이 실행이 이 엔진에서 내 속도를 처음 잽니다. 잰 속도가 없어 시간을 미리 셀 수 없습니다.")
NO_SPEEDS = gettext_lazy("이 엔진에서 잰 내 속도가 없어 추정기로 셀 수 없습니다. 실습 1을 하면 채워집니다.")


def _estimated(number: int, config: Any, speeds: Any) -> RunTime:
    """The chapter's estimator over every request the lab's settings fix, at the learner's speeds; or why not."""
    lab = LABS[number].declared
    shapes = lab.shapes(config)
    if not shapes:
        return RunTime(None, str(UNSHAPED))
    if speeds is None or speeds.prefill <= 0 or speeds.decode <= 0:
        return RunTime(None, str(FIRST_SPEEDS if lab.speeds else NO_SPEEDS))
    seconds = sum(sum(gen_seconds(i, o, speeds.prefill, speeds.decode)) for i, o in shapes)
    said = _(
        "추정값: 실습 1에서 잰 내 속도(프리필 %(prefill).0f, 디코드 %(decode).0f tok/s)로 추정기가 셈 (요청 %(n)d개)"
    ) % {"prefill": speeds.prefill, "decode": speeds.decode, "n": len(shapes)}
    return RunTime(seconds, f"{said}; {lab.shapes_basis}" if lab.shapes_basis else said)


def run_time(number: int, engine_url: str, speeds: Any) -> RunTime:
    """How long a run of the lab's button may take on ``engine_url`` (the one owner of the run card's time):
    the median of the latest finished runs of the lab with the same settings on the same engine; with
    none, the chapter's estimator at the learner's speeds (``speeds``: ``rag.chat.Speeds`` or None); else
    unknown, saying why. A job of the same kind with other settings (a /bench/ job) never counts: its
    requests are not this run's."""
    config = LABS[number].run_settings()
    spans = _same_settings_spans(number, engine_url, config)
    if spans:
        return RunTime(
            statistics.median(spans),
            ngettext(
                "이 엔진에서 같은 설정으로 한 이 실습의 최근 %(n)d번 실행의 중앙값",
                "이 엔진에서 같은 설정으로 한 이 실습의 최근 %(n)d번 실행의 중앙값",
                len(spans),
            )
            % {"n": len(spans)},
        )
    return _estimated(number, config, speeds)


def assignments_of(user: AbstractBaseUser) -> dict[int, list[Assignment]]:
    """lab number → the assignments of it in the classes the user learns in (with their class), due first."""
    found: dict[int, list[Assignment]] = {}
    rows = Assignment.objects.filter(classroom__in=classes_learning(user)).select_related("classroom")
    for assignment in rows.order_by("due_at", "pk"):
        found.setdefault(assignment.lab, []).append(assignment)
    return found
