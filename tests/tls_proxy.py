"""A TLS-terminating proxy for tests: what a class server's nginx or Caddy does in front of Daphne.

The browser talks https (a self-signed certificate for 127.0.0.1; the test's browser
context ignores that it is self-signed) to the proxy, which passes each request on to the
plain-http backend with ``X-Forwarded-Proto: https`` and ``X-Forwarded-For``, replacing
whatever the client sent in those headers, as docs/operations.md asks of a proxy.
Django trusts the header through ``SECURE_PROXY_SSL_HEADER`` (labapp/settings.py), so the
site runs with its real class-mode settings: secure cookies, the https redirect, HSTS.

One request per upstream connection (``Connection: close`` both ways) keeps the proxy from
having to find where a response ends; a websocket handshake (``Upgrade``) keeps its
connection and is piped both ways until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOP_HEADERS = (b"connection", b"keep-alive", b"x-forwarded-proto", b"x-forwarded-for")
MAX_HEAD = 64 * 1024


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 and localhost, valid for a day: (cert, key) paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "proxy-cert.pem", directory / "proxy-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def forwarded_head(head: bytes, *, client_host: str) -> bytes:
    """A request head as the proxy sends it on: the client's forwarding and hop headers
    replaced by the proxy's own, ``Connection: close`` unless it is a websocket upgrade."""
    request_line, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    fields = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in HOP_HEADERS]
    upgrade = any(line.split(b":", 1)[0].strip().lower() == b"upgrade" for line in lines)
    fields.append(b"Connection: Upgrade" if upgrade else b"Connection: close")
    fields += [b"X-Forwarded-Proto: https", b"X-Forwarded-For: " + client_host.encode("ascii")]
    return b"\r\n".join([request_line, *fields]) + b"\r\n\r\n"


def closing_response_head(head: bytes) -> bytes:
    """A response head as the proxy sends it back: ``Connection: close`` (the client opens a
    new connection for its next request), unless it switches to a websocket."""
    status_line, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    if status_line.split(b" ")[1:2] == [b"101"]:
        return head
    fields = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")]
    return b"\r\n".join([status_line, *fields, b"Connection: close"]) + b"\r\n\r\n"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class TlsProxy:
    """``https://127.0.0.1:<port>`` in front of ``backend`` (``host:port``), on its own event loop in a thread."""

    def __init__(self, backend: tuple[str, int], certificate: tuple[Path, Path]) -> None:
        self.backend = backend
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(*certificate)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.backend)
        except OSError:
            writer.close()
            return
        up_writer.write(forwarded_head(head, client_host=str(peer[0])))
        await up_writer.drain()
        to_backend = asyncio.ensure_future(_pipe(reader, up_writer))  # a request's body, a socket's frames
        with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.write(closing_response_head(await up_reader.readuntil(b"\r\n\r\n")))
            await _pipe(up_reader, writer)  # until the backend closes: this request (or socket) is over
        writer.close()
        to_backend.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await to_backend
        up_writer.close()

    def start(self) -> str:
        self._thread.start()
        start = asyncio.start_server(self._client, "127.0.0.1", 0, ssl=self.context, limit=MAX_HEAD)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(timeout=10)
        self.url = f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.url

    def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@contextlib.contextmanager
def tls_proxy(backend: tuple[str, int], directory: Path) -> Iterator[str]:
    """The proxy running while the block runs; yields its https base URL."""
    proxy = TlsProxy(backend, self_signed(directory))
    url = proxy.start()
    try:
        yield url
    finally:
        proxy.stop()
