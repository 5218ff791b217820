"""Every text kept to be said later (a row's error, an answer's notices, an engine's probe reason) is
read in the reader's language on every page, export and JSON that shows it.

Each kind of saved text is made through the code that saves it in real use (``CASES``: a job
failing for each of its reasons, a document's ingestion failing, a chat answer failing, an
engine's probe failing, …), in Korean. Then every route of the URLconf (the walk of
``test_request_surface``, its paths filled with those rows' ids) is read by the learner and their
instructor, in Korean and in English: wherever a page shows a text in Korean, the same page in
English shows it in English and not in Korean, and the English has no Hangul at all.

The places that save such a text are found in the source (``saving_places``): each must be one
of the places ``CASES`` go through, so a new one fails here until a case walks it; and nothing in
``bench``, ``rag`` or ``labapp`` writes a row's error fields except through
``labapp.said.KeepsError.error_fields`` (``bypasses``).
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import html
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone, translation

from bench import engines, jobrun, outages, pools, reaper
from bench.models import BenchJob, Engine
from labapp.classes import services as class_services
from labapp.models import Classroom, Membership
from labapp.ops import scripted
from rag import answer_guard, ask, chat, conversations, prompting, services, vectorstore
from rag.access import CollectionRef, user_collection_name
from rag.models import Answer, Conversation, Document
from tests import aio
from tests.site.test_address_secrets import body, paths, queries
from tests.site.test_labs import GOOD
from tests.site.test_request_surface import ADMIN_DOORS, routes

ROOT = Path(__file__).resolve().parents[2]
HANGUL = re.compile("[\uac00-\ud7a3]")
DEAD = "http://127.0.0.1:9"  # the discard port: nothing answers there
SECRET = "pw-Zq9"  # noqa: S105 - planted in an address inside an error: never kept
LANGUAGES = ("ko", "en")


@dataclass
class World:
    learner: User
    instructor: User
    room: Classroom
    conversation: Conversation
    engine_url: str  # the scripted engine's
    script: scripted.Script
    monkeypatch: pytest.MonkeyPatch
    jobs: list[int] = field(default_factory=list)


Read = Callable[[], list[str]]  # the case's texts, in the active language, as pages read them


@dataclass(frozen=True)
class Case:
    name: str
    places: tuple[str, ...]  # "path:function" of the places that save its texts (``saving_places``)
    make: Callable[[World], Read]


# --- the cases: each made by the code that saves it --------------------------------------------


async def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _job(world: World, **fields: Any) -> BenchJob:
    job = BenchJob.objects.create(owner=world.learner, kind="speed", lab=1, engine_url=DEAD, **fields)
    world.jobs.append(job.pk)
    return job


def _job_error(pk: int) -> Read:
    return lambda: [BenchJob.objects.get(pk=pk).error_shown]


def _running(world: World, **fields: Any) -> jobrun.JobRun:
    """A run holding its job, as ``claim`` leaves it."""
    job = _job(world, status="running", attempts=1, heartbeat_at=timezone.now(), **fields)
    run = jobrun.JobRun(job.pk)
    run.attempt, run.done, run.total = 1, 1, 4
    return run


def job_started_too_often(world: World) -> Read:
    job = _job(world, status="queued", attempts=reaper.MAX_ATTEMPTS)
    assert jobrun.JobRun(job.pk).claim() is False
    return _job_error(job.pk)


def job_started_over(world: World) -> Read:
    job = _job(world, status="running", attempts=1, heartbeat_at=timezone.now() - timedelta(days=1))
    assert jobrun.JobRun(job.pk).claim() is True
    BenchJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() + timedelta(days=1))  # not reaped
    return _job_error(job.pk)


def job_past_its_time_limit(world: World) -> Read:
    run = _running(world)
    run.timed_out = True
    run.finish({"cells": []}, False)
    return _job_error(run.job_id)


def job_with_failed_requests(world: World) -> Read:
    run = _running(world)
    cells = [GOOD[1]["cells"][0] | {"failed": 2, "errors": ["HTTP 500: boom", f"ConnectError ({DEAD})"]}]
    run.finish(GOOD[1] | {"cells": cells}, False)
    return _job_error(run.job_id)


class _Expired:
    def expired(self) -> bool:
        return True


def job_cut_off_by_its_hard_limit(world: World) -> Read:
    run = _running(world)
    run.limit = _Expired()  # type: ignore[assignment]
    run.fail(TimeoutError())
    return _job_error(run.job_id)


def job_failed_on_an_exception(world: World) -> Read:
    run = _running(world)
    run.fail(RuntimeError(f"the engine at http://tutor:{SECRET}@127.0.0.1:9 went away"))
    return _job_error(run.job_id)


def job_whose_config_no_longer_reads(world: World) -> Read:
    job = _job(world, status="queued", config={"repeats": "many"})
    jobrun.JobRun(job.pk).run()  # the worker's whole run: claim, read the config, fail
    return _job_error(job.pk)


def job_whose_worker_was_lost(world: World) -> Read:
    # Lost on its last attempt: it fails with the reason (lost earlier, it goes back to its queue).
    job = _job(world, status="running", attempts=2, heartbeat_at=timezone.now() - timedelta(days=1))
    assert reaper.jobs_reap_stale() == 1
    return _job_error(job.pk)


def job_whose_queue_has_no_measuring_engine(world: World) -> Read:
    job = _job(world, status="queued", pool="empty-pool", hardware="H200", pinned=False)
    assert pools.strand(("empty-pool", "H200")) == 1
    return _job_error(job.pk)


def job_whose_engines_stayed_down(world: World) -> Read:
    job = _job(world, status="queued", pool="down-pool", hardware="H200", pinned=False)

    class LongDown(outages.Outages):  # Redis's marks, read: every engine down for a day
        def all_down_for(self, urls: list[str]) -> float | None:
            return 86400.0

    assert LongDown().give_up(("down-pool", "H200"), ["http://127.0.0.1:9"]) == 1
    return _job_error(job.pk)


def _document(world: World, name: str, **fields: Any) -> Document:
    values = {"kind": "md", "text": "메모 " * 20, "size_bytes": 60, "content_hash": name} | fields
    return Document.objects.create(
        owner=world.learner, collection=user_collection_name(world.learner), title=name, filename=name, **values
    )


def _document_error(pk: int) -> Read:
    return lambda: [Document.objects.get(pk=pk).error_shown]


def _chroma_down(*args: Any, **kwargs: Any) -> None:
    raise vectorstore.RetrievalUnavailable(f"Chroma at http://tutor:{SECRET}@127.0.0.1:9 is unreachable")


def document_that_cannot_be_read(world: World) -> Read:
    world.monkeypatch.setattr(vectorstore, "delete_where", lambda name, where: None)
    raw = b"%PDF-1.4\nthis is not really a pdf"
    doc = _document(world, "broken.pdf", kind="pdf", text="", raw=raw, size_bytes=len(raw))
    services.document_ingest(document=doc, sizes=(200,))
    return _document_error(doc.pk)


def document_failed_and_not_cleaned_up(world: World) -> Read:
    def embedding_fails(**kwargs: Any) -> tuple[bool, int]:
        raise ConnectionError("the embedding server went away")

    world.monkeypatch.setattr(services, "source_index", embedding_fails)
    world.monkeypatch.setattr(vectorstore, "delete_where", _chroma_down)
    doc = _document(world, "memo.md")
    services.document_ingest(document=doc, sizes=(200,))
    return _document_error(doc.pk)


def document_whose_worker_was_lost(world: World) -> Read:
    world.monkeypatch.setattr(vectorstore, "delete_where", _chroma_down)  # and its cleanup fails too
    doc = _document(world, "lost.md", status="ingesting", progress=33)
    Document.objects.filter(pk=doc.pk).update(updated_at=timezone.now() - timedelta(days=1))
    services.documents_reap_stale()
    return _document_error(doc.pk)


def document_never_started(world: World) -> Read:
    doc = _document(world, "queued.md", status="queued")
    long_ago = timezone.now() - timedelta(days=1)
    Document.objects.filter(pk=doc.pk).update(updated_at=long_ago, resent_at=long_ago)
    services.documents_reap_stale()
    return _document_error(doc.pk)


def _run(world: World, *, url: str = "", question: str = "프리필이란?", **chosen: Any) -> chat.AnswerRun:
    return chat.AnswerRun(
        question=question,
        settings=prompting.ChatSettings(top_k=0, **chosen),
        collection=CollectionRef("chapter", "chapter", "챕터", by_language=True),
        language="ko",
        stall_timeout_s=5,
        engine=chat.Engine(url=url or world.engine_url),
    )


def _answer_saved(world: World, run: chat.AnswerRun) -> int:
    answer = Answer.objects.create(conversation=world.conversation, question=run.question[:60])
    status = Answer.Status.FAILED if run.error else Answer.Status.DONE
    return conversations.answer_finish(answer_id=answer.pk, run=run, status=status).pk


def _answered(world: World, run: chat.AnswerRun) -> Read:
    """``run`` asked in Korean through the chat's own path, and saved."""
    chat.engine_cache_clear()

    async def go() -> None:
        retrieving: asyncio.Future[list[prompting.ContextChunk]] = asyncio.get_running_loop().create_future()
        retrieving.set_result([])
        with translation.override("ko"):
            await chat.answer_run(run, _nothing, retrieving)

    aio.run(go())
    assert run.error, run
    pk = _answer_saved(world, run)
    return lambda: [Answer.objects.get(pk=pk).error_shown]


