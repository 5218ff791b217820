"""The only HTTP client for vLLM (any OpenAI-compatible server).

Streams with usage and vLLM's per-request metrics, timestamps every chunk with
``time.perf_counter()`` in this process and folds them into a ``RequestRecord``
(``rag.vllm.records``).  A failed request is returned as a record with its error;
nothing here raises past the caller for a request that went wrong.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import httpx
from django.conf import settings
from httpx_aiohttp import AiohttpTransport

from labapp import addresses
from rag.vllm.records import RequestRecord, apply_chunk

OnText = Callable[[str, RequestRecord], Awaitable[None]]
Api = Literal["completions", "chat"]


# Why an engine is unusable, for a short generic message on a page (``bench.engines.REASONS``).
Failure = Literal["unreachable", "timeout", "http_status", "not_openai", "no_model", "model_missing"]


class EngineUnavailable(RuntimeError):
    """The vLLM server could not be reached or answered with an error.

    ``reason`` sorts the failure; ``detail`` is a short technical note without the raw
    exception text (an HTTP status, a content type, an exception's class name), fit for
    the people who register engines. ``server`` is what did not answer: vLLM, or the router
    in front of the chat's engines. The message itself is for logs and the status page.
    """

    def __init__(
        self, message: str, *, reason: Failure = "unreachable", detail: str = "", server: str = "vLLM"
    ) -> None:
        super().__init__(addresses.scrubbed(message))  # it names the engine: never with its credentials
        self.reason: Failure = reason
        self.detail = detail[:120]
        self.server = server

    @classmethod
    def at(cls, url: str, what: str, *, reason: Failure = "unreachable", detail: str = "") -> EngineUnavailable:
        """The failure of what answers at ``url`` (vLLM or the router), named so: "vLLM at URL: what"."""
        server = server_name(url)
        return cls(f"{server} at {url}: {what}", reason=reason, detail=detail, server=server)

    @property
    def routed(self) -> bool:
        """The router in front of the engines did not answer (not, necessarily, the engines)."""
        return self.server == ROUTER_NAME


ROUTER_NAME = "vllm-router"


def server_name(url: str) -> str:
    """What answers at ``url``, as an error names it: the router when it is the chat's router, else vLLM."""
    routed = bool(settings.LAB_ROUTER) and url.rstrip("/") == str(settings.ROUTER_URL).rstrip("/")
    return ROUTER_NAME if routed else "vLLM"


@dataclass(frozen=True)
class EngineInfo:
    base_url: str
    version: str
    model: str
    max_model_len: int | None
    models: list[str]


# What an httpx error with no text of its own means (a dropped connection raises ReadError("")).
_WHEN_SILENT = {
    "ReadError": "the connection closed while the answer was being read",
    "WriteError": "the connection closed while the request was being sent",
    "RemoteProtocolError": "the server closed the connection mid-answer",
    "ConnectError": "could not connect",
    "ReadTimeout": "no data within the read timeout",
    "ConnectTimeout": "could not connect within the timeout",
}


# What aiohttp's errors are in httpx's terms. httpx-aiohttp re-raises every connection error as
# ConnectTimeout (a refused connection and a server that hung up alike); the cause says which it was.
_AIOHTTP_AS = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientOSError, httpx.ReadError),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
)


_DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def _as_httpx(exc: BaseException) -> type[BaseException]:
    """The httpx class an exception stands for: its own, or that of the aiohttp error beneath it."""
    cause = exc.__cause__
    if isinstance(exc, httpx.TransportError) and isinstance(cause, aiohttp.ClientError):
        for aio_class, httpx_class in _AIOHTTP_AS:
            if isinstance(cause, aio_class):
                return httpx_class
    return type(exc)


def explain(exc: BaseException) -> str:
    """``"ReadError: the connection closed …"``: the class and its text, or what the class means
    when the exception carries no text (so an error message never ends in an empty reason)."""
    name = _as_httpx(exc).__name__
    text = str(exc).strip()
    if not text or isinstance(exc.__cause__, aiohttp.ClientPayloadError):
        # aiohttp's own words for a cut stream ("Response payload is not completed: <Transfer…>") say less.
        text = _WHEN_SILENT.get(name, text or "no further detail")
    return f"{name}: {text}"


def base_url() -> str:
    return str(settings.VLLM_BASE_URL)


def chat_url() -> str:
    """Where the chat's requests to the configured engine go: vllm-router when one is configured
    (LAB_ROUTER, ``rag.vllm.router``), which spreads them over its engines, else the engine itself."""
    return str(settings.ROUTER_URL) if settings.LAB_ROUTER else base_url()


