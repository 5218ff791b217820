"""Who may reach a class and its learners' data.

A class exists only for its instructors and for admins (staff): everyone else gets
404, never a hint that it exists. A learner's data is reached only through a class
in which they are a learner, by an instructor of that class or an admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db.models import QuerySet
from django.http import Http404

from labapp.models import Classroom, Membership

AnyUser = AbstractBaseUser | AnonymousUser


def is_admin(user: AnyUser) -> bool:
    return bool(user.is_authenticated and (getattr(user, "is_staff", False) or getattr(user, "is_superuser", False)))


def can_create_classes(user: AnyUser) -> bool:
    """Admins, and anyone already teaching a class (the admin makes the first instructor)."""
    if not user.is_authenticated:
        return False
    return is_admin(user) or Membership.objects.filter(user_id=user.pk, role=Membership.Role.INSTRUCTOR).exists()


def classes_taught(user: AnyUser) -> QuerySet[Classroom]:
    if not user.is_authenticated:
        return Classroom.objects.none()
    if is_admin(user):
        return Classroom.objects.all()
    return Classroom.objects.filter(memberships__user_id=user.pk, memberships__role=Membership.Role.INSTRUCTOR)


def classroom_for(user: AnyUser, classroom_id: int) -> Classroom:
    """A class the user teaches (or any class, for an admin), or 404."""
    classroom = classes_taught(user).filter(pk=classroom_id).first()
    if classroom is None:
        raise Http404("class not found")
    return classroom


def learners_of(classroom: Classroom) -> QuerySet[User]:
    return User.objects.filter(memberships__classroom=classroom, memberships__role=Membership.Role.LEARNER).order_by(
        "username"
    )


def learner_for(classroom: Classroom, user_id: int) -> User:
    """A learner of this class (already reached through ``classroom_for``), or 404."""
    learner = learners_of(classroom).filter(pk=user_id).first()
    if learner is None:
        raise Http404("learner not found")
    return learner


def can_reset_password(learner: User) -> bool:
    """An instructor may reset only plain learners: never an admin or anyone who teaches.

    Otherwise an instructor could take over an account that reaches other classes' data.
    """
    if learner.is_staff or learner.is_superuser:
        return False
    return not Membership.objects.filter(user=learner, role=Membership.Role.INSTRUCTOR).exists()


def job_of(learner: User, job_id: int) -> Any:
    from bench.models import BenchJob

    job = BenchJob.objects.filter(pk=job_id, owner=learner).first()
    if job is None:
        raise Http404("job not found")
    return job
