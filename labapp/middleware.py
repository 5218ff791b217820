from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class KoreanFirstMiddleware:
    """Serve Korean unless the learner chose another language with the switch.

    The course is written for Korean speakers, many of whom browse with an
    English-language browser; so the browser's Accept-Language is not used, and
    only the language cookie set by the switch (Django's set_language) changes it.
    Runs just before LocaleMiddleware.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.META.pop("HTTP_ACCEPT_LANGUAGE", None)
        return self.get_response(request)


class RequestSizeLimitMiddleware:
    """Refuse a request whose declared body is over ``REQUEST_MAX_BYTES`` with a 413 page, unread.

    Runs before any view or CSRF check parses the body, so an oversized upload is never
    parsed into memory or temporary files and nothing is saved. (Daphne itself still
    receives the body before Django sees the request; a proxy in front caps that.)
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0  # malformed: Django's own parsing refuses it
        limit = int(settings.REQUEST_MAX_BYTES)
        if declared > limit:
            context = {"size_mb": declared / (1024 * 1024), "limit_mb": limit // (1024 * 1024)}
            return render(request, "request_too_large.html", context, status=413)
        return self.get_response(request)