# The header vllm-router's consistent_hash policy reads first: one session's requests go to one engine
# (whose prefix cache holds its earlier prompts) while that engine is healthy. Engines ignore it.
SESSION_HEADER = "X-Session-ID"


def engine_info(
    *, timeout: float = 3.0, url: str | None = None, wanted: str | None = None, health: bool = True
) -> EngineInfo:
    """Version, served models and max model length, or EngineUnavailable with the reason.

    ``url`` defaults to the configured engine, whose model is VLLM_MODEL when set; for
    another engine ``wanted`` names the model it must serve (None: its first). ``timeout``
    bounds each request; :func:`probe` is the same question within one deadline in all.
    ``health`` False skips ``/health``: a router answers it 503 while any one of its engines is
    down, though it still sends requests to the others.
    """
    if url is None:
        url, wanted = base_url(), settings.VLLM_MODEL or None
    try:
        with httpx.Client(base_url=url, timeout=timeout, verify=tls()) as http:
            if health:
                _answered(http.get("/health"), url)
            models = _answered(http.get("/v1/models"), url)
            version = http.get("/version")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        raise _unreachable(url, exc, timeout) from exc
    return _info(url, models, version, wanted)


def chat_engine_info(*, timeout: float = 3.0) -> EngineInfo:
    """:func:`engine_info` of the configured engine as the chat reaches it (:func:`chat_url`): through the
    router, without its ``/health`` (the whole pool's), when one is configured."""
    url = chat_url()
    return engine_info(timeout=timeout, url=url, wanted=settings.VLLM_MODEL or None, health=url == base_url())


async def probe(url: str, *, wanted: str | None = None, timeout: float = 2.0) -> EngineInfo:
    """:func:`engine_info` of any server, within ``timeout`` seconds in all.

    One deadline over its three requests (``/health``, ``/v1/models``, ``/version``),
    however slowly the server sends its bytes. Anything that is not an OpenAI-compatible
    answer (HTML, malformed JSON, an unexpected shape) is an EngineUnavailable, never
    another exception.
    """
    try:
        async with asyncio.timeout(timeout), connect(url, timeout=timeout) as http:
            _answered(await http.get("/health"), url)
            models = _answered(await http.get("/v1/models"), url)
            version = await http.get("/version")
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, TimeoutError) as exc:
        raise _unreachable(url, exc, timeout) from exc
    return _info(url, models, version, wanted)


def _unreachable(url: str, exc: BaseException, timeout: float) -> EngineUnavailable:
    kind = _as_httpx(exc)
    if issubclass(kind, TimeoutError | httpx.TimeoutException):
        return EngineUnavailable.at(url, f"no answer within {timeout:g} s", reason="timeout", detail=kind.__name__)
    return EngineUnavailable.at(url, explain(exc), detail=kind.__name__)


def _answered(response: httpx.Response, url: str) -> httpx.Response:
    """The response if it is a success, else EngineUnavailable naming its status."""
    if not response.is_success:
        where = f"{response.request.url.path}: HTTP {response.status_code}"
        raise EngineUnavailable.at(url, where, reason="http_status", detail=where)
    return response


def _not_openai(url: str, where: str) -> EngineUnavailable:
    return EngineUnavailable.at(url, f"{where} is not an OpenAI-compatible answer", reason="not_openai", detail=where)


def _cards(models: httpx.Response, url: str) -> list[dict[str, Any]]:
    """The model cards of a ``/v1/models`` answer: ``{"data": [{"id": "...", ...}, ...]}``."""
    try:
        body = models.json()
    except ValueError as exc:  # HTML, plain text, broken JSON or bytes that are no text
        kind = models.headers.get("content-type", "?").split(";")[0].strip()[:40]
        raise _not_openai(url, f"/v1/models ({kind})") from exc
    cards = body.get("data") if isinstance(body, dict) else None
    if not isinstance(cards, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in cards):
        raise _not_openai(url, "/v1/models")
    return cards


def _version(response: httpx.Response) -> str:
    """vLLM's ``/version``; "?" for a server without one (other OpenAI-compatible servers)."""
    try:
        body = response.json() if response.status_code == 200 else None
    except ValueError:
        return "?"
    version = body.get("version") if isinstance(body, dict) else None
    return str(version)[:40] if isinstance(version, str | int | float) else "?"


