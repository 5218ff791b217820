"""Faults with real processes: the engine, Chroma, Redis and a worker killed (SIGKILL, by process group) and restarted.

Every test kills session services of the harness through ``service_faults`` (tests/conftest.py),
which restarts whatever a failing test left dead, so the rest of the run finds them running.
The engine is killed and restarted once per run: one test covers the chat and a job.
The web server and the worker are never restarted for the engine or Chroma: their pids
are checked, so recovery is the running processes' own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import websockets
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from websockets.typing import Origin

from bench import services as bench_services
from bench.models import BenchJob
from labapp.models import ChapterSection
from rag import chunking, services, vectorstore
from rag.models import Answer, Document, IndexedSource
from tests import aio, harness
from tests.bench.test_bench_faults import wait_for
from tests.conftest import ServiceFaults
from tests.rag.test_documents_integration import HANDBOOK, assert_indexed_exactly, upload, wait_until_done

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent
LONG_QUESTION = "KV 캐시가 무엇인지 아주 길고 자세하게 설명해 주세요."
QUESTION = "프리필과 디코드는 어떻게 다른가요?"
ENGLISH_QUESTION = "How do prefill and decode differ?"
# Four requests; the last decodes 600 tokens, so the job is still running when the engine dies.
LONG_SWEEP = {"input_lengths": "64, 128", "fixed_output": 8, "output_lengths": "8, 600", "fixed_input": 64}
SHORT_SWEEP = {"repeats": 1, "input_lengths": "32", "fixed_output": 4, "output_lengths": "4", "fixed_input": 32}


@pytest.fixture(scope="module")
def chat(full_stack: str, chapter_indexed: None) -> dict[str, str]:
    """The web server's address and a signed-in session (local mode signs the visitor in)."""
    response = httpx.get(f"{full_stack}/chat/", timeout=30)
    assert response.status_code == 200
    return {"web": full_stack, "cookie": f"sessionid={response.cookies['sessionid']}"}


@pytest.fixture
def owner(document_owner: User) -> User:
    return document_owner


def ask(
    chat: dict[str, str],
    question: str,
    *,
    after_tokens: tuple[int, Callable[[], None]] | None = None,
    frame_timeout: float = 120,
    **chat_settings: Any,
) -> list[dict[str, Any]]:
    """Ask once on a fresh socket; every frame up to this ask's ``done`` or ``error``.

    ``after_tokens=(n, call)`` runs ``call`` (in a thread) once the n-th token frame has
    arrived, while the answer is still streaming. No frame may take ``frame_timeout``: a hang fails.
    """
    url = chat["web"].replace("http://", "ws://") + "/ws/chat/"

    async def go() -> list[dict[str, Any]]:
        async with websockets.connect(
            url, origin=Origin(chat["web"]), additional_headers={"Cookie": chat["cookie"]}, open_timeout=30
        ) as socket:
            await socket.send(json.dumps({"type": "ask", "id": "q", "question": question, "settings": chat_settings}))
            frames: list[dict[str, Any]] = []
            while True:
                frame = json.loads(await asyncio.wait_for(socket.recv(), frame_timeout))
                frames.append(frame)
                if after_tokens and frame["type"] == "token":
                    if sum(f["type"] == "token" for f in frames) == after_tokens[0]:
                        await asyncio.to_thread(after_tokens[1])
                if frame["type"] in ("done", "error") and frame.get("id") == "q":
                    return frames

    return aio.run(go())


def notices(frames: list[dict[str, Any]]) -> list[str]:
    return [n["code"] for f in frames if f["type"] == "prompt" for n in f["notices"]]


def assert_no_traceback(frames: list[dict[str, Any]]) -> None:
    text = json.dumps(frames, ensure_ascii=False)
    assert "Traceback" not in text and 'File "' not in text


def component_states(web: str, *, settle: Callable[[dict[str, bool]], bool]) -> dict[str, dict[str, Any]]:
    """status.json by component key; asked again (up to three times) while ``settle`` says a slow probe missed."""
    for _attempt in range(3):
        body = httpx.get(f"{web}/status.json", timeout=60).json()
        states = {c["key"]: c for c in body["components"]}
        if settle({key: c["ok"] for key, c in states.items()}):
            break
    return states


