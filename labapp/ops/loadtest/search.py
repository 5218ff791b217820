"""The first question at size, asked while the load runs (issue 15, item 7).

Before the rounds, a synthetic collection of ``plan.first_question_chunks`` chunks is
filled (kept for the next run) and its lexical index built and saved, as the indexing
worker does after a change (``bench_retrieval_scale``'s collections, shared with
``make perf``). During the last round, a few seconds in, a new process (spawned, with
this one's database settings) asks a question as a web process that has not searched that
collection yet: it opens the saved index instead of building one. What it takes is the "first
question at 100k chunks" figure under load, with the engine, the sockets and the browsers on the
same cores.

A process, not a thread of this one: opening the index holds the interpreter's lock for
seconds, and a thread here stalled the load client's own event loop meanwhile: answers whose
first token arrived then were charged seconds of "websocket delay" (the 3.3 s and 4.9 s first-token
tails of two runs, whose first question took 3.8 s and 6.3 s).

The imports of models and of the ORM are inside the methods, as in ``cast.py``: this package
is imported before ``django.setup()`` when ``make load`` runs it with ``python -m``.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FirstQuestion:
    chunks: int
    question: str
    delay_s: float = 3.0
    prepared: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    error: str = ""
    under_load: bool | None = None  # answered while the last round was still running
    round_over: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _database: dict[str, Any] = field(default_factory=dict)

    def prepare(self) -> None:
        from labapp.ops.measures.bench_retrieval_scale import prepare

        try:
            self.prepared = prepare(self.chunks)
        except Exception as exc:  # reported by name; the rest of the load run goes on
            self.error = f"preparing {self.chunks} chunks: {type(exc).__name__}: {exc}"

    def start(self) -> None:
        """Ask the question ``delay_s`` from now, in a new process (this one runs the round's event loop)."""
        from django.db import connections

        if self.error or not self.prepared:
            return
        # The process reads the database the caller reads (the lexical index's stamp): the same settings,
        # unless a test pointed this process's connection at the file the web server uses.
        self._database = dict(connections["default"].settings_dict)
        self._thread = threading.Thread(target=self._ask, name="load-first-question", daemon=True)
        self._thread.start()

    def _ask(self) -> None:
        """Waits ``delay_s``, then for the spawned process's answer (a thread: nothing heavy runs here)."""
        time.sleep(self.delay_s)
        context = multiprocessing.get_context("spawn")
        receiving, sending = context.Pipe(duplex=False)
        child = context.Process(
            target=_first_question_process,
            args=(self._database, self.prepared["collection"], self.question, sending),
            name="load-first-question",
            daemon=True,
        )
        child.start()
        sending.close()
        try:
            kind, value = receiving.recv()
        except EOFError:  # the process died before answering: its exit code exists once it is joined
            child.join(10)
            kind, value = "error", f"its process ended (exit code {child.exitcode}) before answering"
        child.join(10)
        if kind == "ok":
            self.seconds = round(value, 2)
            self.under_load = not self.round_over.is_set()
        else:
            self.error = f"first question at {self.chunks} chunks: {value}"

    def report(self, timeout_s: float = 120.0) -> dict[str, Any]:
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.error = f"first question at {self.chunks} chunks: no answer within {timeout_s:g} s"
        return {
            "chunks": self.chunks,
            "seconds": self.seconds,
            "fill_s": self.prepared.get("fill_s"),
            "lexical_build_s": self.prepared.get("lexical_build_s"),
            "under_load": self.under_load,
            "error": self.error,
        }


def _first_question_process(database: dict[str, Any], collection: str, question: str, answer: Any) -> None:
    """In the spawned process: Django set up with the caller's database, the question asked, the seconds
    (or the error) sent back."""
    import django

    django.setup()
    from django.db import connections

    from labapp.ops.measures.bench_retrieval_scale import first_question

    connections["default"] = connections["default"].__class__(database, alias="default")
    try:
        answer.send(("ok", first_question(collection, question)))
    except Exception as exc:
        answer.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        connections.close_all()