def _info(url: str, models: httpx.Response, version: httpx.Response, wanted: str | None) -> EngineInfo:
    cards = _cards(models, url)
    if not cards:
        raise EngineUnavailable.at(url, "serves no model", reason="no_model")
    served = [str(c["id"]) for c in cards]
    card = next((c for c in cards if c["id"] == wanted), None) if wanted else cards[0]
    if card is None:
        raise EngineUnavailable.at(
            url,
            f"does not serve the model {wanted!r} (it serves {', '.join(served)})",
            reason="model_missing",
            detail=f"{wanted!r} ∉ {', '.join(served)}",
        )
    length = card.get("max_model_len")
    return EngineInfo(
        base_url=url,
        version=_version(version),
        model=str(card["id"]),
        max_model_len=length if isinstance(length, int) and not isinstance(length, bool) else None,
        models=served,
    )


_SHORT = httpx.Timeout(30.0, connect=5.0)
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)


# Idle pooled connections are dropped before the engine's own keep-alive (uvicorn, 5 s)
# would close them under a request about to be sent.
KEEPALIVE = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0)
HTTPX_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's own default pool


@functools.cache
def tls() -> ssl.SSLContext:
    """One TLS context for every client of this process: building one reads the CA bundle (~50 ms
    on two cores), which a lab run would otherwise pay for every client it opens."""
    return httpx.create_ssl_context()


