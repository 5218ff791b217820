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
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse

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
