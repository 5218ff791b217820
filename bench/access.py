"""Resolvers of benchmark jobs and engines: the object, or 404.

Used by the job pages, the job progress websocket, the demo page and the class pages
alike. A job belongs to its owner: only they watch, cancel, export or compare it, and delete it
when its kind allows (an imported run: ``job_to_delete``).
Someone who may read the owner's work (``labapp.access.may_view_learner``: an admin,
or an instructor of a class the owner learns in) may look at it read-only
(``job_for_viewer``, from the class pages).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from bench import engines
from bench.models import BenchJob, Engine
from labapp.access import AnyUser, may_remove_engine, may_view_learner
from labapp.request_numbers import whole


def owns(user: AnyUser, job: BenchJob) -> bool:
    return bool(user.is_authenticated and job.owner_id == user.pk)


def jobs_of(user: AnyUser) -> QuerySet[BenchJob]:
    """The user's own jobs (none for an anonymous visitor)."""
    if not user.is_authenticated:
        return BenchJob.objects.none()
    return BenchJob.objects.filter(owner_id=user.pk)


def owned_job(user: AnyUser, job_id: int, *, kind: str | None = None) -> BenchJob | None:
    """The user's job (of this kind, when given), or None: for a page that shows nothing instead."""
    jobs = jobs_of(user).filter(pk=job_id)
    return (jobs.filter(kind=kind) if kind is not None else jobs).first()


def job_for(user: AnyUser, job_id: int, *, kind: str | None = None) -> BenchJob:
    """The user's own job, or 404 (another user's job does not exist for them)."""
    job = owned_job(user, job_id, kind=kind)
    if job is None:
        raise Http404("job not found")
    return job


def job_to_delete(user: AnyUser, job_id: int) -> BenchJob:
    """The user's own job of a kind its owner may delete (``JobKind.deletable``: an imported run), or 404:
    another person's job does not exist for them, and a run measured here is never deleted."""
    job = job_for(user, job_id)
    if not job.deletable:
        raise Http404("job not deletable")
    return job


def jobs_for(user: AnyUser, job_ids: Iterable[int]) -> list[BenchJob]:
    """All of these jobs, by id, when every one is the user's; else 404 (a comparison page)."""
    wanted = set(job_ids)
    found = list(jobs_of(user).filter(pk__in=wanted).order_by("pk"))
    if len(found) != len(wanted):
        raise Http404("job not found")
    return found


def job_for_viewer(user: AnyUser, job_id: int, *, owner: AbstractBaseUser | None = None) -> BenchJob:
    """A job for reading: its owner, an admin, or an instructor of the owner; else 404.

    ``owner`` narrows it to that person's jobs (a learner reached through a class page).
    """
    jobs = BenchJob.objects.filter(pk=job_id).select_related("owner")
    job = (jobs.filter(owner_id=owner.pk) if owner is not None else jobs).first()
    if job is None or not may_view_learner(user, job.owner):
        raise Http404("job not found")
    return job


def engine_for(user: AnyUser, engine_id: int) -> Engine:
    """A registered engine, for whoever may remove it (who added it, or an admin); else 404."""
    engine = Engine.objects.filter(pk=engine_id).first()
    if engine is None or not may_remove_engine(user, engine.added_by_id):
        raise Http404("engine not found")
    return engine


def engine_to_pick(user: AnyUser, key: str) -> engines.Choice | None:
    """The engine a signed-in user picks by its key on the engines page (a registered engine's id,
    or a configured engine's: ``engines.CONFIGURED``, ``CONFIGURED-2``, …), or None: an engine no
    longer there, or a key that names none. The page posts keys, never addresses, which may carry
    credentials."""
    if not user.is_authenticated:
        return None
    options = engines.choices()
    mine = next((c for c in options if c.configured and c.key == key), None)  # CONFIGURED, CONFIGURED-2, …
    wanted = whole(key, low=1) if mine is None else None
    return mine or next((c for c in options if wanted is not None and c.id == wanted), None)


def removable_engines(user: AnyUser) -> list[Engine]:
    """The registered engines ``engine_for`` gives this user (the page's remove buttons)."""
    return [engine for engine in Engine.objects.all() if may_remove_engine(user, engine.added_by_id)]
