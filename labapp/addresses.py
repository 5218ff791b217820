"""Addresses as a reader sees them: never with their credentials.

An engine's (or Redis's, or a database's) address may carry a user and password
(``http://tutor:secret@gpu-box:8000/v1``) or a token in its query (``?api_key=…``). The client
needs them; nobody reading a page, an export, a saved error or a log line does. This module is
the one place that decides what of an address is shown:

- ``shown(url)``: one address for display: scheme, host, port and path; no user, password,
  query or fragment ("" for what is not an address).
- ``scrubbed(text)``: free text (an exception's message, a saved error, an export's cell) with
  every URL's user and password taken out (up to the address's last ``@``: a password may hold
  one) and the value of every query or fragment parameter named like a secret (``api_key``,
  ``token``, ``password``, ``sig``, …) masked; the rest of the text is left as written (a
  generated answer that quotes a URL keeps its query).
- ``scrubbed_data(value)``: the same for every string inside JSON-like data (an export).
- ``install_log_scrub()``: every log record, its traceback included, scrubbed as it is made,
  whichever handler writes it (Django's, Celery's, Daphne's, a test's).

Errors are scrubbed when saved on a row and again when shown (rows saved before). The test that
walks every page, export and saved error for a planted password is
``tests/site/test_address_secrets.py``.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit

_SCHEME = r"[a-zA-Z][a-zA-Z0-9+.-]*://"
# After a scheme, everything up to the last "@" before the path, query, fragment or a space.
_USERINFO = re.compile(rf"(?P<scheme>{_SCHEME})[^/?#\s]*@")
# A query or fragment parameter named like a secret, and its value (up to the next parameter or space).
_SECRET_PARAMETER = re.compile(
    r"(?P<name>[?&#;][^&#;=\s]*(?:key|token|secret|pass|pwd|auth|sig|session|credential)[^&#;=\s]*=)[^&#;\s]*",
    re.IGNORECASE,
)
MASK = "***"


def shown(url: str) -> str:
    """``url`` without a user name, password, query or fragment: what a learner may read."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname or "", parts.port
    except ValueError:  # "http://[bad", a port out of range: nothing of it is shown
        return ""
    if not parts.scheme or not host:
        return ""
    if ":" in host:
        host = f"[{host}]"  # IPv6
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{parts.path}".rstrip("/")


def scrubbed(text: str) -> str:
    """``text`` with every URL's ``user:password@`` taken out and its secret-named parameters masked."""
    if "://" not in text:
        return text
    return _SECRET_PARAMETER.sub(rf"\g<name>{MASK}", _USERINFO.sub(r"\g<scheme>", text))


def scrubbed_data(value: Any) -> Any:
    """``value`` (dicts, lists, strings, numbers) with every string in it ``scrubbed``."""
    if isinstance(value, str):
        return scrubbed(value)
    if isinstance(value, dict):
        return {key: scrubbed_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrubbed_data(item) for item in value]
    return value


def _scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record with its message and traceback worded and scrubbed now, before any handler sees it."""
    try:
        message = record.getMessage()
    except Exception:  # a call with wrong arguments: logging reports it at the handler, as ever
        return record
    record.msg, record.args = scrubbed(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = scrubbed(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = scrubbed(record.stack_info)
    return record


def install_log_scrub() -> None:
    """Make every log record of this process scrubbed (once, however often it is called)."""
    make = logging.getLogRecordFactory()
    if getattr(make, "scrubs_addresses", False):
        return

    def scrubbing(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return _scrub_record(make(*args, **kwargs))

    scrubbing.scrubs_addresses = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(scrubbing)