def answer_with_its_engine_unreachable(world: World) -> Read:
    return _answered(world, _run(world, url=DEAD))


def answer_asking_for_more_than_the_model_holds(world: World) -> Read:
    world.script.max_model_len = 64
    return _answered(world, _run(world, max_tokens=128))


def answer_whose_question_does_not_fit(world: World) -> Read:
    world.script.max_model_len = 700
    return _answered(world, _run(world, question="프리필이 무엇인지 " * 150, max_tokens=200))


def answer_the_engine_refused(world: World) -> Read:
    world.script.status, world.script.error_message = 400, "This model's maximum context length is 8192 tokens."
    return _answered(world, _run(world))


def answer_failed_on_an_exception(world: World) -> Read:
    run = _run(world)
    asked = ask.Ask(
        user=world.learner, language="ko", client_id="c1", session_key=None, received_at=0.0, send_json=_nothing,
        engine_of=chat.Engine, speeds=ask.no_speeds, on_end=lambda: None,
    )  # fmt: skip
    asked.run = run
    asked.fail(RuntimeError(f"lost the engine at http://tutor:{SECRET}@127.0.0.1:9"))
    pk = _answer_saved(world, run)
    return lambda: [Answer.objects.get(pk=pk).error_shown]


def answer_notices(world: World) -> Read:
    """An answer the guard cut for repeating itself, and one the model left empty: their notices."""
    repeated = _run(world)
    repeated.record.generated_text = "프리필은 입력을 처리합니다.\n프리필은 입력을 처리합니다.\n"
    with translation.override("ko"):
        cut = answer_guard.repeat_cut(repeated.record.generated_text, question=repeated.question)
        assert cut is not None
        repeated.notice("repeat", answer_guard.stop_at(repeated.record, cut))
        empty = _run(world)
        chat.explain_empty(empty, stopped=True)
    pks = [_answer_saved(world, repeated), _answer_saved(world, empty)]

    def read() -> list[str]:
        answers = [conversations.answer_payload(Answer.objects.get(pk=pk)) for pk in pks]
        return [n["message"] for a in answers for n in a["timings"]["notices"]]

    return read


