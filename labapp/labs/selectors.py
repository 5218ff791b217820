"""Reads of the lab pages: a run's expected time, and the learner's class assignments of each lab."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils.translation import gettext as _

from labapp.access import classes_learning
from labapp.labs.catalog import LABS
from labapp.models import Assignment
from rag.estimator import gen_seconds

RECENT = 5  # finished runs a time is the median of


def same_engine(url: str) -> list[str]:
    """The spellings of one engine's URL a job may carry (with and without the trailing slash)."""
    bare = url.rstrip("/")
    return [bare, bare + "/"]


@dataclass(frozen=True)
class RunTime:
    seconds: float | None  # None: not known yet
    basis: str


def _median_seconds(rows: Iterable[dict[str, Any]]) -> tuple[float, int] | None:
    spans = [(r["finished_at"] - r["started_at"]).total_seconds() for r in rows if r["started_at"] and r["finished_at"]]
    return (statistics.median(spans), len(spans)) if spans else None


def run_time(user: AbstractBaseUser, number: int, engine_url: str, speeds: Any, config: Any) -> RunTime:
    """How long a run of the lab on ``engine_url`` may take: the learner's previous finished runs of this
    lab there, else everyone's finished runs of its kind there, else the estimator with the learner's
    speeds (``speeds``: ``rag.chat.Speeds`` or None), else unknown."""
    from bench.models import BenchJob

    done = BenchJob.objects.filter(status=BenchJob.Status.DONE, engine_url__in=same_engine(engine_url))
    fields = ("started_at", "finished_at")
    mine = _median_seconds(done.filter(owner_id=user.pk, lab=number).order_by("-pk").values(*fields)[:RECENT])
    if mine is not None:
        return RunTime(mine[0], _("이 엔진에서 내가 이 실습을 실행한 최근 %(n)d번의 중앙값") % {"n": mine[1]})
    everyone = _median_seconds(done.filter(kind=LABS[number].job_kind).order_by("-pk").values(*fields)[:RECENT])
    if everyone is not None:
        return RunTime(
            everyone[0], _("이 엔진에서 모두가 실행한 같은 종류 작업 최근 %(n)d번의 중앙값") % {"n": everyone[1]}
        )
    shapes = LABS[number].declared.shapes(config)  # the lab's settings fix its requests' lengths, or none
    if speeds is not None and shapes and speeds.prefill > 0 and speeds.decode > 0:
        seconds = sum(sum(gen_seconds(i, o, speeds.prefill, speeds.decode)) for i, o in shapes)
        return RunTime(seconds, _("내 속도로 추정기에 넣은 값 (요청 %(n)d개)") % {"n": len(shapes)})
    return RunTime(None, _("처음 실행이라 시간을 아직 모름"))


def assignments_of(user: AbstractBaseUser) -> dict[int, list[Assignment]]:
    """lab number → the assignments of it in the classes the user learns in (with their class), due first."""
    found: dict[int, list[Assignment]] = {}
    rows = Assignment.objects.filter(classroom__in=classes_learning(user)).select_related("classroom")
    for assignment in rows.order_by("due_at", "pk"):
        found.setdefault(assignment.lab, []).append(assignment)
    return found