def only_down(*names: str) -> Callable[[dict[str, bool]], bool]:
    return lambda ok: {key for key, up in ok.items() if not up} == set(names)


def page(chat: dict[str, str], path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{chat['web']}{path}", params=params, headers={"Cookie": chat["cookie"]}, timeout=60)


def retrieval_ranks(chat: dict[str, str], question: str = QUESTION, mode: str = "hybrid") -> str:
    response = page(chat, "/retrieval/", question=question, collection="chapter", chunk_size="500", mode=mode)
    assert response.status_code == 200
    return response.text


def job_finished(job: BenchJob) -> Callable[[], bool]:
    def check() -> bool:
        job.refresh_from_db()
        return job.status not in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING)

    return check


# --- the engine ---------------------------------------------------------------------------------


def test_the_engine_killed_mid_answer_and_mid_job_fails_both_clearly_and_the_same_processes_recover_after_restart(
    chat: dict[str, str], owner: User, service_faults: ServiceFaults, celery_worker: harness.Service
) -> None:
    web_pid, worker_pid = service_faults.pid("web"), service_faults.pid("worker")
    job = bench_services.job_create(owner=owner, kind="sweep", config=LONG_SWEEP)

    def in_the_long_request() -> bool:
        job.refresh_from_db()
        assert job.status in (BenchJob.Status.QUEUED, BenchJob.Status.RUNNING), (job.error, celery_worker.log_tail())
        return job.done_requests >= 3

    wait_for(in_the_long_request, "the job reaches its 600-token request", timeout=300)

    # A streamed answer; after its third token the engine is SIGKILLed (the job's last request with it).
    frames = ask(
        chat, LONG_QUESTION, after_tokens=(3, lambda: service_faults.kill("engine")), max_tokens=600, temperature=1.0
    )
    assert_no_traceback(frames)
    answer = frames[-1]["answer"]
    assert frames[-1]["type"] == "done" and answer["status"] == "failed", answer
    assert answer["error"].startswith("vLLM 요청 실패"), answer["error"]
    streamed = "".join(f["text"] for f in frames if f["type"] == "token")
    saved = Answer.objects.get(pk=answer["answer_id"])
    assert saved.status == Answer.Status.FAILED and saved.error == answer["error"]
    assert saved.text == streamed == answer["text"] and saved.timings["client"]["chunks"] >= 3  # the partial answer

    wait_for(job_finished(job), "the job ends", timeout=60)
    print(f"\njob killed with the engine: {job.error}")
    assert job.status == BenchJob.Status.FAILED, job.error
    assert "connect" in job.error.lower() or "peer closed" in job.error.lower(), job.error
    cells = job.results["cells"]
    assert sum(c["completed"] for c in cells) >= 3, cells  # the requests finished before the kill are kept
    assert job.done_requests >= 3 and job.finished_at is not None

    # While the engine is down: a clear error at once, the status page names vLLM, the rest works.
    down = ask(chat, QUESTION, frame_timeout=20, top_k=3, max_tokens=8)
    assert_no_traceback(down)
    assert down[-1]["answer"]["status"] == "failed"
    assert down[-1]["answer"]["error"].startswith("vLLM에 연결할 수 없습니다"), down[-1]["answer"]["error"]
    states = component_states(chat["web"], settle=only_down("vllm"))
    assert not states["vllm"]["ok"] and states["vllm"]["error"], states["vllm"]
    assert [key for key, c in states.items() if not c["ok"]] == ["vllm"], states
    assert "vLLM" in page(chat, "/status/banner/").text
    for path in ("/", "/chat/", "/bench/", "/documents/"):
        assert page(chat, path).status_code == 200, path
    ranks = retrieval_ranks(chat)
    assert 'data-rank="1"' in ranks and "검색 불가" not in ranks

    service_faults.restart("engine")
    print(f"\nengine restart: ready after {service_faults.restart_s['engine']:.1f} s")
    assert (service_faults.pid("web"), service_faults.pid("worker")) == (web_pid, worker_pid)

    again = ask(chat, QUESTION, top_k=3, max_tokens=16)
    assert again[-1]["answer"]["status"] == "done", again[-1]["answer"]["error"]
    assert again[-1]["answer"]["sources"]  # recovered: retrieved and answered (16 tokens may all be cut as a repeat)
    after = bench_services.job_create(owner=owner, kind="sweep", config=SHORT_SWEEP)
    wait_for(job_finished(after), "the job after the restart ends", timeout=180)
    assert after.status == BenchJob.Status.DONE, after.error
    assert [c["completed"] for c in after.results["cells"]] == [1, 1]
    assert (service_faults.pid("web"), service_faults.pid("worker")) == (web_pid, worker_pid)