def answer_cancelled_while_waiting_its_turn(world: World) -> Read:
    """An answer stopped while it waited in the chat admission's line: its notice."""
    waited = _run(world)
    with translation.override("ko"):
        ask.queue_cancelled(waited)
    pk = _answer_saved(world, waited)

    def read() -> list[str]:
        return [n["message"] for n in conversations.answer_payload(Answer.objects.get(pk=pk))["timings"]["notices"]]

    return read


def answer_cut_off_by_its_lost_web_process(world: World) -> Read:
    """An answer left streaming by a web process killed mid-answer (``rag.keeper``): its notice."""
    from datetime import timedelta

    from django.utils import timezone

    from rag import keeper

    answer = Answer.objects.create(conversation=world.conversation, question="프리필이란?", text="프리필은")
    Answer.objects.filter(pk=answer.pk).update(beat_at=timezone.now() - timedelta(seconds=keeper.ORPHAN_S + 1))
    with translation.override("ko"):
        assert conversations.answers_orphaned_stop() == 1

    def read() -> list[str]:
        return [
            n["message"] for n in conversations.answer_payload(Answer.objects.get(pk=answer.pk))["timings"]["notices"]
        ]

    return read


def engine_probe_that_failed(world: World) -> Read:
    Engine.objects.create(name="꺼진 엔진", base_url=DEAD, added_by=world.instructor)
    with translation.override("ko"):
        engines.probed(engines.choices())  # kept in the cache, read later in either language
    return lambda: [probe.reason for _choice, probe in engines.probed(engines.choices()) if not probe.ok]


