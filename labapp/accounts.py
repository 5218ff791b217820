"""Who is using the lab.

``LAB_MODE=local`` is one learner on their own machine: no sign-in, a local
account is made on first visit and the browser is signed in to it.
``LAB_MODE=class`` uses Django's sign-in pages; the classroom issue adds
sign-up with join codes and roles on top.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.models import AbstractBaseUser, User
from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from labapp.models import TemporaryPassword

LOCAL_USERNAME = "learner"


def local_user() -> User:
    user, created = User.objects.get_or_create(username=LOCAL_USERNAME)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


class LocalLearnerMiddleware:
    """In local mode, sign every visitor in as the one local learner."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.LAB_MODE == "local" and not request.user.is_authenticated:
            login(request, local_user(), backend="django.contrib.auth.backends.ModelBackend")
        return self.get_response(request)


MUST_CHANGE_PASSWORD = "must-change-password"  # noqa: S105 - session key set at a sign-in with a temporary password


def must_change_password(user: AbstractBaseUser) -> bool:
    """The user's password was set by an instructor (or a roster) and is not changed yet."""
    return TemporaryPassword.objects.filter(user_id=user.pk).exists()


def password_change_due(session: SessionBase | None, user: AbstractBaseUser) -> bool:
    """This session must change its password before anything else: flagged at sign-in, or
    a temporary password is still on the account (the websockets' rule, ``labapp.sockets``)."""
    return bool(session is not None and session.get(MUST_CHANGE_PASSWORD)) or must_change_password(user)


class PasswordChangeRequiredMiddleware:
    """After a sign-in with a temporary password every page leads to the password change
    until it is done; signing out, the language switch and static files stay reachable."""

    OPEN_PREFIXES = ("/accounts/password_change/", "/accounts/logout/", "/i18n/", "/static/")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.session.get(MUST_CHANGE_PASSWORD)
            and request.user.is_authenticated
            and not request.path.startswith(self.OPEN_PREFIXES)
        ):
            return redirect(reverse("password_change"))
        return self.get_response(request)


def locked_out(request: HttpRequest, response: HttpResponse | None = None, credentials: object = None) -> HttpResponse:
    """django-axes' answer to a sign-in it refused (``AXES_LOCKOUT_CALLABLE``): a page saying
    why and for how long, 429. Axes calls it with two or three arguments, hence the defaults."""
    context = {"limit": settings.AXES_FAILURE_LIMIT, "minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)}
    return render(request, "registration/locked_out.html", context, status=429)
