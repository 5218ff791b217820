"""Resolvers of the class pages: the class, its learners, their work, its assignments, or 404.

A class exists only for its instructors and for admins (``labapp.access.may_manage_class``):
everyone else gets 404, never a hint that it exists. A learner's data (jobs, answers,
hand-ins) is reached only through a class in which they are a learner. The rules are
the predicates of ``labapp.access``; nothing here re-states them.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import Http404

from bench.access import job_for_viewer
from bench.models import BenchJob
from labapp.access import AnyUser, classes_managed, learners_of, may_manage_class
from labapp.models import Assignment, Classroom


def classroom_for(user: AnyUser, classroom_id: int) -> Classroom:
    """A class the user teaches (or any class, for an admin), or 404."""
    classroom = classes_managed(user).filter(pk=classroom_id).first()
    if classroom is None:
        raise Http404("class not found")
    return classroom


def learner_for(user: AnyUser, classroom: Classroom, user_id: int) -> User:
    """A learner of a class the user manages, or 404 (an instructor of the class is not one)."""
    learner = learners_of(classroom).filter(pk=user_id).first() if may_manage_class(user, classroom) else None
    if learner is None:
        raise Http404("learner not found")
    return learner


def learner_job_for(user: AnyUser, learner: User, job_id: int) -> BenchJob:
    """One of this learner's jobs, read-only, for someone who may read their work, or 404."""
    return job_for_viewer(user, job_id, owner=learner)


def assignment_for(user: AnyUser, classroom: Classroom, assignment_id: int) -> Assignment:
    """An assignment of a class the user manages, or 404."""
    found = Assignment.objects.filter(pk=assignment_id, classroom=classroom).first()
    if found is None or not may_manage_class(user, classroom):
        raise Http404("assignment not found")
    return found
