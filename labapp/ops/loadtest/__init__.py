"""Load test of a running lab: many chat websockets, browsing users and a benchmark job at once.

Runs against a lab web server that shares this process's database (``make load``, the
``load_test`` command, ``tests/ops/test_load.py``). It makes its own users, a class with
instructors (so the gradebook has rows) and Django sessions for them in that database,
and sends the session cookie, so no browser or password is needed; in local mode the
server keeps a session that is already signed in (``LocalLearnerMiddleware``).

Each round, every socket asks ``asks`` questions one after the other (a user with two
tabs has two sockets, so at most two answers in flight, within
``CHAT_MAX_CONCURRENT_PER_USER``), while the browsers fetch lab, chapter, benchmark and
(instructors) gradebook pages with a pause between requests until the sockets are done.
A benchmark job is submitted at the start of each round and waited for at its end. What is measured:

* **misdelivered frames**: a frame on a socket that does not belong to an answer asked on
  that socket: an unknown client id, a ``started`` or ``done`` whose question lacks the
  ask's unique marker, an answer id or ``overhead`` for an answer not started here;
* **page latency**: request sent → whole body read, per request; any 5xx is a failure,
  and so is any other status but 200 (the load test itself is then wrong);
* **websocket token delay**: for the first and for the last token frame of each answer,
  (client: ask sent → frame received) − (server: ask received → frame handed to the
  socket, the answer's ``server_first_token_ms`` / ``server_done_ms``). It is one inbound
  ask frame plus one outbound token frame, queueing in both event loops included: the
  product's "websocket overhead" (the first-token one is also sent back as a
  ``client_timing`` frame, as the browser does, and must be saved). Frames carry no
  server clock, so a per-token delay is not measurable without changing the protocol;
* **client TTFT**: ask sent → first token frame;
* **RSS** of each web process and the Celery worker (each with its child processes) before
  the first round and after each round; memory is flat when the last round adds less
  than ``rss_bound_mib`` to either;
* afterwards every asked answer is a saved row with status ``done`` and its timings;
* **the first question at size** (``plan.first_question_chunks``, 100k at full size): a
  process that has not searched a collection of that size yet asks one question during
  the last round, opening the saved lexical index (``search.py``).

    python manage.py load_test [--sockets 50 --tab-pairs 10 --browsers 30 ...]
    python -m labapp.ops.loadtest [same options]   # `make load`: starts what is not running first
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from labapp.ops.loadtest.cast import FINISHED, answers_check, cast_create, cast_delete, job_start, job_wait, page_paths
from labapp.ops.loadtest.plan import FULL, REDUCED, LoadPlan, RoundResult
from labapp.ops.loadtest.report import failures, report_build, table
from labapp.ops.loadtest.search import FirstQuestion
from labapp.ops.loadtest.traffic import round_run
from labapp.ops.stack.memory import find_web_pid, find_worker_pid, rss_mib

__all__ = ["FULL", "REDUCED", "LoadPlan", "failures", "load_run", "table"]

QUESTIONS_FILE = Path(__file__).resolve().parents[3] / "rag" / "eval" / "chapter_qa_ko.jsonl"


def load_run(
    web: str,
    plan: LoadPlan,
    *,
    web_pids: list[int] | None = None,
    worker_pid: int | None = None,
    keep: bool = False,
    say: Callable[[str], object] = print,
) -> dict[str, Any]:
    """Set up, run ``plan.rounds`` rounds, check the saved answers and the job; the report as a dict."""

    plan.check()
    questions = [json.loads(line)["question"] for line in QUESTIONS_FILE.read_text().splitlines() if line.strip()]
    found = find_web_pid(httpx.URL(web).port or 80) if not web_pids else None
    web_pids = web_pids or ([found] if found else [])
    redis_port = httpx.URL(str(settings.REDIS_URL).replace("redis://", "http://")).port or 6379
    worker_pid = worker_pid or find_worker_pid(redis_port)
    webs: dict[str, int | None] = {("web" if n == 1 else f"web-{n}"): pid for n, pid in enumerate(web_pids, start=1)}
    webs = webs or {"web": None}  # not found: its memory is not read (the report says so)
    processes = webs | {"worker": worker_pid}
    cast = cast_create(plan)
    paths = page_paths(cast)
    say(f"[load] run {cast.run}: {plan.sockets} sockets ({plan.tab_pairs} two-tab users), {plan.browsers} browsers")
    rss: dict[str, list[float | None]] = {name: [rss_mib(pid) if pid else None] for name, pid in processes.items()}
    rounds: list[RoundResult] = []
    jobs: list[dict[str, Any]] = []
    started: list[int] = []
    first = FirstQuestion(plan.first_question_chunks, questions[0]) if plan.first_question_chunks else None
    if first is not None:
        say(f"[load] a collection of {plan.first_question_chunks} chunks for the first question (kept between runs)")
        first.prepare()
    try:
        for round_no in range(plan.rounds):
            last = round_no == plan.rounds - 1
            # A job per round, waited for before memory is read: every round does the same work, so
            # the last round's growth is a leak, not a job still running from the round before.
            started += [job_start(cast)] if plan.job else []
            if first is not None and last:
                first.start()
            result = asyncio.run(round_run(web, cast, plan, round_no, questions, paths))
            if first is not None and last:
                first.round_over.set()
            rounds.append(result)
            jobs += [job_wait(started[-1], plan.job_wait_s)] if plan.job else []
            for name, pid in processes.items():
                rss[name].append(rss_mib(pid) if pid else None)
            done = sum(a.status == "done" for a in result.asks)
            say(f"[load] round {round_no + 1}: {done}/{len(result.asks)} answers done in {result.seconds} s")
        saved = answers_check(cast, [a for r in rounds for a in r.asks])
    finally:
        # A job still running would lose its owner under the worker: then the run's rows stay.
        if not keep and len(jobs) == len(started) and all(job["status"] in FINISHED for job in jobs):
            cast_delete(cast)
    return report_build(plan, cast, rounds, rss, jobs, saved, first.report() if first else None)
