"""The lab under load, over the harness's real stack (labapp/ops/loadtest/).

Reduced size here (12 chat websockets, 3 users with two tabs, 6 browsing users, one
benchmark job); ``LOAD_FULL=1`` runs the issue's size (50 sockets, 10 two-tab users,
30 browsing users). The table lands in test-artifacts/load/.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from labapp.ops import loadtest
from tests import harness

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "load"


def test_many_sockets_browsers_and_a_job_at_once_deliver_every_frame_to_its_socket_and_save_every_answer(
    full_stack: str, chapter_indexed: None, celery_worker: harness.Service, shared_database: None
) -> None:
    full = os.environ.get("LOAD_FULL") == "1"
    plan = loadtest.FULL if full else loadtest.REDUCED
    # The web server and the worker are found by their ports (a fault test may have restarted them).
    report = loadtest.load_run(full_stack, plan)
    text = loadtest.table(report)
    print(text)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = "full" if full else "reduced"
    (ARTIFACTS / f"{name}.txt").write_text(text + "\n")
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(report, indent=1))

    assert report["misdelivered"] == []
    assert report["socket_errors"] == []
    assert report["answers"]["failed"] == [] and report["answers"]["done"] == plan.sockets * plan.asks * plan.rounds
    assert report["pages"]["5xx"] == 0 and report["pages"]["other_not_200"] == []
    assert report["pages"]["gradebook_ms"]["n"] > 0, "the gradebook was not fetched"
    assert report["pages"]["lab_page_ms"]["n"] > 0, "no lab page was fetched"
    assert "gradebook / lab page, p50 and p95" in text
    assert report["saved"]["problems"] == [] and report["saved"]["saved"] == report["answers"]["asked"]
    assert [job["status"] for job in report["jobs"]] == ["done"] * plan.rounds, report["jobs"]
    assert all(values[0] is not None for values in report["rss_mib"].values()), report["rss_mib"]
    assert report["rss_flat"], report["rss_last_round_growth_mib"]
    first = report["first_question"]
    assert first is not None and first["chunks"] == plan.first_question_chunks and first["error"] == "", first
    assert first["seconds"] is not None and first["under_load"] is not None, first
    assert f"first question at {plan.first_question_chunks} chunks" in text
    assert report["ping_ms"]["inbound"]["n"] > 0 and report["client_loop_lag_ms"]["n"] > 0, report["ping_ms"]
    # each answer's first-token delay split into its ways in and out (the server's received_wall)
    assert report["token_delay_ms"]["first_inbound"]["n"] == report["token_delay_ms"]["first"]["n"] > 0
    assert loadtest.failures(report) == []


def test_the_load_through_nginx_in_front_of_two_web_processes_reaches_both_and_loses_nothing(
    full_stack: str, chapter_indexed: None, celery_worker: harness.Service, shared_database: None, tmp_path: Path
) -> None:
    """``make load LOAD_ARGS="--web-processes 2"``: a second web process beside the stack's and Debian's
    nginx in front of both (the class server's layout); the load goes through nginx, both answer."""
    import dataclasses

    from labapp.ops.loadtest.__main__ import front_start

    started: list[harness.Service] = []
    try:
        args = front_start(2, tmp_path, started)
        front = args[args.index("--web") + 1]
        pids = [int(arg.split("=", 1)[1]) for arg in args if arg.startswith("--web-pid=")]
        plan = dataclasses.replace(loadtest.REDUCED, job=False, first_question_chunks=0)
        report = loadtest.load_run(front, plan, web_pids=pids)
    finally:
        for service in reversed(started):
            service.stop()
    assert len(set(pids)) == 2 and set(report["rss_mib"]) == {"web", "web-2", "worker"}, report["rss_mib"]
    assert report["misdelivered"] == [] and report["socket_errors"] == []
    assert report["answers"]["failed"] == [] and report["answers"]["done"] == plan.sockets * plan.asks * plan.rounds
    assert report["pages"]["5xx"] == 0 and report["saved"]["problems"] == []
    upstreams = set(re.findall(r"127\.0\.0\.1:\d+", (tmp_path / "nginx" / "access.log").read_text()))
    assert len(upstreams) == 2, upstreams  # nginx sent pages and sockets to both web processes
