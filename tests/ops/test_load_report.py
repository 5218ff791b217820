"""The load run's report on scripted rounds, and its first question at size (labapp/ops/loadtest/)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from labapp.ops import loadtest
from labapp.ops.loadtest.cast import Cast, Person
from labapp.ops.loadtest.plan import AskResult, LoadPlan, RoundResult
from labapp.ops.loadtest.report import _token_delays, report_build
from labapp.ops.loadtest.search import FirstQuestion
from tests import aio

PLAN = LoadPlan(sockets=2, tab_pairs=0, browsers=1)


def _line(text: str, what: str) -> str:
    """The value printed beside ``what`` (the table pads its first column)."""
    found = [line[len(what) :].strip() for line in text.splitlines() if line.startswith(what)]
    assert len(found) == 1, text
    return found[0]


def _report(first: dict[str, Any] | None, jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    people = [Person(1, "a", "c"), Person(2, "b", "c")]
    cast = Cast(run="r1", classroom_id=1, chatters=people, socket_owner=[0, 1], browsers=[Person(3, "i", "c", True)])
    ask = AskResult(socket=0, client_id="x", marker="m", status="done", tokens=4, ttft_ms=90.0, first_delay_ms=3.0)
    rounds = [
        RoundResult(asks=[ask], pages=[("/labs/1/", 200, 50.0), ("/classes/1/results/", 200, 80.0)], seconds=4.0)
    ] * 2
    rss: dict[str, list[float | None]] = {"web": [100.0, 110.0, 111.0]}
    jobs = [JOB] * 2 if jobs is None else jobs
    return report_build(PLAN, cast, rounds, rss, jobs, {"asked": 2, "saved": 2, "problems": []}, first)


JOB = {"status": "done", "requests": "8/8", "seconds": 3.0, "error": ""}
FIRST = {"chunks": 100000, "seconds": 0.41, "fill_s": 0.0, "lexical_build_s": 0.02, "under_load": True, "error": ""}


def test_the_table_prints_the_first_question_at_size_and_when_it_was_asked() -> None:
    report = _report(FIRST)
    text = loadtest.table(report)
    first = _line(text, "a new process's first question at 100000 chunks, s")
    assert first == "0.41 during the last round (its lexical index made current before the rounds: 0.02 s)"
    assert _line(text, "  gradebook / lab page, p50 and p95") == "1.60 / 1.60"
    assert loadtest.failures(report) == []
    late = loadtest.table(_report(FIRST | {"under_load": False}))
    assert _line(late, "a new process's first question").endswith(
        "0.41 after the last round, which ended first (its lexical index made current before the rounds: 0.02 s)"
    )


def test_a_first_question_that_failed_fails_the_run_by_name() -> None:
    report = _report(FIRST | {"seconds": None, "error": "first question at 100000 chunks: ConnectionError: chroma"})
    assert "failed: first question at 100000 chunks: ConnectionError: chroma" in loadtest.table(report)
    assert loadtest.failures(report) == ["first question: first question at 100000 chunks: ConnectionError: chroma"]
    assert _line(loadtest.table(_report(None)), "a new process's first question at size") == "not asked"


def _first_question_elsewhere(database: dict[str, Any], collection: str, question: str, answer: Any) -> None:
    """In place of the spawned process's work: says which process it ran in (the file named ``collection``)."""
    Path(collection).write_text(f"{os.getpid()} {question} {database.get('ENGINE')}")
    answer.send(("ok", 0.123))


def test_the_first_question_is_asked_in_a_process_of_its_own_and_knows_whether_the_round_was_still_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A process, not a thread of the load client: opening a large saved index holds the interpreter's lock
    for seconds, which stalled the client's event loop and inflated the websocket delays it measured."""
    from labapp.ops.loadtest import search
    from labapp.ops.measures import bench_retrieval_scale

    said = tmp_path / "asked"
    monkeypatch.setattr(bench_retrieval_scale, "prepare", lambda n: {"collection": str(said), "fill_s": 0.0})
    monkeypatch.setattr(search, "_first_question_process", _first_question_elsewhere)
    first = FirstQuestion(500, "질문", delay_s=0.0)
    first.prepare()
    first.start()
    result = first.report()
    pid, question, engine = said.read_text().split()
    assert int(pid) != os.getpid() and question == "질문" and engine.startswith("django.db.backends.")
    assert result["seconds"] == 0.12 and result["under_load"] is True and result["error"] == ""

    over = FirstQuestion(500, "질문", delay_s=0.2)
    over.prepare()
    over.start()
    over.round_over.set()
    assert over.report()["under_load"] is False