def answer_engine_name(world: World) -> Read:
    """The configured engine's name on an answer's card ("기본 엔진"), kept with the answer as a key."""
    run = dataclasses.replace(_run(world), engine=chat.Engine(url=world.engine_url, name=engines.configured()[0].name))
    pk = _answer_saved(world, run)
    return lambda: [conversations.answer_payload(Answer.objects.get(pk=pk))["timings"]["engine"]["name"]]


CASES = [
    Case("job started too often", ("bench/jobrun.py:claim",), job_started_too_often),
    Case("job started over", ("bench/jobrun.py:claim",), job_started_over),
    Case("job past its time limit", ("bench/jobrun.py:finish",), job_past_its_time_limit),
    Case("job with failed requests", ("bench/jobrun.py:finish",), job_with_failed_requests),
    Case("job cut off by its hard limit", ("bench/jobrun.py:fail",), job_cut_off_by_its_hard_limit),
    Case("job failed on an exception", ("bench/jobrun.py:fail",), job_failed_on_an_exception),
    Case("job whose config no longer reads", ("bench/jobrun.py:fail",), job_whose_config_no_longer_reads),
    Case("job whose worker was lost", ("bench/reaper.py:jobs_reap_stale",), job_whose_worker_was_lost),
    Case(
        "job whose queue has no measuring engine", ("bench/pools.py:strand",), job_whose_queue_has_no_measuring_engine
    ),
    Case("job whose engines stayed down", ("bench/outages.py:give_up",), job_whose_engines_stayed_down),
    Case("document that cannot be read", ("rag/services.py:document_ingest",), document_that_cannot_be_read),
    Case(
        "document failed and not cleaned up", ("rag/services.py:document_ingest",), document_failed_and_not_cleaned_up
    ),
    Case("document whose worker was lost", ("rag/services.py:documents_reap_stale",), document_whose_worker_was_lost),
    Case("document never started", ("rag/services.py:_queued_resend_or_fail",), document_never_started),
    Case("answer with its engine unreachable", ("rag/chat.py:answer_run",), answer_with_its_engine_unreachable),
    Case("answer asking for too much", ("rag/chat.py:answer_run",), answer_asking_for_more_than_the_model_holds),
    Case("answer whose question does not fit", ("rag/chat.py:answer_run",), answer_whose_question_does_not_fit),
    Case("answer the engine refused", ("rag/chat.py:answer_run",), answer_the_engine_refused),
    Case("answer failed on an exception", ("rag/ask.py:fail",), answer_failed_on_an_exception),
    Case("answer notices", ("rag/conversations.py:answer_finish",), answer_notices),
    Case("answer cancelled in line", ("rag/conversations.py:answer_finish",), answer_cancelled_while_waiting_its_turn),
    Case(
        "answer cut off by its lost web process",
        ("rag/conversations.py:answers_orphaned_stop",),
        answer_cut_off_by_its_lost_web_process,
    ),
    Case("engine probe that failed", ("bench/engines.py:probe",), engine_probe_that_failed),
    Case("answer's engine name", ("rag/chat.py:_name_form",), answer_engine_name),
]
# Every answer's error and notices are saved in one place, whichever case made them.
SAVED_BY_EVERY_ANSWER = "rag/conversations.py:answer_finish"


# --- the walk ------------------------------------------------------------------------------------


@pytest.fixture
def world(
    db: None, settings: Any, monkeypatch: pytest.MonkeyPatch, scripted_engine: tuple[scripted.Script, str]
) -> Iterator[World]:
    from labapp.chapter.services import chapter_load

    settings.LAB_MODE = "class"
    settings.VLLM_BASE_URL = DEAD
    settings.VLLM_MODEL = ""
    settings.ENGINE_PROBE_CACHE_S = 600
    monkeypatch.setattr(jobrun, "push", _nothing)
    chapter_load()
    learner, instructor = User.objects.create_user("said-learner"), User.objects.create_user("said-instructor")
    room = class_services.classroom_create(name="말반", instructor=instructor)
    Membership.objects.create(classroom=room, user=learner)
    script, url = scripted_engine
    conversation = Conversation.objects.create(owner=learner, title="대화")
    yield World(learner, instructor, room, conversation, url, script, monkeypatch)
    chat.engine_cache_clear()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


