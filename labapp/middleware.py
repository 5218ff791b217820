from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


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