def test_a_collection_that_cannot_be_prepared_is_reported_and_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from labapp.ops.measures import bench_retrieval_scale

    def prepare(_n: int) -> dict[str, Any]:
        raise ConnectionError("chroma at 127.0.0.1:9 refused")

    monkeypatch.setattr(bench_retrieval_scale, "prepare", prepare)
    monkeypatch.setattr(bench_retrieval_scale, "first_question", lambda *_a: pytest.fail("asked anyway"))
    first = FirstQuestion(500, "질문", delay_s=0.0)
    first.prepare()
    first.start()
    assert first.report()["error"] == "preparing 500 chunks: ConnectionError: chroma at 127.0.0.1:9 refused"


def test_a_negative_first_question_size_and_web_processes_asked_of_the_command_are_refused_with_a_message() -> None:
    with pytest.raises(CommandError, match="cannot be negative"):
        call_command("load_test", "--first-question-chunks", "-1")
    # Web processes are started by make load; the command itself loads what runs, and says so.
    with pytest.raises(CommandError, match="make load"):
        call_command("load_test", "--web-processes", "2")
    assert loadtest.FULL.first_question_chunks == 100_000


def test_each_round_has_its_job_and_one_not_done_fails_the_run() -> None:
    report = _report(FIRST)
    assert _line(loadtest.table(report), "benchmark job, one per round") == (
        "done (8/8 requests, 3.0 s); done (8/8 requests, 3.0 s)"
    )
    late = JOB | {"status": "running", "requests": "5/8", "seconds": None}
    report = _report(FIRST, [JOB, late])
    assert report["job"] == late and loadtest.failures(report) == [f"benchmark job: {late}"]