_JSON_SCRIPT = re.compile(r'<script[^>]*type="application/json"[^>]*>(.*?)</script>', re.S)


def readable(response: Any) -> str:
    """What a reader reads of a response: an HTML page's text (entities decoded) with the strings of
    the JSON it carries (``json_script``, whose escapes hide Hangul), or a JSON answer's strings."""
    text = body(response)
    if response.get("Content-Type", "").startswith("application/json"):
        return "\n".join(_strings(json.loads(text)))
    carried = [s for block in _JSON_SCRIPT.findall(text) for s in _strings(json.loads(html.unescape(block)))]
    return "\n".join([html.unescape(text), *carried])


def walk(world: World) -> dict[tuple[str, str, str], str]:
    """Every GET route (its paths filled with the rows' ids), read by the learner and the instructor
    in each language: {(who, language, path?query): what it reads}."""
    ids = {
        "classroom_id": world.room.pk, "user_id": world.learner.pk, "conversation_id": world.conversation.pk,
        "document_id": Document.objects.filter(owner=world.learner).first().pk,  # type: ignore[union-attr]
        "engine_id": Engine.objects.first().pk, "assignment_id": 0, "number": 1, "job_id": world.jobs[0],  # type: ignore[union-attr]
    }  # fmt: skip
    read: dict[tuple[str, str, str], str] = {}
    for who, user in (("learner", world.learner), ("instructor", world.instructor)):
        for language in LANGUAGES:
            client = Client(raise_request_exception=False)
            client.force_login(user)
            client.cookies["django_language"] = language
            for route in sorted(set(routes())):
                if route.startswith("admin/") and route not in ADMIN_DOORS:
                    continue
                for path in paths(route, ids, tuple(world.jobs)):
                    for query in queries(path, (world.jobs[0], world.jobs[-1])):
                        response = client.get(path, query)
                        if response.status_code == 200:
                            read[(who, language, f"{path}?{query}")] = readable(response)
    return read


def said_in_each_language(made: dict[str, Read]) -> dict[str, list[tuple[str, str]]]:
    """Each case's texts as (Korean, English); the English has no Hangul, neither holds a credential."""
    texts = {}
    for name, read in made.items():
        with translation.override("ko"):
            korean = read()
        with translation.override("en"):
            english = read()
        assert korean and len(korean) == len(english), name
        texts[name] = list(zip(korean, english, strict=True))
        for ko, en in texts[name]:
            assert HANGUL.search(ko) and not HANGUL.search(en), (name, ko, en)
            assert SECRET not in ko + en, (name, ko)
    return texts


def test_every_saved_text_reads_in_english_on_every_page_that_shows_it_in_korean(world: World) -> None:
    with translation.override("ko"):  # made by a Korean worker, socket or page
        texts = said_in_each_language({case.name: case.make(world) for case in CASES})
    pages = walk(world)
    unseen, wrong = [], []
    for name, pairs in texts.items():
        for ko, en in pairs:
            shown = [
                (who, where) for (who, language, where), read in pages.items() if language == "ko" and ko[:60] in read
            ]
            unseen += [] if shown else [(name, ko)]
            for who, where in shown:  # the same page in English: the English, and no Korean
                english = pages.get((who, "en", where), "")
                if en[:60] not in english or ko[:60] in english:
                    wrong.append((name, who, where, en))
    assert not unseen, "shown on no page in Korean:\n" + "\n".join(map(str, unseen))
    assert not wrong, "not in English on the English page:\n" + "\n".join(map(str, wrong))


@pytest.mark.django_db(transaction=True)
def test_an_answers_done_frame_says_its_error_in_the_sockets_language(settings: Any) -> None:
    from labapp.asgi import application

    settings.VLLM_BASE_URL = DEAD
    chat.engine_cache_clear()
    learner = User.objects.create_user("said-socket")
    client = Client()
    client.force_login(learner)
    cookie = f"sessionid={client.cookies['sessionid'].value}; django_language=en".encode()

    async def ask_once() -> dict[str, Any]:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
        socket = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        await socket.connect()
        await socket.send_json_to({"type": "ask", "id": "q1", "question": "프리필이란?", "settings": {"top_k": 0}})
        while (frame := await socket.receive_json_from(timeout=10))["type"] != "done":
            pass
        await socket.disconnect()
        return dict(frame["answer"])

    answer = aio.run(ask_once())
    assert answer["status"] == "failed" and answer["error"].startswith("Cannot connect to vLLM"), answer
    assert not HANGUL.search(answer["error"]), answer["error"]
    assert HANGUL.search(Answer.objects.get(pk=answer["answer_id"]).error)  # kept in the site's language


