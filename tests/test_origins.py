"""A websocket opens only from the site's own origin: scheme, host and port, or a trusted proxy origin.

Through the real ASGI application with channels' ``WebsocketCommunicator`` (``/ws/ping/``
accepts anyone the origin check lets through), and the rule itself for what a test
client cannot set (the ``wss`` scheme of a TLS socket).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from labapp import origins
from labapp.asgi import application
from labapp.ops.loadtest.traffic import site_origin
from tests import aio

# A consumer's dispatch closes stale database connections (channels.db): it needs the database.
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def in_memory_layer(settings: Any) -> Iterator[None]:
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def _opens(host: str, origin: str | None) -> bool:
    headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin is not None else [])

    async def go() -> bool:
        socket = WebsocketCommunicator(application, "/ws/ping/", headers=headers)
        connected, _ = await socket.connect()
        await socket.disconnect()
        return bool(connected)

    return aio.run(go())


@pytest.mark.parametrize(
    ("host", "origin", "opens"),
    [
        ("localhost:8000", "http://localhost:8000", True),  # the page's own origin
        ("LOCALHOST:8000", "http://localhost:8000", True),  # host names are case-blind
        ("localhost", "http://localhost:80", True),  # the default port, written or not
        ("[::1]:8000", "http://[::1]:8000", True),
        ("localhost:8000", "http://localhost:8888", False),  # another port of the same host
        ("localhost:8000", "http://localhost", False),
        ("localhost:8000", "https://localhost:8000", False),  # another scheme
        ("localhost:8000", "http://127.0.0.1:8000", False),  # another host name
        ("localhost:8000", "http://evil.example", False),
        ("localhost:8000", "null", False),  # a sandboxed page or a file
        ("evil.example:8000", "http://evil.example:8000", False),  # a host not in ALLOWED_HOSTS (DNS rebinding)
        ("localhost:8000", "http://user@localhost:8000", False),  # not an origin at all
    ],
)
def test_only_the_sites_own_origin_opens_a_socket(host: str, origin: str, opens: bool) -> None:
    assert _opens(host, origin) is opens


def test_a_trusted_proxy_origin_opens_a_socket_exactly(settings: Any) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://lab.example.org"]
    settings.ALLOWED_HOSTS = ["lab.example.org", "127.0.0.1"]
    assert _opens("127.0.0.1:8000", "https://lab.example.org")  # the proxy speaks plain ws to Daphne
    assert _opens("127.0.0.1:8000", "https://lab.example.org:443")
    assert not _opens("127.0.0.1:8000", "https://lab.example.org:8443")
    assert not _opens("127.0.0.1:8000", "http://lab.example.org")
    assert not _opens("127.0.0.1:8000", "https://other.example.org")


def test_a_socket_without_an_origin_opens_only_on_a_local_machine(settings: Any) -> None:
    settings.LAB_MODE = "local"
    assert _opens("localhost:8000", None)  # the learner's own command-line client
    settings.LAB_MODE = "class"
    assert not _opens("localhost:8000", None)


def test_a_tls_socket_is_the_https_pages_own() -> None:
    def scope(origin: str) -> dict[str, Any]:
        return {
            "type": "websocket",
            "scheme": "wss",
            "headers": [(b"host", b"localhost"), (b"origin", origin.encode())],
        }

    assert origins.origin_allowed(scope("https://localhost"))
    assert not origins.origin_allowed(scope("http://localhost"))
    assert not origins.origin_allowed(scope("https://localhost:8443"))


@pytest.mark.parametrize("web", ["http://localhost:8000", "http://127.0.0.1:9123/", "https://lab:pw@localhost"])
def test_the_load_test_sends_the_origin_the_site_accepts(web: str) -> None:
    """``labapp.ops.loadtest.traffic`` opens its sockets as the pages do (``chat_overhead`` sends
    ``--web`` itself, the same origin when it is one)."""
    host = web.split("//", 1)[1].rpartition("@")[2].rstrip("/")
    scheme = "wss" if web.startswith("https") else "ws"
    headers = [(b"host", host.encode()), (b"origin", site_origin(web).encode())]
    assert origins.origin_allowed({"type": "websocket", "scheme": scheme, "headers": headers})
