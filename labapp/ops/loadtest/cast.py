"""The run's users, class, sessions and benchmark job in the shared database; the checks afterwards.

Everything here uses the ORM and runs outside any event loop. Its Django imports are inside
the functions: ``python -m labapp.ops.loadtest`` (``make load``) imports this package before
its ``__main__`` has called ``django.setup()``, and models cannot be imported before that.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module
from typing import Any

from labapp.ops.loadtest.plan import AskResult, LoadPlan

FINISHED = ("done", "failed", "cancelled")
JOB_CONFIG = {"mode": "concurrency", "concurrencies": "2", "input_tokens": 128, "output_tokens": 16, "repeats": 1}
TIMING_FIELDS = (
    ("client", "ttft_ms"),
    ("client", "e2el_ms"),
    ("server", "queue_ms"),
    ("server", "prefill_ms"),
    ("tokens", "prompt"),
    ("tokens", "output"),
    ("server_first_token_ms",),
    ("server_done_ms",),
    ("browser", "first_token_ms"),
    ("websocket_overhead_ms",),
)


@dataclass(frozen=True)
class Person:
    user_id: int
    username: str
    cookie: str
    instructor: bool = False


@dataclass
class Cast:
    """The run's users: ``socket_owner[i]`` is the index in ``chatters`` of socket i's user."""

    run: str
    classroom_id: int
    chatters: list[Person]
    socket_owner: list[int]
    browsers: list[Person]

    @property
    def marker(self) -> str:
        return f"LT{self.run}"


def _session_cookie(user: Any) -> str:
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return f"{settings.SESSION_COOKIE_NAME}={store.session_key}"


def cast_create(plan: LoadPlan, run: str | None = None) -> Cast:
    """Users ``load-<run>-…``, signed in; a class whose learners are all of them but its instructors."""
    from django.contrib.auth.models import User
    from django.db import transaction
    from django.utils import timezone

    from labapp.classes import services as class_services
    from labapp.models import Assignment, Membership

    run = run or f"{time.strftime('%H%M%S')}{secrets.token_hex(2)}"

    def person(name: str, instructor: bool = False) -> Person:
        user = User.objects.create_user(username=f"load-{run}-{name}")  # no password: an unusable one
        return Person(user.pk, user.username, _session_cookie(user), instructor)

    instructors = max(1, plan.browsers // 10)
    with transaction.atomic():
        browsers = [person(f"teacher{n}", True) for n in range(instructors)]
        browsers += [person(f"reader{n}") for n in range(plan.browsers - instructors)]
        chatters = [person(f"chat{n}") for n in range(plan.sockets - plan.tab_pairs)]
        owner = User.objects.get(pk=browsers[0].user_id)
        classroom = class_services.classroom_create(name=f"load test {run}", instructor=owner)
        Membership.objects.bulk_create(
            [
                Membership(classroom=classroom, user_id=t.user_id, role=Membership.Role.INSTRUCTOR)
                for t in browsers[1:instructors]
            ]
            + [Membership(classroom=classroom, user_id=p.user_id) for p in chatters + browsers[instructors:]]
        )
        now = timezone.now()
        for lab in (1, 4):
            class_services.assignment_create(
                classroom=classroom,
                lab=lab,
                opens_at=now - timedelta(days=1),
                due_at=now + timedelta(days=7),
                late_rule=Assignment.LateRule.ACCEPT,
            )
    # The first tab_pairs users have two sockets each, the rest one.
    owners = [n for n in range(plan.tab_pairs) for _tab in (0, 1)] + list(range(plan.tab_pairs, len(chatters)))
    return Cast(run, classroom.pk, chatters, owners, browsers)


def cast_delete(cast: Cast) -> None:
    """The run's users and everything they own (answers, jobs, memberships), its class and sessions."""
    from django.contrib.auth.models import User
    from django.contrib.sessions.models import Session

    from labapp.models import Classroom

    cookies = [p.cookie.split("=", 1)[1] for p in cast.chatters + cast.browsers]
    Session.objects.filter(session_key__in=cookies).delete()
    User.objects.filter(username__startswith=f"load-{cast.run}-").delete()
    Classroom.objects.filter(pk=cast.classroom_id).delete()


def page_paths(cast: Cast) -> tuple[list[str], list[str]]:
    """(a learner's pages, an instructor's pages)."""
    from labapp.labs.catalog import LABS
    from labapp.models import ChapterSection

    slugs = list(ChapterSection.objects.filter(language="ko").order_by("position").values_list("slug", flat=True))
    learner = ["/", "/labs/", *(f"/labs/{n}/" for n in LABS), *(f"/chapter/{s}/" for s in slugs), "/bench/"]
    learner.append("/chat/history/")
    c = cast.classroom_id
    # An instructor in class goes back to the results between other pages (every sixth page here), so a
    # run has tens of gradebook reads to set against the lab pages', not a handful.
    instructor = [f"/classes/{c}/results.csv", f"/classes/{c}/"]
    for start in range(0, len(learner), 5):
        instructor += [f"/classes/{c}/results/", *learner[start : start + 5]]
    return learner, instructor


def job_start(cast: Cast) -> int:
    """A small load-sweep job (8 requests of 128 → 16 tokens at concurrency 2), owned by an instructor."""
    from django.contrib.auth.models import User

    from bench import services
    from bench.kinds import load

    owner = User.objects.get(pk=cast.browsers[0].user_id)
    return services.job_create(owner=owner, kind=load.KIND.name, config=dict(JOB_CONFIG)).pk


def job_wait(job_id: int, wait_s: float) -> dict[str, Any]:
    from bench.jobrun import FINISHED
    from bench.models import BenchJob

    deadline = time.monotonic() + wait_s
    while True:
        job = BenchJob.objects.get(pk=job_id)
        if job.status in FINISHED or time.monotonic() > deadline:
            seconds = None
            if job.started_at and job.finished_at:
                seconds = round((job.finished_at - job.started_at).total_seconds(), 1)
            return {
                "id": job.pk,
                "status": job.status,
                "requests": f"{job.done_requests}/{job.total_requests}",
                "seconds": seconds,
                "error": job.error[:300],
            }
        time.sleep(1.0)


def answers_check(cast: Cast, asks: list[AskResult]) -> dict[str, Any]:
    """Every ask is a saved answer row, done, with its timing fields; nothing extra was saved."""
    from rag.models import Answer

    rows = {a.pk: a for a in Answer.objects.filter(question__contains=cast.marker)}
    problems: list[str] = []
    for ask in asks:
        row = rows.get(ask.answer_id or 0)
        if row is None or ask.marker not in row.question:
            problems.append(f"{ask.client_id}: no saved answer")
            continue
        if row.status != Answer.Status.DONE:
            problems.append(f"{ask.client_id}: saved as {row.status} {row.error[:120]}")
        # An answer the repeated-line guard stopped was aborted on the engine: vLLM reports no times for it.
        cut = (row.timings or {}).get("finish_reason") == "repeat"
        fields = [path for path in TIMING_FIELDS if not (cut and path[0] == "server")]
        missing = [".".join(path) for path in fields if _dig(row.timings, path) is None]
        if missing:
            problems.append(f"{ask.client_id}: timings without {', '.join(missing)}")
    extra = len(rows) - len({a.answer_id for a in asks if a.answer_id in rows})
    if extra:
        problems.append(f"{extra} saved answers that no ask of this run started")
    return {"asked": len(asks), "saved": len(rows), "problems": problems}


def _dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data
