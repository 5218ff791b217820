"""Faults during a rehearsal (``--fault web|worker|router|engine``, in that order when several): each is
done to the real process (SIGKILL to it and everything under it) while a lab run is measuring, then
the process is started again, as an operator's supervisor would; what followed is recorded as seen,
defects included, never judged here.

* ``web``: one of the two Daphne processes dies, once a learner's answer is streaming on a chat socket
  it serves (nginx's ``X-Lab-Upstream`` on the socket's handshake says which; after ``WEB_WAIT_S``
  without one, the one holding a learner's open socket). Those sockets close; chat.js opens them
  again 2 s later through nginx (to the other process) and the learner sends the question again.
  Recorded: the sockets on it and where and when each opened again; each answer in flight: what the
  learner's page had shown and how its row was saved (status, text kept); frames misdelivered
  meanwhile; the 5xx nginx answered meanwhile and the forms learners sent again.
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
import time
from typing import Any

import httpx
import psutil

from labapp import engine_layout as layout
from labapp.ops.loadtest.plan import AskResult
from labapp.ops.loadtest.traffic import _Tab, site_origin, socket_url
from labapp.ops.rehearsal.cluster import Cluster
from labapp.ops.rehearsal.learners import CHAT, Browser, Class
from labapp.ops.stack import launch
from labapp.ops.stack.__main__ import port_in_use

FAULTS = ("web", "worker", "router", "engine")
RUN_WAIT_S = 120.0  # how long a fault waits for a lab run to be measuring (else it is skipped)
SETTLE_S = 300.0  # how long a fault follows the run it hit
WEB_WAIT_S = 180.0  # how long the web fault waits for an answer streaming on a socket (else: an open socket)
WEB_DOWN_S = 30.0  # how long the killed web process stays down
ROW_WAIT_S = 30.0  # how long an answer cut by the web fault may stay "streaming" before the report reads it


def kill(cluster: Cluster, name: str) -> None:
    """SIGKILL a rehearsal process and everything under it."""
    cluster.services[name].kill()


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


def _measuring_engine() -> layout.EngineSpec:
    """The layout's (first) measuring engine: the one the faults hit."""
    return layout.current().measuring[0]


def _worker_measuring(cluster: Cluster) -> str | None:
    """The worker whose processes hold a connection to the measuring engine."""
    port = _measuring_engine().port
    for name, service in cluster.services.items():
        if not name.startswith("worker"):
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(service.process.pid)
            for member in [root, *root.children(recursive=True)]:
                if any(c.raddr and c.raddr.port == port for c in member.net_connections(kind="tcp")):
                    return name
    return None


def _web_names(cluster: Cluster) -> dict[str, str]:
    """nginx's upstream address (host:port) → the web process's name."""
    return {f"127.0.0.1:{cluster.ports.web_a}": "web-a", f"127.0.0.1:{cluster.ports.web_b}": "web-b"}


# The fault hits an answer that has streamed on its page this long: ``rag.keeper`` has written its first
# text (at the first token) and is within its next ``TEXT_GAP_S``. A kill in the first milliseconds of an
# answer leaves a row with no text (one CI run: 3 tokens shown within 15 ms of the first, none written yet):
# the documented loss of the last ``TEXT_GAP_S``, not what this fault measures.
STREAMED_S = 1.0  # twice rag.keeper.TEXT_GAP_S


def _streaming(browser: Browser) -> bool:
    """An answer streaming on the browser's open socket for ``STREAMED_S`` since its first token."""
    ask = browser.asking
    return (
        browser.socket is not None
        and ask is not None
        and ask.answer_id is not None
        and ask.first_token_at is not None
        and time.perf_counter() - ask.first_token_at >= STREAMED_S
        and ask.status == "unanswered"
    )


async def _web_target(cluster: Cluster, klass: Class) -> tuple[str, str]:
    """Which web process to kill and why: the first found serving a socket with an answer streaming;
    after ``WEB_WAIT_S`` without one, one serving a learner's open socket; else web-a."""
    names = _web_names(cluster)
    deadline = time.monotonic() + WEB_WAIT_S
    while time.monotonic() < deadline:
        for browser in list(klass.browsers.values()):
            if _streaming(browser) and browser.upstream in names:
                return names[browser.upstream], "a learner's answer was streaming on it"
        await asyncio.sleep(0.01)
    for browser in list(klass.browsers.values()):
        if browser.socket is not None and browser.upstream in names:
            return names[browser.upstream], f"no answer streamed within {WEB_WAIT_S:.0f} s; a socket was open on it"
    return "web-a", "no learner held a chat socket"