@pytest.mark.parametrize("argv", [["--help"], ["--sokets", "5"]], ids=["help", "mistyped option"])
def test_make_load_reads_its_options_before_starting_any_part_of_the_stack(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m labapp.ops.loadtest --help` started Redis, Chroma, an engine (5 minutes), a worker and a
    web server before printing its usage."""
    from labapp.ops.loadtest import __main__ as entry
    from labapp.ops.stack import launch

    def started(*_: Any, **__: Any) -> list[Any]:
        raise AssertionError("the stack was started before the options were read")

    monkeypatch.setattr(launch, "start_missing", started)
    with pytest.raises(SystemExit) as leaving:
        entry.main(argv)
    assert leaving.value.code == (0 if argv == ["--help"] else 2)


class _Socket:
    """The chat socket's side of one ask, scripted: the frames the server sends for each ask frame."""

    def __init__(self, replies: list[list[dict[str, Any]]]) -> None:
        self.replies = replies
        self.sent: list[dict[str, Any]] = []
        self.inbox: list[str] = []

    async def send(self, text: str) -> None:
        import json

        frame = json.loads(text)
        self.sent.append(frame)
        if frame["type"] == "ask":
            self.inbox += [json.dumps(f | {"id": frame["id"]}) for f in self.replies.pop(0)]
        elif frame["type"] == "client_timing":
            self.inbox.append(json.dumps({"type": "overhead", "answer_id": frame["answer_id"]}))

    async def recv(self) -> str:
        return self.inbox.pop(0)


def test_a_simulated_learner_turned_away_by_the_chat_admission_asks_again_after_the_retry_time() -> None:
    """The full-size load test's round ran out its 600 s with 16 asks unanswered and the engine idle: the
    admission had refused them (line full) and the simulated learner, unlike the page's "ask again"
    button, waited for an answer that was never coming."""
    from labapp.ops.loadtest import traffic

    marker = "m-1"
    answer = {"answer_id": 7, "question": f"q ({marker})", "status": "done", "timings": {}}
    socket = _Socket(
        [
            [{"type": "refused", "error": "line full", "reason": "full", "retry_s": 0}],
            [
                {"type": "queued", "position": 1, "wait_s": 2, "slots": 2},
                {"type": "admitted", "waited_ms": 1500.0},
                {"type": "started", "answer_id": 7, "question": f"q ({marker})"},
                {"type": "token", "text": "a"},
                {"type": "done", "answer": answer},
            ],
        ]
    )
    result = RoundResult()
    tab = traffic._Tab(0, "learner", result)
    ask = AskResult(0, "s0r0a0", marker)
    aio.run(tab.ask(socket, ask, f"q ({marker})", LoadPlan()))
    assert [f["type"] for f in socket.sent] == ["ask", "ask", "client_timing"]
    assert (ask.status, ask.refused, ask.queued_ms, ask.tokens) == ("done", 1, 1500.0, 1)
    assert not result.misdelivered


def test_a_pong_that_never_comes_back_is_counted_lost_and_the_round_still_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ping probe waited on ``recv`` for a pong lost on its way back, and the round never ended (a
    full-size run hung for minutes after its sockets were done). It waits PONG_WAIT_S at most now."""
    from labapp.ops.loadtest import traffic

    monkeypatch.setattr(traffic, "PONG_WAIT_S", 0.2)

    async def swallow(connection: Any) -> None:
        async for _message in connection:  # every ping read, none answered
            pass

    result = _pinged(swallow, 1.0)
    assert result.pongs_lost >= 2 and result.ping_in_ms == [] and result.socket_errors == []


def test_a_pong_back_late_is_counted_late_with_its_delay_and_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pong held up past PONG_WAIT_S (a web process whose loop stalled) is late, not lost: it comes back
    on the next turn, names its own ping, and is measured; lost is only a pong that never comes."""
    import asyncio
    import json

    from labapp.ops.loadtest import traffic

    monkeypatch.setattr(traffic, "PONG_WAIT_S", 0.2)
    monkeypatch.setattr(traffic, "PING_EVERY_S", 0.05)

    async def slow_first(connection: Any) -> None:
        turn = 0
        async for message in connection:
            ping, turn = json.loads(message), turn + 1
            if turn == 1:
                await asyncio.sleep(0.5)  # the first pong held up, then every pong at once
            pong = {"type": "pong", "sent": ping["sent"], "server_received": ping["sent"]}
            await connection.send(json.dumps(pong))

    result = _pinged(slow_first, 1.5)
    # The first pong is late, and those sent while it was held up may be; none is lost.
    assert result.pongs_late and result.pongs_late[0] >= 500, result.pongs_late
    assert result.pongs_lost == 0 and len(result.ping_out_ms) >= 5 and result.socket_errors == []


def test_the_first_tokens_delay_is_split_into_the_questions_way_in_and_the_tokens_way_out() -> None:
    """The server keeps when the question arrived on the wall clock (``received_wall``); the load client,
    on the same machine's clock, splits the first token's websocket delay into its two ways."""
    from labapp.ops.loadtest import traffic

    ask = AskResult(socket=0, client_id="x", marker="m")
    answer = {"status": "done", "timings": {"server_first_token_ms": 500.0, "received_wall": 1000.020}}
    # sent at wall 1000.000 (perf 10.0); first token frame at perf 10.560: 560 ms, 500 of them the server's
    traffic._finish(ask, answer, 10.0, [10.560, 10.600], sent_wall=1000.000)
    assert ask.first_delay_ms == 60.0 and ask.inbound_ms == 20.0
    delays = _token_delays([ask])
    assert delays["first_inbound"]["p50"] == 20.0 and delays["first_outbound"]["p50"] == 40.0


def _pinged(server: Any, seconds: float) -> RoundResult:
    """The load test's ping probe against ``server`` (a websockets handler) for ``seconds``, then stopped."""
    import asyncio

    import websockets

    from labapp.ops.loadtest import traffic

    async def probe() -> RoundResult:
        result, stop = RoundResult(), asyncio.Event()
        async with websockets.serve(server, "127.0.0.1", 0) as serving:
            port = next(iter(serving.sockets)).getsockname()[1]
            pinger = asyncio.create_task(traffic._pinger(f"http://127.0.0.1:{port}", Person(1, "p", "c"), stop, result))
            await asyncio.sleep(seconds)
            stop.set()
            await asyncio.wait_for(pinger, 2)
        return result

    return aio.run(probe())