# --- Chroma ---------------------------------------------------------------------------------------


def test_chroma_killed_the_chat_answers_from_the_lexical_index_saying_vector_search_is_unavailable(
    chat: dict[str, str], shared_database: None, service_faults: ServiceFaults
) -> None:
    web_pid = service_faults.pid("web")
    service_faults.kill("chroma")

    # A Korean question with the bundled model is BM25 alone, and the saved lexical index keeps the
    # chunks' texts: it needs no Chroma, so it answers with its sources as before, and says nothing.
    lexical_only = ask(chat, QUESTION, top_k=3, max_tokens=8)
    assert lexical_only[-1]["answer"]["status"] == "done" and lexical_only[-1]["answer"]["sources"]
    assert notices(lexical_only) == []
    assert 'data-rank="1"' in retrieval_ranks(chat)

    # An English question's dense half needs Chroma: it answers from the lexical half, saying why.
    frames = ask(chat, ENGLISH_QUESTION, top_k=3, max_tokens=8)
    assert_no_traceback(frames)
    answer = frames[-1]["answer"]
    assert answer["status"] == "done", answer["error"]
    assert notices(frames) == ["dense_unavailable"] and answer["sources"], answer
    shown = [n["message"] for n in answer["timings"]["notices"]]
    assert len(shown) == 1 and shown[0].startswith("벡터 검색 불가") and "Chroma" in shown[0], shown
    saved = Answer.objects.get(pk=answer["answer_id"])
    assert [n["code"] for n in saved.timings["notices"]] == ["dense_unavailable"]
    assert saved.timings["embed_ms"] is None  # nothing was embedded: the panel shows "—"
    reopened = page(chat, f"/chat/{answer['conversation']}/").text  # the page draws saved answers from JSON
    assert "dense_unavailable" in reopened and json.dumps("벡터 검색 불가")[1:-1] in reopened
    english = retrieval_ranks(chat, question=ENGLISH_QUESTION)
    assert "dense-unavailable" in english and 'data-rank="1"' in english
    assert "<b>임베딩</b> —</span>" in english  # nothing was embedded: no "0.0 ms"
    # Dense search alone has nothing to fall back on.
    assert "검색 불가 (Chroma)" in retrieval_ranks(chat, question=ENGLISH_QUESTION, mode="dense")

    states = component_states(chat["web"], settle=only_down("chroma"))
    assert [key for key, c in states.items() if not c["ok"]] == ["chroma"], states
    assert "Chroma" in page(chat, "/status/banner/").text

    service_faults.restart("chroma")
    assert service_faults.pid("web") == web_pid
    back = ask(chat, QUESTION, top_k=3, max_tokens=8)
    assert back[-1]["answer"]["status"] == "done" and back[-1]["answer"]["sources"], back[-1]["answer"]
    assert notices(back) == []
    assert notices(ask(chat, ENGLISH_QUESTION, top_k=3, max_tokens=8)) == []
    assert 'data-rank="1"' in retrieval_ranks(chat)
    assert component_states(chat["web"], settle=only_down())["chroma"]["ok"]
    assert service_faults.pid("web") == web_pid


# --- Redis ----------------------------------------------------------------------------------------