def _answer_row(answer_id: int) -> dict[str, Any]:
    """The answer's row once it has left "streaming" (a worker's timer saves an orphan stopped within
    ``keeper.ORPHAN_S`` and its 5 s period), or as it is after ``ROW_WAIT_S``."""
    from rag.models import Answer

    deadline = time.monotonic() + ROW_WAIT_S
    while True:
        row = Answer.objects.filter(pk=answer_id).values("status", "text").first()
        if row is None:
            return {"status": "missing", "text": ""}
        if row["status"] != Answer.Status.STREAMING or time.monotonic() > deadline:
            return dict(row)
        time.sleep(0.5)


async def _in_flight(browser: Browser, ask: AskResult) -> dict[str, Any]:
    """An answer cut by the kill: what the learner's page showed, how its row was saved, and the
    question sent again after it."""
    row = await asyncio.to_thread(_answer_row, int(ask.answer_id or 0))
    mine = browser.learner.asks
    later = mine[mine.index(ask) + 1 :] if ask in mine else []
    shown, saved = ask.received, str(row["text"])
    return {
        "learner": browser.learner.username,
        "answer": ask.answer_id,
        "cut": ask.status == "closed",  # else it ended (done) before the kill reached it
        "page_showed_chars": len(shown),
        "saved_status": row["status"],
        "saved_chars": len(saved),
        "page_and_row_start": [shown[:40], saved[:40]],  # to read a mismatch by eye
        # The row holds the text up to its last write (``rag.keeper``): the page's text or the start of it
        # (tokens of the last ``keeper.TEXT_GAP_S`` may be missing), or more (written, not yet delivered).
        "partial_text_kept": bool(saved) and (shown.startswith(saved) or saved.startswith(shown)),
        "asked_again": f"{later[0].status} (answer {later[0].answer_id})" if later else "not yet",
    }


def _reopened(browser: Browser, killed_at: float, names: dict[str, str]) -> dict[str, Any]:
    after = [(at, upstream) for at, upstream in browser.sockets if at > killed_at]
    if not after:
        return {"learner": browser.learner.username, "reopened": False}
    at, upstream = after[0]
    return {
        "learner": browser.learner.username,
        "reopened": True,
        "after_s": round(at - killed_at, 1),
        "to": names.get(upstream, upstream or "unknown"),
    }


async def fault_web(cluster: Cluster, klass: Class) -> dict[str, Any]:
    name, why = await _web_target(cluster, klass)
    names = _web_names(cluster)
    address = next(a for a, n in names.items() if n == name)
    on_it = [b for b in list(klass.browsers.values()) if b.socket is not None and b.upstream == address]
    flying = [(b, b.asking) for b in on_it if _streaming(b)]
    before_log, before_misdelivered = len(cluster.access_log()), len(klass.chat.misdelivered)
    retried_before = sum(len(p.retried) for p in klass.learners)
    killed_at = time.monotonic()
    await asyncio.to_thread(kill, cluster, name)
    await asyncio.sleep(WEB_DOWN_S)  # the class goes on on the other web process
    again_s = await asyncio.to_thread(restart, cluster, name)
    fivexx = [line for line in cluster.access_log()[before_log:] if line[:1] == "5"]
    await asyncio.sleep(5)  # a question sent again after the last reconnect has its answer
    return {
        "killed": f"{name} (Daphne)",
        "why_then": why,
        "restarted_after_s": round(WEB_DOWN_S + again_s, 1),
        "sockets_on_it": len(on_it),
        "sockets": [_reopened(b, killed_at, names) for b in on_it],
        "answers_in_flight": [await _in_flight(b, ask) for b, ask in flying if ask is not None],
        "misdelivered_meanwhile": len(klass.chat.misdelivered) - before_misdelivered,
        "5xx_meanwhile": len(fivexx),
        "5xx_lines": fivexx[:5],
        "forms_sent_again": sum(len(p.retried) for p in klass.learners) - retried_before,
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
    name = _measuring_engine().name
    await asyncio.to_thread(kill, cluster, name)
    followed = await _follow(run["pk"], seconds=180)
    again_s = await asyncio.to_thread(restart, cluster, name)
    return {"killed": f"{name} (measuring) measuring run #{run['pk']}", "restarted_after_s": again_s} | followed


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
