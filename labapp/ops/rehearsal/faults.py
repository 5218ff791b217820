"""Faults during a rehearsal (``--fault web|worker|router|engine``, in that order when several): each is
done to the real process (SIGKILL to it and everything under it) while a lab run is measuring, then
the process is started again, as an operator's supervisor would; what followed is recorded as seen,
defects included, never judged here.

* ``web``: one of the two Daphne processes dies. Learners' open chat sockets on it close; they open
  again through nginx (to the other) and ask again. Recorded: sockets that reopened, questions cut
  mid-answer and how their saved answers ended, 5xx nginx answered meanwhile.
* ``worker``: the Celery worker measuring a run dies (the one holding a connection to the measuring
  engine). Recorded: that run's status afterwards, whether it ended, and how many times it started.
* ``router``: vllm-router stops for 15 s. Recorded: what /status.json says of it while down, a chat
  question asked meanwhile and one asked after it is back.
* ``engine``: the measuring engine dies mid-run. Recorded: whether the run left "running", and how
  (failed naming the engine, or queued again).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import httpx
import psutil

from labapp.ops.loadtest.plan import AskResult
from labapp.ops.loadtest.traffic import _Tab, site_origin, socket_url
from labapp.ops.rehearsal.cluster import Cluster
from labapp.ops.rehearsal.learners import CHAT, Class
from labapp.ops.stack import launch
from labapp.ops.stack.__main__ import port_in_use

FAULTS = ("web", "worker", "router", "engine")
RUN_WAIT_S = 120.0  # how long a fault waits for a lab run to be measuring (else it is skipped)
SETTLE_S = 300.0  # how long a fault follows the run it hit


def kill(cluster: Cluster, name: str) -> None:
    """SIGKILL a rehearsal process and everything under it (its family found first)."""
    service = cluster.services[name]
    try:
        family = [psutil.Process(service.process.pid)]
        family += family[0].children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(service.process.pid, signal.SIGKILL)
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(family, timeout=15)
    service.process.wait(timeout=15)


def restart(cluster: Cluster, name: str) -> float:
    """Start a killed process again with its own command; seconds until it answered."""
    component = cluster.services[name].component
    deadline = time.monotonic() + 30
    while component.port is not None and port_in_use(component.port) and time.monotonic() < deadline:
        time.sleep(0.2)
    service = cluster.services[name] = launch.start_component(component, cluster.log_dir, f"{name}-again")
    return round(service.wait_ready(), 1)


def _running_job() -> dict[str, Any] | None:
    from bench.models import BenchJob

    row = BenchJob.objects.filter(status=BenchJob.Status.RUNNING).values("pk", "engine_url", "attempts").first()
    return dict(row) if row is not None else None


def _job(job_id: int) -> dict[str, Any]:
    from bench.models import BenchJob

    row = BenchJob.objects.filter(pk=job_id).values("status", "attempts", "error", "engine_url").first()
    return dict(row or {"status": "missing"})


async def _measuring(timeout: float = RUN_WAIT_S) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(_running_job)
        if found is not None:
            return found
        await asyncio.sleep(0.3)
    return None


async def _follow(job_id: int, seconds: float = SETTLE_S) -> dict[str, Any]:
    """The run's states until it ended (or ``seconds`` passed): each change with when it came."""
    began, seen, states = time.monotonic(), "", []
    row: dict[str, Any] = {}
    while time.monotonic() - began < seconds:
        row = await asyncio.to_thread(_job, job_id)
        if row["status"] != seen:
            seen = row["status"]
            states.append(f"{seen} at +{time.monotonic() - began:.0f} s")
        if seen in ("done", "failed", "cancelled", "missing"):
            break
        await asyncio.sleep(0.5)
    return {"job": job_id, "states": states, "attempts": row.get("attempts"), "error": str(row.get("error"))[:300]}


def _worker_measuring(cluster: Cluster) -> str | None:
    """The worker whose processes hold a connection to the measuring engine."""
    port = cluster.ports.measure
    for name, service in cluster.services.items():
        if not name.startswith("worker"):
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(service.process.pid)
            for member in [root, *root.children(recursive=True)]:
                if any(c.raddr and c.raddr.port == port for c in member.net_connections(kind="tcp")):
                    return name
    return None


