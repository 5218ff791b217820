"""Events that end a user's sessions, and the one step that ends them.

Every event below ends the user's other sessions and closes every socket of theirs
(``sessions_end``), whichever code made it: the site's views, Django's admin, a
management command or a service. The step is hung on the rows, not on the views (model
signals, connected in ``labapp.apps``), because the admin and Django's own commands
write these rows without passing through any code of ours; and the one list of events,
``EVENTS``, is what the signal receivers below name and what
``tests/test_session_ends.py`` walks, one way at a time.

When the user acted on their own account (their own password change, an admin editing
themselves), the session they acted from is kept: Django's ``update_session_auth_hash``
then rotates it. Their sockets close all the same (a socket holds the user as it was at
connect, and the page reconnects within seconds with the user as now).

What no event can reach (the channel layer down, a query-set ``update()`` that sends no
signal) the sockets still catch: each re-checks its session on every frame, and every
``SOCKET_SESSION_RECHECK_S`` seconds while idle (``labapp.sockets.SessionSocket``).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable
from enum import StrEnum
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from labapp import sockets
from labapp.models import Membership

log = logging.getLogger(__name__)


class Event(StrEnum):
    PASSWORD = "password"  # noqa: S105 - own change, instructor's reset, admin, changepassword
    ACTIVE = "active"  # is_active changed: deactivated (or made active again)
    ADMIN_RIGHTS = "admin-rights"  # is_staff, is_superuser, groups or permissions changed
    CLASS_ROLE = "class-role"  # a membership's role changed: learner made instructor, instructor demoted
    CLASS_LEFT = "class-left"  # a membership deleted: removed from a class, or the class deleted
    DELETED = "deleted"  # the account deleted


EVENTS: tuple[Event, ...] = tuple(Event)

# The user's fields whose change is an event, and which event.
USER_FIELDS: dict[str, Event] = {
    "password": Event.PASSWORD,
    "is_active": Event.ACTIVE,
    "is_staff": Event.ADMIN_RIGHTS,
    "is_superuser": Event.ADMIN_RIGHTS,
}

_acting: contextvars.ContextVar[HttpRequest | None] = contextvars.ContextVar("acting_request", default=None)


class ActingRequestMiddleware:
    """Remembers the request being served, so that an event knows whose session acted."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _acting.set(request)
        try:
            return self.get_response(request)
        finally:
            _acting.reset(token)


def acting_session_key(user_id: object) -> str | None:
    """The session of the request being served, when it is the user's own; else None."""
    request = _acting.get()
    user = getattr(request, "user", None)
    if request is None or user is None or not user.is_authenticated or str(user.pk) != str(user_id):
        return None
    key = getattr(getattr(request, "session", None), "session_key", None)
    return key if isinstance(key, str) else None


def sessions_end(*, user_id: object, event: Event) -> int:
    """The one step: delete the user's stored sessions but the one they acted from now,
    close every socket of theirs after the commit; returns how many sessions were deleted.

    Only a database session engine (Django's ``db``, ``cached_db``) can be searched by
    user; with another engine nothing is deleted here, and a password change still signs
    the other sessions out at their next request (Django checks each session's password
    hash), as the sockets do at their next frame. Finding them is one pass over the
    unexpired sessions (a class server has a few hundred).
    """
    keep = acting_session_key(user_id)
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    keys = [key for key in _session_keys(store_class, user_id) if key != keep]
    for key in keys:
        store_class(session_key=key).delete()  # through the store: cached_db forgets its cache too
    transaction.on_commit(lambda: sockets.sockets_close(user_id=user_id))
    log.info("user %s: %s changed, %d other session(s) ended, sockets closed", user_id, event, len(keys))
    return len(keys)


def _session_keys(store_class: Any, user_id: object) -> list[str]:
    get_model = getattr(store_class, "get_model_class", None)
    if get_model is None:
        return []
    rows = get_model().objects.filter(expire_date__gt=timezone.now()).only("session_key", "session_data")
    return [
        r.session_key for r in rows.iterator() if store_class().decode(r.session_data).get(SESSION_KEY) == str(user_id)
    ]


# --- the events, on the rows ------------------------------------------------------------


def _changed_events(before: dict[str, Any], instance: Any, fields: dict[str, Event]) -> set[Event]:
    return {event for name, event in fields.items() if name in before and before[name] != getattr(instance, name)}


def _watched(instance: Any, update_fields: Iterable[str] | None, fields: Iterable[str]) -> list[str]:
    """The watched fields this save may change (none for a new row: it has no sessions)."""
    if instance.pk is None or instance._state.adding:
        return []
    return [f for f in fields if update_fields is None or f in update_fields]


@receiver(pre_save, sender=User, dispatch_uid="labapp.session_ends.user_before")
@receiver(pre_save, sender=Membership, dispatch_uid="labapp.session_ends.membership_before")
def _remember_before(sender: Any, instance: Any, update_fields: Iterable[str] | None = None, **kwargs: Any) -> None:
    names = _watched(instance, update_fields, _fields_of(sender))
    before = sender.objects.filter(pk=instance.pk).values(*names).first() if names else None
    instance._session_fields_before = before or {}


@receiver(post_save, sender=User, dispatch_uid="labapp.session_ends.user_after")
@receiver(post_save, sender=Membership, dispatch_uid="labapp.session_ends.membership_after")
def _end_on_change(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    before = getattr(instance, "_session_fields_before", {})
    instance._session_fields_before = {}
    events = _changed_events(before, instance, _fields_of(sender))
    if events and not created:
        sessions_end(user_id=_user_id(instance), event=min(events))


@receiver(post_delete, sender=User, dispatch_uid="labapp.session_ends.user_deleted")
@receiver(post_delete, sender=Membership, dispatch_uid="labapp.session_ends.membership_deleted")
def _end_on_delete(sender: Any, instance: Any, **kwargs: Any) -> None:
    sessions_end(user_id=_user_id(instance), event=Event.DELETED if sender is User else Event.CLASS_LEFT)


@receiver(m2m_changed, sender=User.groups.through, dispatch_uid="labapp.session_ends.groups")
@receiver(m2m_changed, sender=User.user_permissions.through, dispatch_uid="labapp.session_ends.permissions")
def _end_on_rights(sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[Any] | None, **kw: Any) -> None:
    if action not in ("post_add", "post_remove", "pre_clear") or (action != "pre_clear" and not pk_set):
        return
    if not reverse:
        users: Iterable[Any] = [instance.pk]
    elif action == "pre_clear":  # a group or permission taken from everyone: who had it
        users = sender.objects.filter(**{_m2m_target(sender): instance.pk}).values_list("user_id", flat=True)
    else:
        users = pk_set or ()
    for user_id in list(users):
        sessions_end(user_id=user_id, event=Event.ADMIN_RIGHTS)


def _m2m_target(through: Any) -> str:
    return "group_id" if through is User.groups.through else "permission_id"


def _fields_of(sender: Any) -> dict[str, Event]:
    return USER_FIELDS if sender is User else {"role": Event.CLASS_ROLE}


def _user_id(instance: Any) -> object:
    return instance.pk if isinstance(instance, User) else instance.user_id