class _Transport(AiohttpTransport):
    """httpx-aiohttp's transport for URLs with credentials in them as well: httpx has already made
    their Authorization header, and aiohttp refuses a request that carries both."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.userinfo:
            request.url = request.url.copy_with(username=None, password=None)
        return await super().handle_async_request(request)


def _transport(limits: httpx.Limits) -> AiohttpTransport:
    """aiohttp's connection pool and C HTTP parser beneath httpx (httpx-aiohttp): the transport of
    vLLM's own benchmark client, for a fraction of httpcore's CPU per streamed chunk.

    ``max_connections`` None is no cap (aiohttp's 0); idle connections close after
    ``keepalive_expiry``. The session is made on first use, inside the running event loop.
    """

    def session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=limits.keepalive_expiry or 2.0,
            ssl=tls(),
        )
        return aiohttp.ClientSession(connector=connector, auto_decompress=False)

    return _Transport(verify=tls(), limits=limits, client=session)


def _client(base_url: str, *, timeout: float | httpx.Timeout, limits: httpx.Limits) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=_transport(limits), verify=tls())


@asynccontextmanager
async def connect(
    base_url: str, *, timeout: float | httpx.Timeout = 60.0, limits: httpx.Limits | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The one way to open a connection pool to a vLLM (OpenAI-compatible) server.

    Yields an ``httpx.AsyncClient`` bound to ``base_url`` and closes it on exit.
    ``limits`` None keeps httpx's own pool limits (:data:`HTTPX_LIMITS`, 100
    connections); a load run passes its own.
    """
    pool = limits if limits is not None else HTTPX_LIMITS
    async with _client(base_url, timeout=timeout, limits=pool) as http:
        yield http


def shared_client(url: str | None = None) -> httpx.AsyncClient:
    """One pooled client per event loop and server (``url``, default the configured engine): no
    TLS-context build or TCP connect per request.

    (Making an ``httpx.AsyncClient`` costs ~20-30 ms here, which would land in
    every chat answer's time-to-first-token.) A cancelled stream closes its own
    connection, so vLLM still sees the disconnect and aborts the request.
    """
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    url = url or base_url()
    if url not in per_loop:
        per_loop[url] = _client(url, timeout=_SHORT, limits=KEEPALIVE)
    return per_loop[url]


async def close_shared_clients() -> None:
    """Close this event loop's shared clients: for a loop about to end (a command's or a test's
    ``asyncio.run``), whose open connections would otherwise be reported as unclosed."""
    for http in _clients.pop(asyncio.get_running_loop(), {}).values():
        await http.aclose()


async def engine_model(url: str) -> str:
    """The model an OpenAI-compatible server at ``url`` serves (VLLM_MODEL for the configured engine)."""
    if settings.VLLM_MODEL and url.rstrip("/") == base_url().rstrip("/"):
        return str(settings.VLLM_MODEL)
    try:
        async with connect(url, timeout=_SHORT) as http:
            response = await http.get("/v1/models")
            response.raise_for_status()
            return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise EngineUnavailable.at(url, explain(exc)) from exc


def model_name() -> str:
    if settings.VLLM_MODEL:
        return str(settings.VLLM_MODEL)
    return engine_info().model


def _streaming(model: str | None, max_tokens: int, temperature: float, frequency_penalty: float) -> dict[str, Any]:
    """What every streamed request carries: usage on every chunk, per docs/metrics.md; a frequency
    penalty when there is one (0 sends none: the engine's default)."""
    payload: dict[str, Any] = {
        "model": model or model_name(),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if frequency_penalty:
        payload["frequency_penalty"] = frequency_penalty
    return payload


async def stream_completion(
    prompt: str,
    *,
    max_tokens: int,
    model: str | None = None,
    temperature: float = 0.0,
    ignore_eos: bool = False,
    stop: list[str] | None = None,
    frequency_penalty: float = 0.0,
    on_text: OnText | None = None,
    client: httpx.AsyncClient | None = None,
    timeout: float = 600.0,
    record: RequestRecord | None = None,
    session: str = "",
) -> RequestRecord:
    """Stream one /v1/completions request and return its measured record.

    ``timeout`` bounds every wait on the server (connect, each read): a stalled
    engine ends the request with an error instead of hanging the caller. ``session``, when
    given, is sent as :data:`SESSION_HEADER`.
    """
    payload = _streaming(model, max_tokens, temperature, frequency_penalty) | {"prompt": prompt}
    if ignore_eos:
        payload["ignore_eos"] = True
    if stop:
        payload["stop"] = stop
    return await _stream(
        "/v1/completions", payload, on_text=on_text, client=client, timeout=timeout, record=record, session=session
    )


async def stream_chat(
    messages: list[dict[str, str]],
    *,
    max_tokens: int,
    model: str | None = None,
    temperature: float = 0.0,
    frequency_penalty: float = 0.0,
    on_text: OnText | None = None,
    client: httpx.AsyncClient | None = None,
    timeout: float = 600.0,
    record: RequestRecord | None = None,
    session: str = "",
) -> RequestRecord:
    """Stream one /v1/chat/completions request (the model's own chat template)."""
    payload = _streaming(model, max_tokens, temperature, frequency_penalty) | {"messages": messages}
    return await _stream(
        "/v1/chat/completions",
        payload,
        on_text=on_text,
        client=client,
        timeout=timeout,
        record=record,
        session=session,
    )


@dataclass(frozen=True)
class RequestSpec:
    """One request to stream: a prompt for ``/v1/completions``, or chat turns for ``/v1/chat/completions``.

    ``ignore_eos`` (completions only) defaults to True, as a load run asks for exactly
    ``max_tokens``; the chat passes False. ``messages`` empty: the prompt as one user turn.
    """

    prompt: str
    max_tokens: int
    ignore_eos: bool = True
    api: Api = "completions"
    stop: tuple[str, ...] = ()
    temperature: float = 0.0
    messages: tuple[dict[str, str], ...] = ()
    # OpenAI's penalty on tokens the answer has already written (the prompt's are not counted):
    # 0 sends none; sent to either API.
    frequency_penalty: float = 0.0


async def stream_request(
    spec: RequestSpec,
    *,
    model: str | None = None,
    on_text: OnText | None = None,
    client: httpx.AsyncClient | None = None,
    timeout: float = 600.0,
    record: RequestRecord | None = None,
    session: str = "",
) -> RequestRecord:
    """Stream ``spec`` to the API it names: the one per-request path of the chat and the load runs."""
    if spec.api == "chat":
        return await stream_chat(
            list(spec.messages) or [{"role": "user", "content": spec.prompt}],
            max_tokens=spec.max_tokens,
            model=model,
            temperature=spec.temperature,
            frequency_penalty=spec.frequency_penalty,
            on_text=on_text,
            client=client,
            timeout=timeout,
            record=record,
            session=session,
        )
    return await stream_completion(
        spec.prompt,
        max_tokens=spec.max_tokens,
        model=model,
        temperature=spec.temperature,
        ignore_eos=spec.ignore_eos,
        stop=list(spec.stop) or None,
        frequency_penalty=spec.frequency_penalty,
        on_text=on_text,
        client=client,
        timeout=timeout,
        record=record,
        session=session,
    )


async def count_tokens(texts: list[str], *, model: str, client: httpx.AsyncClient | None = None) -> list[int]:
    """Token counts in the engine's own tokenizer (``/tokenize``, no special tokens added).

    Without ``client`` it opens a pool of its own and closes it before returning, not this loop's
    shared one: its caller may be a sync view whose ``async_to_sync`` loop ends right after, which
    would leave a shared client's session unclosed (reported as such when it is collected).
    """
    if client is None:
        async with connect(base_url(), timeout=_SHORT) as http:
            return await count_tokens(texts, model=model, client=http)
    http = client
    try:

        async def one(text: str) -> int:
            response = await http.post("/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False})
            if response.status_code != 200:
                raise EngineUnavailable(f"/tokenize answered HTTP {response.status_code}: {response.text[:200]}")
            return int(response.json()["count"])

        return list(await asyncio.gather(*(one(text) for text in texts)))
    except httpx.HTTPError as exc:
        raise EngineUnavailable.at(base_url(), explain(exc)) from exc


async def reset_prefix_cache(client: httpx.AsyncClient) -> str:
    """Empty the engine's prefix cache: "ok", or why not ("unsupported": vLLM serves
    ``/reset_prefix_cache`` only with VLLM_SERVER_DEV_MODE=1, as the embedded engine runs)."""
    try:
        response = await client.post("/reset_prefix_cache", timeout=_SHORT)
    except httpx.HTTPError as exc:
        return f"error: {explain(exc)}"
    if response.status_code in (404, 405):
        return "unsupported"
    if response.status_code != 200:
        return f"error: HTTP {response.status_code}"
    try:
        success = bool(response.json().get("success", True))
    except ValueError:
        success = True  # older servers answer 200 with no body
    return "ok" if success else "error: blocks still in use"


_chat_template: dict[tuple[str, str], bool] = {}


async def has_chat_template(model: str, *, client: httpx.AsyncClient | None = None) -> bool:
    """Whether the served model has a chat template (asked once per server and model).

    vLLM's ``/tokenize`` applies the chat template to ``messages`` and answers
    400 when the model has none, as base models such as Gemma 3 270M do not.
    """
    http = client or shared_client()
    key = (str(http.base_url).rstrip("/"), model)
    if key not in _chat_template:
        try:
            response = await http.post(
                "/tokenize", json={"model": model, "messages": [{"role": "user", "content": "hi"}]}, timeout=_SHORT
            )
        except httpx.HTTPError as exc:
            raise EngineUnavailable.at(base_url(), explain(exc)) from exc
        _chat_template[key] = response.status_code == 200
    return _chat_template[key]


def _error_message(body: str) -> str:
    """The human part of an OpenAI-style error body (``{"error": {"message": ...}}``)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:500]
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:500]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])[:500]
    return body[:500]


async def _stream(
    path: str,
    payload: dict[str, Any],
    *,
    on_text: OnText | None,
    client: httpx.AsyncClient | None,
    timeout: float,
    record: RequestRecord | None = None,
    session: str = "",
) -> RequestRecord:
    """Stream into ``record`` (a caller that may be cancelled keeps the partial answer)."""
    record = record if record is not None else RequestRecord()
    http = client or shared_client()
    headers = {SESSION_HEADER: session} if session else None
    answered = False
    try:
        for attempt in (1, 2):
            try:
                record.t_send = time.perf_counter()
                async with http.stream(
                    "POST", path, json=payload, headers=headers, timeout=httpx.Timeout(timeout, connect=5.0)
                ) as response:
                    answered = True
                    return await _read(response, record, on_text)
            except httpx.TransportError as exc:
                # A connection the server dropped before answering (seen once in 100 answers under
                # load): nothing was generated for this request, so it is sent once more.
                if answered or attempt == 2 or not issubclass(_as_httpx(exc), _DROPPED):
                    raise
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        record.error = f"{explain(exc)} ({server_name(str(http.base_url))} at {http.base_url})"
    finally:
        record.t_end = time.perf_counter()
    if record.error:  # saved with the job's results and shown: never with an address's credentials
        record.error = addresses.scrubbed(record.error)
    return record


async def _read(response: httpx.Response, record: RequestRecord, on_text: OnText | None) -> RequestRecord:
    """The body of an answered request: SSE lines into ``record``."""
    if response.status_code != 200:
        body = (await response.aread()).decode(errors="replace")
        record.error = f"HTTP {response.status_code}: {_error_message(body)}"
        return record
    ended = False
    async for line in response.aiter_lines():
        # After [DONE] the body's end follows: it is read, so the connection goes back to the pool.
        if ended or not line.startswith("data:"):
            continue
        now = time.perf_counter()
        data = line[5:].strip()
        if data == "[DONE]":
            ended = True
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            record.error = str(chunk["error"])
            return record
        text = apply_chunk(record, chunk, now)
        if text and on_text is not None:
            await on_text(text, record)
    record.success = bool(record.text_chunk_at) or record.output_tokens == 0
    if not record.success and record.error is None:
        record.error = "the stream ended without generated text"
    return record