async def fault_web(cluster: Cluster, klass: Class) -> dict[str, Any]:
    before_log, before_cut = len(cluster.access_log()), sum(p.cut_asks for p in klass.learners)
    before_reopen = klass.reopened
    await asyncio.to_thread(kill, cluster, "web-a")
    await asyncio.sleep(30)  # the class goes on on the other web process
    again_s = await asyncio.to_thread(restart, cluster, "web-a")
    fivexx = [line for line in cluster.access_log()[before_log:] if line[:1] == "5"]
    return {
        "killed": "web-a (Daphne)",
        "restarted_after_s": 30 + again_s,
        "sockets_reopened": klass.reopened - before_reopen,
        "answers_cut_mid_stream": sum(p.cut_asks for p in klass.learners) - before_cut,
        "5xx_meanwhile": len(fivexx),
        "5xx_lines": fivexx[:5],
    }


async def fault_worker(cluster: Cluster, klass: Class) -> dict[str, Any]:
    run = await _measuring()
    if run is None:
        return {"skipped": "no run was measuring"}
    await asyncio.sleep(1.0)
    name = await asyncio.to_thread(_worker_measuring, cluster)
    if name is None:
        return {"skipped": f"no worker held a connection to the measuring engine (run #{run['pk']})"}
    await asyncio.to_thread(kill, cluster, name)
    await asyncio.sleep(5)
    again_s = await asyncio.to_thread(restart, cluster, name)
    return {"killed": f"{name} (Celery) measuring run #{run['pk']}", "restarted_after_s": 5 + again_s} | await _follow(
        run["pk"]
    )


async def _chat_once(web: str, klass: Class, label: str) -> dict[str, Any]:
    """One question from the instructor's chat (a socket of its own): how it ended."""
    ask = AskResult(-1, f"fault-{label}", f"CR{klass.run}-fault-{label}")
    tab = _Tab(-1, "instructor", klass.chat)
    began = time.perf_counter()
    try:
        async with asyncio.timeout(150):
            async with await _connect(web, klass.instructor_cookie) as socket:
                await tab.ask(socket, ask, f"프리필이란? ({ask.marker})", CHAT)
    except Exception as exc:  # what the asker saw is the record
        ask.status, ask.error = "closed", f"{type(exc).__name__}: {exc}"
    return {"status": ask.status, "error": ask.error[:200], "seconds": round(time.perf_counter() - began, 1)}


async def _connect(web: str, cookie: str) -> Any:
    import websockets

    return await websockets.connect(
        socket_url(web, "/ws/chat/"), origin=site_origin(web), additional_headers={"Cookie": cookie}, open_timeout=30
    )


async def fault_router(cluster: Cluster, klass: Class) -> dict[str, Any]:
    await asyncio.to_thread(kill, cluster, "router")
    await asyncio.sleep(3)
    async with httpx.AsyncClient(base_url=cluster.url, headers={"Cookie": klass.instructor_cookie}) as http:
        shown = (await http.get("/status.json", timeout=30)).json()
    router = next((c for c in shown.get("components", []) if c.get("key") == "router"), None)
    during = await _chat_once(cluster.url, klass, "router-down")
    await asyncio.sleep(max(0.0, 15 - 3 - during["seconds"]))
    again_s = await asyncio.to_thread(restart, cluster, "router")
    return {
        "killed": "router (vllm-router)",
        "status_json_router": router,
        "chat_while_down": during,
        "restarted_after_s": again_s,
        "chat_after": await _chat_once(cluster.url, klass, "router-back"),
    }


async def fault_engine(cluster: Cluster, klass: Class) -> dict[str, Any]:
    run = await _measuring()
    if run is None:
        return {"skipped": "no run was measuring"}
    await asyncio.sleep(1.0)
    await asyncio.to_thread(kill, cluster, "engine-measure")
    followed = await _follow(run["pk"], seconds=180)
    again_s = await asyncio.to_thread(restart, cluster, "engine-measure")
    return {"killed": f"engine-measure measuring run #{run['pk']}", "restarted_after_s": again_s} | followed


ACTIONS = {"web": fault_web, "worker": fault_worker, "router": fault_router, "engine": fault_engine}


async def faults_run(cluster: Cluster, klass: Class, names: list[str], found: dict[str, Any]) -> None:
    """Each named fault in turn, each once a lab run is measuring; what followed lands in ``found``."""
    for name in names:
        if await _measuring() is None:
            found[name] = {"skipped": "no lab run was measuring any more"}
            continue
        began = time.monotonic()
        try:
            found[name] = await ACTIONS[name](cluster, klass)
        except Exception as exc:  # the fault's own failure is a finding too
            found[name] = {"error": f"{type(exc).__name__}: {exc}"}
        found[name]["took_s"] = round(time.monotonic() - began, 1)
        print(f"[class] fault {name}: {found[name]}", flush=True)