def test_redis_restarted_mid_answer_the_answer_completes_with_its_timings_and_tasks_work_again(
    chat: dict[str, str], owner: User, service_faults: ServiceFaults, celery_worker: harness.Service
) -> None:
    from labapp.tasks import ping

    web_pid = service_faults.pid("web")
    during: dict[str, int] = {}

    def restart_redis() -> None:
        service_faults.kill("redis")
        for path in ("/", "/chat/", "/documents/"):
            during[path] = page(chat, path).status_code  # pages render with Redis down
        service_faults.restart("redis")

    httpx.get(f"{chat['web']}/status.json", timeout=60)  # the web process's broker connections, made before
    frames = ask(chat, LONG_QUESTION, after_tokens=(3, restart_redis), max_tokens=120, temperature=1.0)
    assert during == {"/": 200, "/chat/": 200, "/documents/": 200}
    answer = frames[-1]["answer"]
    assert answer["status"] == "done", answer["error"]
    client = answer["timings"]["client"]
    assert client["ttft_ms"] and client["e2el_ms"] > client["ttft_ms"] and client["chunks"] >= 3
    saved = Answer.objects.get(pk=answer["answer_id"])
    assert saved.status == Answer.Status.DONE and saved.text == answer["text"]
    assert saved.timings["client"]["e2el_ms"] == client["e2el_ms"]
    assert service_faults.pid("web") == web_pid

    # Celery again: a round trip through the restarted broker, then a document ingested by the worker.
    sent = time.time()
    assert ping.delay(sent).get(timeout=90)["sent"] == sent
    # The status page asks the worker on a connection of its own, not on a pooled one Redis closed.
    celery = {c["key"]: c for c in httpx.get(f"{chat['web']}/status.json", timeout=60).json()["components"]}["celery"]
    assert celery["ok"], celery
    uploader = Client()
    uploader.force_login(owner)
    upload(uploader, "재시작 뒤.md", HANDBOOK)
    document = wait_until_done(Document.objects.get(owner=owner).pk, celery_worker)
    assert document.status == Document.Status.READY, document.error
    assert_indexed_exactly(document, HANDBOOK.strip())


def test_redis_restarted_right_after_tasks_again_and_again_leaves_the_same_worker_consuming(
    service_faults: ServiceFaults, celery_worker: harness.Service
) -> None:
    """Redis killed the moment a task's result is back, while its late ack may still be unsent.

    Celery 5.7.0's worker then died ("Unrecoverable error: AttributeError", closing a connection it had
    already collected), on the second or third cycle here; a class server would have had no worker until restarted.
    """
    from labapp.tasks import ping

    worker = celery_worker.process.pid
    for cycle in range(6):
        sent = time.time()
        assert ping.delay(sent).get(timeout=60)["sent"] == sent
        service_faults.kill("redis")
        time.sleep(cycle % 3)  # down for 0, 1 and 2 s: the worker's reconnects back off differently
        service_faults.restart("redis")
        sent = time.time()
        answered, deadline = ping.delay(sent), time.monotonic() + 60
        while not answered.ready() and celery_worker.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert celery_worker.process.poll() is None, f"the worker died on cycle {cycle}:\n{celery_worker.log_tail()}"
        assert answered.get(timeout=60)["sent"] == sent, f"cycle {cycle}"
    assert celery_worker.process.poll() is None and celery_worker.process.pid == worker
    assert "Unrecoverable" not in celery_worker.log_tail(400)


# --- ingestion interrupted ----------------------------------------------------------------------------


def assert_one_copy_of_each_chunk(collection: str, texts: dict[str, str]) -> None:
    """Chroma holds exactly the chunks of ``texts`` (source → text) at every size: once each, nothing else."""
    stored = vectorstore.get_where(collection, {})  # every partition, unfiltered
    keys = [(h.metadata["source"], h.metadata["chunk_size"], h.metadata["chunk_index"]) for h in stored]
    assert len(keys) == len(set(keys)), "a chunk is stored twice"
    assert len({h.id for h in stored}) == len(stored) == vectorstore.count(collection)
    expected = {
        (source, size, piece.index): piece.text
        for source, text in texts.items()
        for size in chunking.CHUNK_SIZES
        for piece in chunking.split(text, size=size)
    }
    assert set(keys) == set(expected), "missing or stale chunks"
    assert all(h.id == "{}:{}:{}".format(*key) for h, key in zip(stored, keys, strict=True))
    assert all(h.document == expected[key] for h, key in zip(stored, keys, strict=True))
    counts = IndexedSource.objects.filter(collection=collection).values_list("chunk_count", flat=True)
    assert sum(counts) == len(expected)


