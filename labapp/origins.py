"""Websockets are opened only from the site's own pages: the Origin must be one of the site's origins.

Channels' ``AllowedHostsOriginValidator`` compares host names only, so a page served on
another port of the same host (another local web server, a notebook) could open
``/ws/chat/`` as the local learner. Here an origin is the site's when its scheme, host
and port are exactly those of the request itself (its Host header, itself one of
ALLOWED_HOSTS, with ws → http and wss → https), or exactly an entry of
CSRF_TRUSTED_ORIGINS (``https://lab.example.org`` of a proxy in front). A handshake
without an Origin (which no browser sends) is refused on a class server; on a local
machine it is a command-line client of the learner's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Application = Callable[[Scope, Receive, Send], Awaitable[None]]
Origin = tuple[str, str, int]  # scheme, host, port

_DEFAULT_PORT = {"http": 80, "https": 443}
_PAGE_SCHEME = {"ws": "http", "wss": "https"}


def parse_origin(value: str) -> Origin | None:
    """``scheme://host[:port]`` as (scheme, host, port), the port filled in; None for anything else."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:  # a bad IPv6 literal or port
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORT or not parts.hostname or "@" in parts.netloc or parts.path not in ("", "/"):
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORT[scheme]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin1")
    return None


def own_origin(scope: Scope) -> Origin | None:
    """The origin of the page that opened this socket on this site: the Host header, when allowed."""
    host = _header(scope, b"host")
    scheme = _PAGE_SCHEME.get(str(scope.get("scheme", "ws")))
    if host is None or scheme is None:
        return None
    allowed = settings.ALLOWED_HOSTS or ([".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, allowed):
        return None
    return parse_origin(f"{scheme}://{host}")


def origin_allowed(scope: Scope) -> bool:
    value = _header(scope, b"origin")
    if value is None:
        return settings.LAB_MODE != "class"
    origin = parse_origin(value)
    if origin is None:
        return False
    trusted = {parse_origin(entry) for entry in settings.CSRF_TRUSTED_ORIGINS}
    return origin == own_origin(scope) or origin in trusted


class SameOriginValidator:
    """ASGI middleware: a websocket whose Origin is not the site's is closed before the application sees it."""

    def __init__(self, application: Application) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            await WebsocketDenier()(scope, receive, send)
            return
        await self.application(scope, receive, send)
