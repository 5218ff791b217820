"""vllm-router, in front of the chat's engines when LAB_ROUTER is on: the pool it reports.

The router (started by ``labapp.ops.stack.components.router``) is an OpenAI-compatible server:
the chat streams through it with ``rag.vllm.client`` as through an engine (``client.chat_url``).
Only what is its own is asked here: ``GET /workers``, each engine with the router's verdict on
its health (its checks every few seconds, and its circuit breaker after failed requests).

What vllm-router 0.1.17 tells about itself (tried on the real binary, 2026-12-06): ``/workers``,
``/list_workers``, ``/get_loads``, ``/readiness``, ``/health`` and ``/liveness`` on its port, and
its Prometheus ``/metrics`` on the other port (``--prometheus-port``). No endpoint, header or metric
gives its version; its policy appears only as the label of
``vllm_router_policy_decisions_total``, after it has routed one request. Every other path
(``/version``, ``/metrics``, ``/server_info``) it passes to one of its engines, picked by its policy,
without the query string.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings

from rag.vllm.client import tls

ROUTER_BINARY = Path(__file__).resolve().parents[2] / ".venv-router" / "bin" / "vllm-router"

# vllm-router's defaults suit a cluster: a health check a minute, five failed requests before its
# circuit breaker takes an engine out (each request that meets a dead engine fails until then), and a
# startup check every 30 s. A class's engines are few: a dead one costs two failed attempts, after
# which the request is retried on another engine (tests/ops/test_router.py kills one), and its
# health checks find it down within about 10 s (the status page's engine list).
ROUTER_FLAGS = (
    "--worker-startup-timeout-secs", "900",  # the engine's own ready_timeout_s: it may still be starting
    "--worker-startup-check-interval", "2",
    "--health-check-interval-secs", "5",
    "--health-failure-threshold", "2",
    "--health-success-threshold", "1",
    "--cb-failure-threshold", "2",
    "--cb-timeout-duration-secs", "15",
    "--retry-max-retries", "3",
    "--request-timeout-secs", "600",
)  # fmt: skip


def router_command(*, port: int, metrics_port: int, engines: list[str], policy: str) -> list[str]:
    """vllm-router's command line on loopback, with the flags above: the stack's router and a policy
    measurement (``bench.router_run``) start it alike."""
    return [
        str(ROUTER_BINARY), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *engines,
        "--policy", policy, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port), *ROUTER_FLAGS,
    ]  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """A router this project started: where its Prometheus ``/metrics`` answers, and the ``--policy``
    on its command line when this process started it (None: another process did)."""

    metrics_url: str
    policy: str | None


_STARTED: dict[str, Launch] = {}  # base URL -> launch: the routers this process runs (bench.router_run)


def remember(url: str, launch: Launch) -> None:
    _STARTED[url.rstrip("/")] = launch


def forget(url: str) -> None:
    _STARTED.pop(url.rstrip("/"), None)


def launched(url: str) -> Launch | None:
    """How the router at ``url`` was started, when this project started it: one this process runs,
    or the stack's embedded router (on LAB_ROUTER_PORT, its Prometheus on LAB_ROUTER_METRICS_PORT).
    None for a router run elsewhere: its Prometheus address is its operator's, and its own port's
    ``/metrics`` is one of its engines'."""
    if url.rstrip("/") in _STARTED:
        return _STARTED[url.rstrip("/")]
    if settings.ROUTER_EMBEDDED and url.rstrip("/") == str(settings.ROUTER_URL).rstrip("/"):
        return Launch(metrics_url=f"http://127.0.0.1:{settings.LAB_ROUTER_METRICS_PORT}", policy=None)
    return None


@dataclass(frozen=True)
class Worker:
    url: str
    healthy: bool
    load: int  # requests the router has in flight on it


class NoHealthyEngine(RuntimeError):
    """The router answers, but none of its engines is healthy: a chat request has nowhere to go."""


def url() -> str:
    """The router's address: the embedded one, or LAB_ROUTER_URL's."""
    return str(settings.ROUTER_URL)


def workers(*, timeout: float = 3.0) -> list[Worker]:
    """The router's engines as it sees them; an httpx error when it does not answer."""
    with httpx.Client(base_url=url(), timeout=timeout, verify=tls()) as http:
        response = http.get("/workers")
        response.raise_for_status()
    listed = response.json().get("workers")
    if not isinstance(listed, list):
        raise ValueError("the router's /workers has no list of workers")
    return [
        Worker(url=str(w.get("url", "?")), healthy=w.get("is_healthy") is True, load=int(w.get("load") or 0))
        for w in listed
        if isinstance(w, dict)
    ]