def test_build_index_killed_half_way_then_run_again_leaves_exactly_one_copy_of_each_chunk(
    chapter_indexed: None, shared_database: None, tmp_path: Path
) -> None:
    collection = services.CHAPTER_COLLECTION
    whole = vectorstore.count(collection)
    log = (tmp_path / "build_index.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "build_index", "--force"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # Between deleting a page's chunks and storing its new ones: the worst moment to die.
        wait_for(lambda: vectorstore.count(collection) < whole, "build_index replaces a page's chunks", timeout=300)
        assert process.poll() is None, (tmp_path / "build_index.log").read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert vectorstore.count(collection) < whole  # the store is short of chunks its rows still count

    rerun = subprocess.run(
        [sys.executable, "manage.py", "build_index"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    texts = {f"chapter/{s.language}/{s.slug}": f"{s.title}\n\n{s.body}" for s in ChapterSection.objects.all()}
    assert_one_copy_of_each_chunk(collection, texts)


def test_a_worker_killed_mid_ingestion_leaves_the_document_failed_and_a_re_upload_stores_each_chunk_once(
    owner: User,
    chroma_server: str,
    service_faults: ServiceFaults,
    celery_worker: harness.Service,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = "\n\n".join(f"## 판 {n}\n\n{HANDBOOK}" for n in range(10))  # ~19 KB: seconds of embedding per chunk size
    uploader = Client()
    uploader.force_login(owner)
    upload(uploader, "큰 규정.md", big)
    document = Document.objects.get(owner=owner)

    def half_way() -> bool:
        document.refresh_from_db()
        assert document.status in (Document.Status.QUEUED, Document.Status.INGESTING), document.error
        return document.status == Document.Status.INGESTING and bool(document.chunk_counts)

    wait_for(half_way, "the first chunk size is stored", timeout=180)
    service_faults.kill("worker")  # the worker and its pool child, mid-task
    document.refresh_from_db()
    assert document.status == Document.Status.INGESTING and 0 < document.progress < 100
    assert vectorstore.get_where(document.collection, {"source": document.source})  # half of it is in Chroma

    # The task stays unacknowledged until the broker's visibility timeout (hours): the page reaps the row.
    monkeypatch.setattr(services, "INGEST_STALE_S", 1.0)
    time.sleep(1.5)
    rows = uploader.get("/documents/rows/").content.decode()
    document.refresh_from_db()
    assert document.status == Document.Status.FAILED and "사라졌습니다" in document.error, document.error
    assert 'data-status="failed"' in rows
    assert vectorstore.get_where(document.collection, {"source": document.source}) == []
    assert not IndexedSource.objects.filter(collection=document.collection, source=document.source).exists()

    service_faults.restart("worker")
    upload(uploader, "큰 규정.md", big)  # run it again
    document = wait_until_done(document.pk, celery_worker)
    assert document.status == Document.Status.READY, document.error
    assert_indexed_exactly(document, big.strip())
    assert_one_copy_of_each_chunk(document.collection, {document.source: big.strip()})

    # Hours later the broker redelivers the killed worker's task: it runs again and still stores one copy.
    done_before = celery_worker_log().count("rag.document_ingest[")
    with redis.Redis.from_url(settings.REDIS_URL) as broker:
        # The killed ingestion's task alone (another test's killed job may be held there too), once the
        # re-upload's task, whose row is ready a moment before it returns and is acknowledged, is gone.
        def held() -> int:
            return sum(b"rag.document_ingest" in task for task in broker.hvals("unacked"))

        wait_for(lambda: held() == 1, "only the killed ingestion's task is left unacknowledged", timeout=60)
    from rag import tasks

    with tasks.document_ingest.app.connection_for_write(
        settings.REDIS_URL, transport_options={"visibility_timeout": 0}
    ) as connection:
        connection.default_channel.qos.restore_visible(num=100)
    wait_for(lambda: celery_worker_log().count("rag.document_ingest[") >= done_before + 2, "the redelivery runs")
    document = wait_until_done(document.pk, celery_worker)
    assert document.status == Document.Status.READY, document.error
    assert_one_copy_of_each_chunk(document.collection, {document.source: big.strip()})


def celery_worker_log() -> str:
    return (harness.LOG_DIR / "worker.log").read_text(errors="replace")
