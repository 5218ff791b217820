"""Writes of the classroom: classes, join codes, sign-up, temporary passwords, assignments."""

from __future__ import annotations

import secrets
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from labapp.models import Assignment, Classroom, Membership, TemporaryPassword

# No 0/O, 1/I/L: a code read aloud or copied from a projector survives.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
PASSWORD_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # noqa: S105 - an alphabet, not a password


class JoinCodeError(ValueError):
    """Why a join code does not let anyone in (the message names the reason)."""


def join_code_new() -> str:
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if not Classroom.objects.filter(join_code=code).exists():
            return code


def normalize_code(code: str) -> str:
    return "".join(code.split()).upper().replace("-", "")


def password_new() -> str:
    """Three groups of four: easy to read out, about 62 bits, passes Django's validators."""
    groups = ["".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(4)) for _ in range(3)]
    return "-".join(groups)


def classroom_create(*, name: str, instructor: AbstractBaseUser) -> Classroom:
    """A new class with a fresh join code; its creator is its first instructor."""
    for _attempt in range(5):
        try:
            with transaction.atomic():
                classroom = Classroom.objects.create(name=name.strip(), join_code=join_code_new())
                Membership.objects.create(classroom=classroom, user_id=instructor.pk, role=Membership.Role.INSTRUCTOR)
                return classroom
        except IntegrityError:  # the same code drawn by a concurrent request: draw again
            continue
    raise RuntimeError("could not draw a unique join code")


def classroom_join_code_regenerate(*, classroom: Classroom, expires_at: datetime | None) -> Classroom:
    """A new code (the old one stops working at once), open for sign-ups, with an optional expiry."""
    classroom.join_code = join_code_new()
    classroom.join_code_expires_at = expires_at
    classroom.join_open = True
    classroom.save(update_fields=["join_code", "join_code_expires_at", "join_open"])
    return classroom


def classroom_join_set(*, classroom: Classroom, open_: bool) -> Classroom:
    classroom.join_open = open_
    classroom.save(update_fields=["join_open"])
    return classroom


def classroom_by_code(code: str) -> Classroom:
    """The class this code lets a learner into now, or JoinCodeError saying why not."""
    normalized = normalize_code(code)
    classroom = Classroom.objects.filter(join_code=normalized).first() if normalized else None
    if classroom is None:
        raise JoinCodeError(_("이 가입 코드를 쓰는 수업이 없습니다. 강사에게 받은 코드를 다시 확인하세요."))
    if not classroom.join_open:
        raise JoinCodeError(_("이 수업은 지금 가입을 받지 않습니다. 강사에게 문의하세요."))
    if classroom.join_code_expires_at is not None and classroom.join_code_expires_at <= timezone.now():
        raise JoinCodeError(_("이 가입 코드는 기한이 지났습니다. 강사에게 새 코드를 받으세요."))
    return classroom


def learner_signup(*, username: str, email: str, password: str, classroom: Classroom) -> User:
    """A new account that is a learner of ``classroom``: both rows or neither."""
    with transaction.atomic():
        user = User.objects.create_user(username=username, email=email, password=password)
        Membership.objects.create(classroom=classroom, user=user, role=Membership.Role.LEARNER)
    return user


def classroom_join(*, user: AbstractBaseUser, classroom: Classroom) -> bool:
    """Join as a learner; False when already a member (an instructor stays an instructor)."""
    _membership, created = Membership.objects.get_or_create(
        classroom=classroom, user_id=user.pk, defaults={"role": Membership.Role.LEARNER}
    )
    return created


def password_set_temporary(*, learner: User, by: AbstractBaseUser, password: str = "") -> str:
    """Set a password the learner must change at their next sign-in; returns it (shown once).

    Whoever was signed in as the learner (on any device) is signed out, their open
    sockets closed (``labapp.session_ends``, on the password's change): only the person
    given the new password gets in.
    """
    chosen = password or password_new()
    with transaction.atomic():
        learner.set_password(chosen)
        learner.save(update_fields=["password"])
        TemporaryPassword.objects.update_or_create(user=learner, defaults={"set_by_id": by.pk})
    return chosen


def password_changed(*, user: AbstractBaseUser) -> None:
    TemporaryPassword.objects.filter(user_id=user.pk).delete()


def assignment_create(
    *, classroom: Classroom, lab: int, opens_at: datetime, due_at: datetime, late_rule: str
) -> Assignment:
    return Assignment.objects.create(
        classroom=classroom, lab=lab, opens_at=opens_at, due_at=due_at, late_rule=late_rule
    )


def assignment_update(
    *, assignment: Assignment, lab: int, opens_at: datetime, due_at: datetime, late_rule: str
) -> Assignment:
    assignment.lab, assignment.opens_at, assignment.due_at = lab, opens_at, due_at
    assignment.late_rule = late_rule
    assignment.save(update_fields=["lab", "opens_at", "due_at", "late_rule"])
    return assignment


def assignment_delete(*, assignment: Assignment) -> None:
    assignment.delete()