# --- the places that save -------------------------------------------------------------------------

OWNER = "labapp/said.py"
ERROR_FIELDS = {"error", "error_text", "error_said"}
# What writes something named like an error field but is no row's kept text, and why.
NOT_KEPT_TEXTS = {
    "labapp/ops/": "operations tooling: its reports go to the operator's terminal, not to a reader",
    "record.error = ": "a request's own error as the engine or httpx worded it, kept as it came in the results",
    "run.error = ": "the answer being made: a saving place (``saving_places``), saved by answer_finish",
    "ComponentStatus(": "the status probe's exception, for admins' /status.json and the log; pages show its reason",
    "Sample(error=": "an imported request's own error as its tool's file words it, kept as it came in the results",
}


def _scanned() -> Iterator[tuple[str, ast.AST]]:
    for app in ("bench", "rag", "labapp"):
        for path in sorted((ROOT / app).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if "migrations" not in path.parts and where != OWNER and not where.startswith("labapp/ops/"):
                yield where, ast.parse(path.read_text(encoding="utf-8"))


def _saves(node: ast.AST) -> bool:
    """A call of ``error_fields`` or ``said.kept`` with a text, or a text put on a chat answer's run
    (``run.error = …``: ``conversations.answer_finish`` saves it)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        return name in ("error_fields", "kept") and bool(node.args)
    if isinstance(node, ast.Assign):
        return any(ast.unparse(target) in ("run.error", "self.run.error") for target in node.targets)
    return False


def saving_places_in(where: str, tree: ast.AST) -> set[str]:
    """ "path:function" of each function in ``tree`` that keeps a text to be said later."""
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
    return {f"{where}:{f.name}" for f in functions if any(_saves(node) for node in ast.walk(f))}


def bypasses_in(where: str, tree: ast.AST) -> list[str]:
    """Writes of an error field in ``tree`` that do not go through ``KeepsError.error_fields``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            found += [f"{where}:{node.lineno} {callee}({k.arg}=…)" for k in node.keywords if k.arg in ERROR_FIELDS]
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [
                f"{where}:{node.lineno} {ast.unparse(t)} = …"
                for t in targets
                if isinstance(t, ast.Attribute) and t.attr in ERROR_FIELDS
            ]
        elif isinstance(node, ast.Dict):  # "error" alone is every JSON answer's key: only the forms' names
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in ERROR_FIELDS - {"error"}]
            found += [f"{where}:{node.lineno} {{{key!r}: …}}" for key in keys]
    return [line for line in found if not any(mark in line for mark in NOT_KEPT_TEXTS)]


def test_every_place_that_keeps_a_text_is_walked_in_both_languages() -> None:
    walked = {place for case in CASES for place in case.places} | {SAVED_BY_EVERY_ANSWER}
    found = {place for where, tree in _scanned() for place in saving_places_in(where, tree)}
    assert found - walked == set(), f"kept here but walked by no case of CASES: {sorted(found - walked)}"
    assert walked - found == set(), f"walked places that keep nothing (any more): {sorted(walked - found)}"


def test_no_row_error_is_written_but_through_its_owner() -> None:
    found = [line for where, tree in _scanned() for line in bypasses_in(where, tree)]
    assert found == [], "write these through Model.error_fields (labapp.said.KeepsError):\n" + "\n".join(found)


def test_the_scan_finds_a_direct_write_and_a_new_place_that_keeps() -> None:
    tree = ast.parse(
        "def reap(job):\n"
        "    Job.objects.filter(pk=1).update(error='lost')\n"
        "    job.error_text = {}\n"
        "    Job.objects.update(**Job.error_fields(_('사라짐')), **Job.error_fields())\n"
        "def clear(job):\n"
        "    Job.objects.update(**Job.error_fields())\n"
    )
    assert saving_places_in("bench/x.py", tree) == {"bench/x.py:reap"}
    assert sorted(bypasses_in("bench/x.py", tree)) == [
        "bench/x.py:2 Job.objects.filter(pk=1).update(error=…)",
        "bench/x.py:3 job.error_text = …",
    ]
