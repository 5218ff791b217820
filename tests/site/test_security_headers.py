"""Every response carries the security headers, whatever produced it: a view, a redirect, or a refusal
made before any view runs (the request-size 413, a bad Host's 400, a CSRF 403, 404, 405, a server
error's 500, a static file).

Django's middleware is an onion: a response made by one layer passes out only through the layers
listed before it. The header-setting layers therefore come first in ``MIDDLEWARE`` (right after
``SecurityMiddleware``), and this test walks every way the site answers instead of one page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from labapp import urls as site_urls
from tests.site.test_csp import POLICY, policy_of

pytestmark = pytest.mark.django_db


def _fails(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a view that breaks")


urlpatterns = [path("broken/", _fails), *site_urls.urlpatterns]  # the site's URLs plus one that raises


def _page(client: Client) -> Any:
    return client.get("/")


def _redirect(client: Client) -> Any:
    return client.get("/bench/")  # signed out, in class mode: to the sign-in page


def _bad_host(client: Client) -> Any:
    return client.get("/", HTTP_HOST="evil.example")


def _csrf(client: Client) -> Any:
    strict = Client(enforce_csrf_checks=True)
    return strict.post("/accounts/login/", {"username": "x", "password": "y"})


def _missing(client: Client) -> Any:
    return client.get("/no-such-page/")


def _wrong_method(client: Client) -> Any:
    return client.post("/chapter/")


def _too_large(client: Client) -> Any:
    return client.post("/accounts/login/", data=b"x", content_type="text/plain", CONTENT_LENGTH=str(10**12))


def _server_error(client: Client) -> Any:
    return client.get("/broken/")


def _static(client: Client) -> Any:
    return client.get("/static/lab/lab.css")


WAYS: dict[str, tuple[Callable[[Client], Any], int]] = {
    "page": (_page, 200),
    "redirect": (_redirect, 302),
    "bad host": (_bad_host, 400),
    "csrf": (_csrf, 403),
    "not found": (_missing, 404),
    "wrong method": (_wrong_method, 405),
    "too large": (_too_large, 413),
    "server error": (_server_error, 500),
    "static file": (_static, 200),
}


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("way", sorted(WAYS))
def test_every_kind_of_response_carries_the_security_headers(way: str, settings: Any) -> None:
    settings.LAB_MODE = "class"
    settings.DEBUG = False
    User.objects.create_user("someone")
    make, status = WAYS[way]
    response = make(Client(raise_request_exception=False))
    assert response.status_code == status, way
    assert policy_of(response) == POLICY, way
    assert response.headers.get("X-Frame-Options") == "DENY", way
    assert response.headers.get("X-Content-Type-Options") == "nosniff", way
    assert response.headers.get("Referrer-Policy"), way
    assert response.headers.get("Cross-Origin-Opener-Policy"), way
