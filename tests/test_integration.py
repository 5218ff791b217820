"""Integration tests against the real parts, started once by the harness (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
import websockets
from django.test import override_settings
from websockets.typing import Origin

from rag.vllm.records import RequestRecord
from tests import aio

pytestmark = pytest.mark.integration


def test_a_streamed_completion_from_the_real_engine_is_measured(engine: str) -> None:
    from rag.vllm import client as vllm_client

    info = vllm_client.engine_info()
    assert info.model and info.version != "?" and info.max_model_len
    seen: list[str] = []

    async def on_text(text: str, record: RequestRecord) -> None:
        seen.append(text)

    # A unique prefix keeps the prefix cache out of this prefill measurement.
    prompt = f"[{uuid.uuid4()}] 자료: 연차는 입사 첫해에 15일입니다.\n질문: 연차는 며칠인가요?\n답:"
    record = aio.run(vllm_client.stream_completion(prompt, max_tokens=24, ignore_eos=True, on_text=on_text))
    assert record.success, record.error
    assert record.output_tokens == 24 and record.prompt_tokens and record.prompt_tokens > 10
    assert record.ttft is not None and record.ttft > 0
    assert record.decode_time is not None and record.decode_time > 0
    assert record.tpot is not None and record.tpot > 0
    assert len(record.itl) == len(record.text_chunk_at) - 1 and len(seen) == len(record.text_chunk_at)
    assert record.cached_tokens is not None  # --enable-prompt-tokens-details
    # --enable-per-request-metrics: the server's own queue/prefill/decode split
    assert record.prefill_time_server is not None and record.decode_time_server is not None
    assert record.queue_time_server is not None
    assert record.prefill_time_source == "server"
    assert record.finish_reason == "length"


def test_a_repeated_prompt_reuses_the_prefix_cache(engine: str) -> None:
    from rag.vllm import client as vllm_client

    prompt = f"[{uuid.uuid4()}] " + "프리필은 입력을 한 번에 처리합니다. " * 40
    first = aio.run(vllm_client.stream_completion(prompt, max_tokens=2, ignore_eos=True))
    second = aio.run(vllm_client.stream_completion(prompt, max_tokens=2, ignore_eos=True))
    assert first.success and second.success
    assert first.cached_tokens == 0
    assert second.cached_tokens and second.cached_tokens > 0


def test_a_celery_task_round_trips_through_redis_and_a_real_worker(celery_worker: object) -> None:
    from labapp.tasks import ping

    sent = time.time()
    result = ping.delay(sent).get(timeout=60)
    assert result["sent"] == sent
    assert result["worker_time"] >= sent


def test_chroma_stores_and_finds_an_embedded_text(chroma_server: str) -> None:
    from rag import embeddings, vectorstore

    name = f"test-{uuid.uuid4().hex[:8]}"
    texts = ["디코드는 출력 토큰을 하나씩 만든다", "프리필은 프롬프트 전체를 한 번에 계산한다"]
    vectorstore.upsert(
        name,
        ids=["decode", "prefill"],
        embeddings=embeddings.embed(texts),
        documents=texts,
        metadatas=[{"source": "t"}, {"source": "t"}],
    )
    hits = vectorstore.query(name, embedding=embeddings.embed([texts[1]])[0], k=2)
    assert hits[0].id == "prefill" and hits[0].distance < hits[1].distance
    assert vectorstore.count(name) == 2


def test_building_the_chapter_index_again_adds_nothing_and_a_forced_rebuild_leaves_one_copy_of_each_chunk(
    chapter_indexed: None, shared_database: None
) -> None:
    """On the index the run built once (``chapter_indexed``, as `make run`'s index step does): a second
    build finds every page current, and a forced one replaces each page's chunks without doubling any."""
    from rag import vectorstore
    from rag.services import CHAPTER_COLLECTION, chapter_index

    built = vectorstore.count(CHAPTER_COLLECTION)
    again = chapter_index()
    assert built > 0 and again.indexed == 0 and again.chunks == built
    forced = chapter_index(force=True)
    assert forced.indexed > 0 and vectorstore.count(CHAPTER_COLLECTION) == forced.chunks == built


def _ws_round_trip(url: str, origin: str) -> dict[str, object]:
    async def go() -> dict[str, object]:
        async with websockets.connect(url, origin=Origin(origin), open_timeout=10) as socket:
            await socket.send(json.dumps({"type": "ping", "sent": 1.5}))
            return dict(json.loads(await asyncio.wait_for(socket.recv(), 10)))

    return aio.run(go())


def test_a_websocket_round_trips_through_daphne_and_the_channel_layer(web_server: str) -> None:
    url = web_server.replace("http://", "ws://") + "/ws/ping/"
    reply = _ws_round_trip(url, origin=web_server)  # the site's own origin: scheme, host and port
    assert reply.get("type") == "pong", reply
    assert reply == {"type": "pong", "sent": 1.5, "via": "channel layer", "server_received": reply["server_received"]}


def test_a_websocket_from_a_foreign_origin_is_refused(web_server: str) -> None:
    url = web_server.replace("http://", "ws://") + "/ws/ping/"
    with pytest.raises(websockets.exceptions.InvalidStatus):
        _ws_round_trip(url, origin="http://evil.example")


def test_a_websocket_gets_a_clear_error_for_a_bad_message(web_server: str) -> None:
    url = web_server.replace("http://", "ws://") + "/ws/ping/"

    async def go() -> dict[str, object]:
        async with websockets.connect(url, origin=Origin(web_server)) as socket:
            await socket.send(json.dumps({"type": "hello"}))
            return dict(json.loads(await asyncio.wait_for(socket.recv(), 10)))

    assert aio.run(go())["type"] == "error"


def test_hybrid_retrieval_finds_korean_answers(chapter_indexed: None, shared_database: None) -> None:
    """Recall on the Korean evaluation sets (rag/evaluation.EVAL_SETS: the project's questions and the
    paraphrases) at every chunk size, on the index the run built once (``chapter_indexed``, as `make run`'s
    index step does). Korean is indexed by morphemes (kiwipiepy); with character bigrams the same
    search found 0.79 / 0.91 / 0.97 in the top 5 and 0.57 / 0.66 / 0.71 first (docs/performance.md)."""
    from rag import embeddings
    from rag.evaluation import evaluate

    assert embeddings.backend() == "onnx", "make test exports the bundled model to ONNX"
    floors = {200: (0.58, 0.90), 500: (0.68, 0.93), 1000: (0.70, 0.95)}  # recall@1, recall@5
    for size, (at_1, at_5) in floors.items():
        recall = {row.mode: row for row in evaluate(chunk_size=size, modes=("lexical", "hybrid"))}
        assert recall["hybrid"].questions >= 90
        assert recall["hybrid"].at_1 >= at_1 and recall["hybrid"].at_5 >= at_5, (size, recall["hybrid"].misses)
        assert recall["hybrid"].at_5 >= recall["lexical"].at_5 - 0.02
    # The chunks were embedded on ONNX Runtime; questions embedded by PyTorch find the same answers.
    with override_settings(EMBEDDING_BACKEND="torch"):
        on_torch = {row.mode: row for row in evaluate(chunk_size=1000, modes=("dense", "hybrid"))}
    on_onnx = {row.mode: row for row in evaluate(chunk_size=1000, modes=("dense", "hybrid"))}
    for mode in ("dense", "hybrid"):
        assert (on_onnx[mode].at_1, on_onnx[mode].at_5) == (on_torch[mode].at_1, on_torch[mode].at_5), mode


@pytest.mark.django_db(transaction=True)
def test_the_lexical_index_is_saved_once_per_change_and_a_new_process_opens_it_without_a_rebuild(
    chroma_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag import retrieval, vectorstore
    from rag.services import source_index

    name = f"test-{uuid.uuid4().hex[:8]}"
    metadata = {"language": "ko", "slug": "s", "title": "t"}
    source_index(
        collection=name, source="doc", text="프리필은 입력을 한 번에 계산합니다.", metadata=metadata, sizes=(200,)
    )
    assert retrieval.prebuild_lexical(name, [200], ("ko",)) == 1  # what the indexing worker does
    assert retrieval.prebuild_lexical(name, [200], ("ko",)) == 0  # nothing changed: nothing to build
    retrieval._lexical_cache.clear()  # a web process that has not searched yet

    def no_rebuild(*args: object, **kwargs: object) -> None:
        raise AssertionError("the saved index was rebuilt from every chunk")

    def no_count(*args: object, **kwargs: object) -> None:
        raise AssertionError("a question asked Chroma for a count (its index's stamp is read from the database)")

    def no_fetch(*args: object, **kwargs: object) -> None:
        raise AssertionError("a lexical search fetched its chunks from Chroma (the saved index keeps them)")

    monkeypatch.setattr(vectorstore, "get_where", no_rebuild)
    monkeypatch.setattr(vectorstore, "count", no_count)
    monkeypatch.setattr(vectorstore, "get_ids", no_fetch)
    found = retrieval.retrieve("프리필", collection=name, chunk_size=200, top_k=1, language="ko", mode="lexical")
    assert found.chunks and "프리필" in found.chunks[0].text
    monkeypatch.undo()
    # What the index kept is what Chroma holds, metadata included.
    (stored,) = vectorstore.get_ids(name, [found.chunks[0].id], {"chunk_size": 200, "language": "ko"})
    assert (found.chunks[0].text, found.chunks[0].metadata) == (stored.document, stored.metadata)
    source_index(
        collection=name, source="doc", text="디코드는 출력을 하나씩 생성합니다.", metadata=metadata, sizes=(200,)
    )
    assert retrieval.prebuild_lexical(name, [200], ("ko",)) == 1  # a change: built again, once


@pytest.mark.django_db(transaction=True)
def test_re_indexing_an_edited_text_refreshes_the_lexical_index(chroma_server: str) -> None:
    from rag.retrieval import retrieve
    from rag.services import source_index

    name = f"test-{uuid.uuid4().hex[:8]}"
    metadata = {"language": "ko", "slug": "s", "title": "t"}
    source_index(
        collection=name, source="doc", text="프리필은 입력을 한 번에 계산합니다.", metadata=metadata, sizes=(200,)
    )
    before = retrieve("프리필", collection=name, chunk_size=200, top_k=1, mode="lexical")
    assert before.chunks and "프리필" in before.chunks[0].text
    # Same length, same chunk count, other words: the cached index must not answer from the old text.
    source_index(
        collection=name, source="doc", text="디코드는 출력을 하나씩 생성합니다.", metadata=metadata, sizes=(200,)
    )
    after = retrieve("디코드", collection=name, chunk_size=200, top_k=1, mode="lexical")
    assert after.chunks and "디코드" in after.chunks[0].text
    assert retrieve("프리필", collection=name, chunk_size=200, top_k=1, mode="lexical").chunks == []
