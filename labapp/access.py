"""Who may do what: the role predicates, each written once.

A predicate answers yes or no for any user, anonymous included, and never raises. The
resolvers that turn a "no" into 404 (a user never learns that another user's object
exists) live with each app's objects and are built on these: ``labapp.classes.access``
(classes, learners), ``rag.access`` (collections, documents, conversations) and
``bench.access`` (jobs, engines). This module imports only ``labapp.models`` and Django,
so every app may use it.

The roles:

- **admin**: a Django staff user *or* a superuser (``is_admin``). Both are the people
  who run the server; a superuser who is not staff has every permission anyway, so
  refusing them here would only be a surprise.
- **instructor of a class**: a membership of that class with the instructor role
  (``teaches``); an instructor of any class may create classes and register engines.
- **learner of a class**: a membership with the learner role (``learns_in``). An
  instructor reads a learner's work only through a class they teach that the learner
  is in (``may_view_learner``).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db.models import Q, QuerySet

from labapp.models import Classroom, Membership

AnyUser = AbstractBaseUser | AnonymousUser
ClassroomRef = Classroom | int

# The admin rule as a filter over users; ``is_admin`` is the same rule on one user.
ADMIN_USERS = Q(is_staff=True) | Q(is_superuser=True)


def _pk(classroom: ClassroomRef) -> int:
    return classroom if isinstance(classroom, int) else int(classroom.pk)


def is_admin(user: AnyUser) -> bool:
    """A signed-in staff user or superuser."""
    return bool(user.is_authenticated and (getattr(user, "is_staff", False) or getattr(user, "is_superuser", False)))


def _classes_as(user: AnyUser, role: str | None) -> QuerySet[Classroom]:
    if not user.is_authenticated:
        return Classroom.objects.none()
    if role is None:
        return Classroom.objects.filter(memberships__user_id=user.pk)
    return Classroom.objects.filter(memberships__user_id=user.pk, memberships__role=role)


def classes_of(user: AnyUser) -> QuerySet[Classroom]:
    """Every class the user is a member of, in any role (their class collections)."""
    return _classes_as(user, None)


def classes_teaching(user: AnyUser) -> QuerySet[Classroom]:
    return _classes_as(user, Membership.Role.INSTRUCTOR)


def classes_learning(user: AnyUser) -> QuerySet[Classroom]:
    return _classes_as(user, Membership.Role.LEARNER)


def classes_managed(user: AnyUser) -> QuerySet[Classroom]:
    """The classes whose pages the user may open: those they teach, or every class for an admin."""
    return Classroom.objects.all() if is_admin(user) else classes_teaching(user)


def is_member(user: AnyUser, classroom: ClassroomRef) -> bool:
    return classes_of(user).filter(pk=_pk(classroom)).exists()


def teaches(user: AnyUser, classroom: ClassroomRef) -> bool:
    return classes_teaching(user).filter(pk=_pk(classroom)).exists()


def learns_in(user: AnyUser, classroom: ClassroomRef) -> bool:
    return classes_learning(user).filter(pk=_pk(classroom)).exists()


def teaches_any(user: AnyUser) -> bool:
    return classes_teaching(user).exists()


def may_manage_class(user: AnyUser, classroom: ClassroomRef) -> bool:
    """Open the class's pages, change it, read its learners' work: its instructors and admins."""
    return is_admin(user) or teaches(user, classroom)


def may_create_class(user: AnyUser) -> bool:
    """Admins, and anyone already teaching a class (an admin makes the first instructor)."""
    return is_admin(user) or teaches_any(user)


def may_add_class_material(user: AnyUser, classroom: ClassroomRef) -> bool:
    """Upload into the class's document collection (what every member's chat may quote):
    its instructors and admins. A learner uploads into their own collection."""
    return is_admin(user) or teaches(user, classroom)


def may_register_engine(user: AnyUser) -> bool:
    """Add an engine everyone can pick: admins and instructors of any class."""
    return is_admin(user) or teaches_any(user)


def may_remove_engine(user: AnyUser, added_by_id: int | None) -> bool:
    """Remove a registered engine: whoever added it (while they still may register engines),
    or an admin. Another instructor may not remove a colleague's engine."""
    if is_admin(user):
        return True
    return added_by_id is not None and user.pk == added_by_id and may_register_engine(user)


def may_see_status_details(user: AnyUser) -> bool:
    """The status page's details (addresses, versions, errors, round trips, hosts): everyone
    on a local machine; on a class server only admins (others see each component up or down)."""
    return settings.LAB_MODE != "class" or is_admin(user)


def learners_of(classroom: ClassroomRef) -> QuerySet[User]:
    return User.objects.filter(
        memberships__classroom_id=_pk(classroom), memberships__role=Membership.Role.LEARNER
    ).order_by("username")


def _teaches_learner(user: AnyUser, learner: AbstractBaseUser) -> bool:
    """An admin, or an instructor of a class in which ``learner`` is a learner."""
    return is_admin(user) or classes_learning(learner).filter(pk__in=classes_teaching(user)).exists()


def may_view_learner(user: AnyUser, learner: AbstractBaseUser) -> bool:
    """Read someone's work (jobs, answers, hand-ins): themselves, an admin, or an instructor
    of a class the learner is in. Another instructor, or a classmate, may not."""
    if not user.is_authenticated:
        return False
    return user.pk == learner.pk or _teaches_learner(user, learner)


def plain_learners(users: QuerySet[User]) -> QuerySet[User]:
    """The users whose password an instructor may reset: never an admin or anyone who teaches.

    Otherwise an instructor could take over an account that reaches other classes' data.
    """
    return users.exclude(ADMIN_USERS).exclude(memberships__role=Membership.Role.INSTRUCTOR)


def resettable_by(user: AnyUser, users: QuerySet[User]) -> QuerySet[User]:
    """The plain learners among ``users`` whose password ``user`` may reset.

    An admin may reset any plain learner. An instructor only one who is in their classes
    alone: a learner who is also in a class the instructor does not teach would, once
    signed in as, show that class's documents and the learner's own answers.
    """
    if is_admin(user):
        return plain_learners(users)
    if not user.is_authenticated:
        return users.none()
    elsewhere = Classroom.objects.exclude(pk__in=classes_teaching(user))
    taught = users.filter(memberships__classroom__in=classes_teaching(user))
    return plain_learners(taught).exclude(memberships__classroom__in=elsewhere).distinct()


def may_reset_password(user: AnyUser, learner: AbstractBaseUser) -> bool:
    """Set a temporary password for ``learner``: ``resettable_by`` for one learner (never
    oneself, then: whoever may reset a password is an admin or teaches)."""
    return resettable_by(user, User.objects.filter(pk=learner.pk)).exists()


def password_resettable(user: AnyUser, classroom: ClassroomRef) -> set[int]:
    """``may_reset_password`` for every learner of the class at once (one query for the roster)."""
    if not may_manage_class(user, classroom):
        return set()
    return set(resettable_by(user, learners_of(classroom)).values_list("pk", flat=True))
