"""The browser story's TLS-terminating proxy (tests/tls_proxy.py) does what a class server's proxy must."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.tls_proxy import closing_response_head, forwarded_head, tls_proxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A backend that answers with the head it got (and the body), or takes an upgrade and echoes."""
    head = await reader.readuntil(b"\r\n\r\n")
    if b"\r\nUpgrade: websocket" in head:
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
    else:
        length = next(
            (int(line[15:]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
        )
        body = head + await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
    writer.close()


@pytest.fixture
def backend() -> Iterator[tuple[str, int]]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_server(_echo, "127.0.0.1", 0), loop).result(10)
    yield "127.0.0.1", int(server.sockets[0].getsockname()[1])
    loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


def test_heads_carry_the_proxys_forwarding_headers_not_the_clients_and_close_after_one_request() -> None:
    head = b"GET /x HTTP/1.1\r\nHost: a:1\r\nX-Forwarded-Proto: http\r\nConnection: keep-alive\r\n\r\n"
    assert forwarded_head(head, client_host="10.0.0.9") == (
        b"GET /x HTTP/1.1\r\nHost: a:1\r\nConnection: close\r\nX-Forwarded-Proto: https\r\n"
        b"X-Forwarded-For: 10.0.0.9\r\n\r\n"
    )
    upgrade = b"GET /ws/ HTTP/1.1\r\nHost: a:1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    assert b"Connection: Upgrade\r\nX-Forwarded-Proto: https" in forwarded_head(upgrade, client_host="::1")
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"
    assert closing_response_head(response) == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
    switching = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    assert closing_response_head(switching) == switching


def test_https_requests_reach_the_backend_as_forwarded_https(backend: tuple[str, int], tmp_path: Path) -> None:
    with tls_proxy(backend, tmp_path) as url:
        verify = ssl.create_default_context(cafile=str(tmp_path / "proxy-cert.pem"))
        with httpx.Client(verify=verify) as client:  # the certificate is good for 127.0.0.1
            got = client.post(f"{url}/accounts/login/", content=b"a=1", headers={"X-Forwarded-Proto": "http"})
            again = client.get(f"{url}/classes/")
    assert got.status_code == 200 and got.content.startswith(b"POST /accounts/login/ HTTP/1.1\r\n")
    assert got.content.count(b"X-Forwarded-Proto") == 1 and b"X-Forwarded-Proto: https\r\n" in got.content
    assert got.content.endswith(b"\r\n\r\na=1") and again.content.startswith(b"GET /classes/ ")


def test_a_websocket_upgrade_keeps_its_connection_both_ways(backend: tuple[str, int], tmp_path: Path) -> None:
    with tls_proxy(backend, tmp_path) as url:
        port = int(url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(tmp_path / "proxy-cert.pem"))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /ws/chat/ HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                answer = b""
                while b"\r\n\r\n" not in answer:
                    answer += tls.recv(1024)
                tls.sendall(b"ping")
                echoed = tls.recv(1024)
                with contextlib.suppress(OSError):
                    tls.unwrap()
    assert answer.startswith(b"HTTP/1.1 101 ") and echoed == b"PING"
