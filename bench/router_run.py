"""A short-lived vllm-router in front of given engines, for a measurement of its routing policy
(issue 29 item 7): on a free loopback port, with its Prometheus on another and the stack's own flags
(``rag.vllm.router.router_command``, as ``labapp.ops.stack.components.router`` starts it); ready once
every engine is healthy in its /workers; stopped (its process group) on every exit path of ``started``.
While it runs, ``rag.vllm.router.launched`` knows its Prometheus address and policy (a run's provenance
reads them)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx

from rag.vllm import router
from rag.vllm.router import ROUTER_BINARY, router_command

POLICIES = ("round_robin", "consistent_hash", "cache_aware", "power_of_two")


class RouterFailed(RuntimeError):
    """The router did not start, or did not find its engines healthy in time."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str, engines: int) -> bool:
    try:
        listed = httpx.get(f"{url}/workers", timeout=2.0).json().get("workers") or []
    except (httpx.HTTPError, ValueError):
        return False
    return sum(1 for w in listed if isinstance(w, dict) and w.get("is_healthy") is True) >= engines


@contextlib.contextmanager
def started(policy: str, engines: list[str], *, timeout_s: float = 60.0) -> Iterator[str]:
    """The router's base URL while the block runs."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    if not ROUTER_BINARY.exists():
        raise RouterFailed(f"vllm-router is not installed ({ROUTER_BINARY}: make router)")
    port, metrics_port = free_port(), free_port()
    command = router_command(port=port, metrics_port=metrics_port, engines=engines, policy=policy)
    env = os.environ | {"RUST_LOG": "warn"}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(url, len(engines)):
            if process.poll() is not None:
                raise RouterFailed(f"vllm-router ({policy}) exited with status {process.returncode}")
            if time.monotonic() > deadline:
                raise RouterFailed(f"vllm-router ({policy}) did not find its {len(engines)} engines healthy")
            time.sleep(0.2)
        router.remember(url, router.Launch(metrics_url=f"http://127.0.0.1:{metrics_port}", policy=policy))
        yield url
    finally:
        router.forget(url)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
