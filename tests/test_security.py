"""Sessions and sockets on a class server, and per-user limits on the shared engine.

The deployment checklist (`check --deploy`) is tests/site/test_env.py's
test_class_mode_passes_the_deployment_checklist.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from importlib import import_module
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from bench import services, views
from bench.models import BenchJob
from labapp import sockets
from labapp.asgi import application
from rag import ask as rag_ask
from rag import chat, embeddings, keeper
from rag.models import Answer, Conversation
from rag.retrieval import RetrievalResult
from tests import aio
from tests.settings import free_port

PASSWORD = "correct horse battery staple 42"  # noqa: S105 - test accounts
IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def class_server(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.LAB_MODE = "class"
    settings.CHANNEL_LAYERS = IN_MEMORY
    monkeypatch.setattr(embeddings, "warm_in_background", lambda: None)


def _signed_in(username: str = "learner1") -> Client:
    user = User.objects.filter(username=username).first() or User.objects.create_user(username, password=PASSWORD)
    client = Client()
    client.force_login(user)
    return client


def _socket(path: str, client: Client) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
    return WebsocketCommunicator(application, path, headers=headers)


def _session_exists(key: str) -> bool:
    return bool(import_module(django_settings.SESSION_ENGINE).SessionStore().exists(key))


def _rotate(client: Client) -> None:
    store = import_module(django_settings.SESSION_ENGINE).SessionStore(client.cookies["sessionid"].value)
    store.cycle_key()
    store.save()
    client.cookies["sessionid"] = store.session_key


# --- sessions ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_signing_in_gives_a_new_session_key_and_the_old_one_is_gone(class_server: None) -> None:
    User.objects.create_user("learner1", password=PASSWORD)
    client = Client()
    session = client.session  # what a visitor (or someone who planted the cookie) holds before signing in
    session["before"] = "kept"
    session.save()
    planted = client.cookies["sessionid"].value
    response = client.post("/accounts/login/", {"username": "learner1", "password": PASSWORD})
    assert response.status_code == 302
    signed_in = client.cookies["sessionid"].value
    assert signed_in != planted and not _session_exists(planted)
    assert client.session["before"] == "kept" and client.session["_auth_user_id"]
    client.post("/accounts/logout/")
    assert not _session_exists(signed_in)


# --- open sockets end with the session --------------------------------------------------


async def _closed_with(socket: WebsocketCommunicator) -> int | None:
    output = await socket.receive_output(timeout=5)
    assert output["type"] == "websocket.close", output
    code: int | None = output.get("code")
    return code


@pytest.mark.django_db(transaction=True)
def test_signing_out_closes_the_chat_socket_and_a_reconnect_is_refused(class_server: None) -> None:
    browser = _signed_in()
    other_browser = _signed_in()  # the same learner on another device stays signed in

    async def go() -> tuple[int | None, dict[str, Any], tuple[bool, int | None]]:
        mine, theirs = _socket("/ws/chat/", browser), _socket("/ws/chat/", other_browser)
        assert (await mine.connect())[0] and (await theirs.connect())[0]
        response = await sync_to_async(browser.post)("/accounts/logout/")
        assert response.status_code == 302
        code = await _closed_with(mine)
        await theirs.send_json_to({"type": "stop", "id": "x"})  # still answering
        still_open = await theirs.receive_json_from(timeout=5)
        await theirs.disconnect()
        again = _socket("/ws/chat/", browser)
        reconnect = await again.connect()
        return code, still_open, reconnect

    code, still_open, reconnect = aio.run(go())
    assert code == sockets.CLOSE_SIGNED_OUT
    assert still_open["type"] == "error"
    assert reconnect == (False, 4401)


@pytest.mark.django_db(transaction=True)
def test_signing_out_closes_the_job_progress_socket(class_server: None) -> None:
    browser = _signed_in()
    job = BenchJob.objects.create(owner=User.objects.get(username="learner1"), kind="speed", engine_url="http://x")

    async def go() -> int | None:
        socket = _socket(f"/ws/bench/{job.pk}/", browser)
        assert (await socket.connect())[0]
        await sync_to_async(browser.post)("/accounts/logout/")
        return await _closed_with(socket)

    assert aio.run(go()) == sockets.CLOSE_SIGNED_OUT


@pytest.mark.django_db(transaction=True)
def test_a_socket_whose_session_was_rotated_closes_when_the_user_signs_out(class_server: None) -> None:
    browser = _signed_in()

    async def go() -> int | None:
        socket = _socket("/ws/chat/", browser)
        assert (await socket.connect())[0]
        await sync_to_async(_rotate)(browser)  # as a password change does: this socket's key is gone
        await sync_to_async(browser.post)("/accounts/logout/")
        return await _closed_with(socket)

    assert aio.run(go()) == sockets.CLOSE_SIGNED_OUT


@pytest.mark.django_db
def test_signing_out_succeeds_when_the_channel_layer_is_down(class_server: None, settings: Any) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
        }
    }
    browser = _signed_in()
    key = browser.cookies["sessionid"].value
    response = browser.post("/accounts/logout/")
    assert response.status_code == 302 and not _session_exists(key)


@pytest.mark.django_db(transaction=True)
def test_chat_works_without_a_channel_layer(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
        }
    }
    monkeypatch.setattr(embeddings, "warm_in_background", lambda: None)
    browser = _signed_in()

    async def go() -> dict[str, Any]:
        socket = _socket("/ws/chat/", browser)
        assert (await socket.connect())[0]
        await socket.send_json_to({"type": "dance"})
        frame: dict[str, Any] = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return frame

    assert aio.run(go())["type"] == "error"


# --- per-user limits --------------------------------------------------------------------


@pytest.fixture
def slow_answers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Answers that stream until stopped (no engine); the questions whose retrieval was started."""
    retrieved: list[str] = []

    async def forever(run: chat.AnswerRun, send: Any, retrieving: Any = None) -> None:
        run.asked.set()  # as the real one does once the request is out: the row is written now
        await asyncio.sleep(60)

    def nothing_found(run: chat.AnswerRun) -> RetrievalResult:
        retrieved.append(run.question)
        return aio.nothing_found(run)

    monkeypatch.setattr(chat, "answer_run", forever)
    monkeypatch.setattr(rag_ask, "search", nothing_found)
    return retrieved


def _ask(client_id: str) -> dict[str, Any]:
    return {"type": "ask", "id": client_id, "question": "프리필이란?"}


@pytest.mark.django_db(transaction=True)
def test_answers_at_once_are_limited_per_user_across_sockets(
    class_server: None, slow_answers: list[str], settings: Any
) -> None:
    settings.CHAT_MAX_CONCURRENT_PER_USER = 2
    tab1, tab2 = _signed_in(), _signed_in()

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        first, second = _socket("/ws/chat/", tab1), _socket("/ws/chat/", tab2)
        await first.connect()
        await second.connect()
        for n in range(2):
            await first.send_json_to(_ask(f"a{n}"))
            assert (await first.receive_json_from(timeout=5))["type"] == "started"
        await second.send_json_to(_ask("b0"))
        refused: dict[str, Any] = await second.receive_json_from(timeout=5)
        await first.send_json_to({"type": "stop", "id": "a0"})
        assert (await first.receive_json_from(timeout=5))["type"] == "done"
        await second.send_json_to(_ask("b1"))
        accepted: dict[str, Any] = await second.receive_json_from(timeout=5)
        await first.disconnect()
        await second.disconnect()
        return refused, accepted

    refused, accepted = aio.run(go())
    assert refused["type"] == "error" and refused["id"] == "b0" and "2개" in refused["error"]
    assert accepted["type"] == "started"
    assert Answer.objects.count() == 3  # the refused ask saved nothing
    assert len(slow_answers) == 3  # and spent no retrieval: the limit is checked before searching


@pytest.mark.django_db(transaction=True)
def test_an_answer_left_streaming_by_a_lost_process_stops_counting(class_server: None, slow_answers: list[str]) -> None:
    browser = _signed_in()
    conversation = Conversation.objects.create(owner=User.objects.get(username="learner1"))
    for _ in range(django_settings.CHAT_MAX_CONCURRENT_PER_USER):
        Answer.objects.create(conversation=conversation, question="q", status=Answer.Status.STREAMING)

    async def ask() -> dict[str, Any]:
        socket = _socket("/ws/chat/", browser)
        await socket.connect()
        await socket.send_json_to(_ask("q1"))
        frame: dict[str, Any] = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return frame

    assert aio.run(ask())["type"] == "error"
    Answer.objects.update(beat_at=timezone.now() - timedelta(seconds=keeper.ORPHAN_S + 1))  # their process is gone
    assert aio.run(ask())["type"] == "started"


@pytest.fixture
def bench_client(monkeypatch: pytest.MonkeyPatch) -> tuple[Client, list[dict[str, Any]]]:
    made: list[dict[str, Any]] = []

    def job_create(**kwargs: Any) -> Any:
        made.append(kwargs)
        return SimpleNamespace(pk=1)

    monkeypatch.setattr(services, "job_create", job_create)
    monkeypatch.setattr(views, "engine_max_model_len", lambda: 8192)
    return _signed_in(), made


@pytest.mark.django_db
def test_a_learner_with_the_most_active_jobs_is_told_to_wait_and_nothing_is_made(
    bench_client: tuple[Client, list[dict[str, Any]]],
) -> None:
    client, made = bench_client
    owner = User.objects.get(username="learner1")
    now = timezone.now()
    # Running, not waiting: a learner with a run waiting may not send another at all (test_pools).
    BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://x", status=BenchJob.Status.RUNNING)
    BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://x", status=BenchJob.Status.DONE)
    BenchJob.objects.create(
        owner=owner,
        kind="speed",
        engine_url="http://x",
        status=BenchJob.Status.RUNNING,
        started_at=now - timedelta(seconds=40),
        heartbeat_at=now,
        done_requests=4,
        total_requests=8,
    )
    assert client.post("/bench/", {"kind": "speed"}).status_code == 302  # 2 active of 3
    BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://x")
    page = client.post("/bench/", {"kind": "speed"})
    text = page.content.decode()
    assert page.status_code == 200 and "바쁩니다" in text
    assert "40초 뒤 다시 시도" in text  # the running job is half done after 40 s
    assert len(made) == 1 and BenchJob.objects.filter(owner=owner).count() == 4


@pytest.mark.django_db
def test_the_wait_is_a_fixed_guess_when_no_job_has_progress(
    bench_client: tuple[Client, list[dict[str, Any]]], settings: Any
) -> None:
    settings.BENCH_MAX_ACTIVE_JOBS_PER_USER = 1
    client, made = bench_client
    BenchJob.objects.create(owner=User.objects.get(username="learner1"), kind="speed", engine_url="http://x")
    other = _signed_in("learner2")  # another learner's jobs do not count against this one
    assert other.post("/bench/", {"kind": "speed"}).status_code == 302
    text = client.post("/bench/", {"kind": "speed"}).content.decode()
    assert f"{services.RETRY_GUESS_S}초 뒤 다시 시도" in text and len(made) == 1


@pytest.mark.django_db
def test_the_lab_run_button_and_the_demo_sweep_keep_the_same_job_limit(
    bench_client: tuple[Client, list[dict[str, Any]]], settings: Any
) -> None:
    settings.BENCH_MAX_ACTIVE_JOBS_PER_USER = 1
    client, made = bench_client
    BenchJob.objects.create(owner=User.objects.get(username="learner1"), kind="speed", engine_url="http://x")
    lab = client.post("/labs/1/run/", follow=True)
    assert lab.status_code == 200 and "바쁩니다" in lab.content.decode()
    demo = client.post("/demo/sweep/", {"top_k_max": "2", "chunk_size_max": "200"}, follow=True)
    assert demo.status_code == 200 and "바쁩니다" in demo.content.decode()
    assert made == []  # nothing was made at either door


def test_a_sign_out_watch_rides_out_layer_timeouts_and_joins_its_group_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from labapp import sockets

    class FlakyLayer:
        def __init__(self) -> None:
            self.receives = 0
            self.joined: list[str] = []

        async def new_channel(self) -> str:
            return "chan-1"

        async def group_add(self, group: str, channel: str) -> None:
            self.joined.append(group)

        async def group_discard(self, group: str, channel: str) -> None:
            pass

        async def receive(self, channel: str) -> dict[str, Any]:
            self.receives += 1
            if self.receives <= 2:
                raise TimeoutError("Timeout reading from redis")
            return {"type": sockets.SIGNED_OUT, "session": None}

    layer = FlakyLayer()
    monkeypatch.setattr(sockets, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(sockets, "RETRY_FIRST_S", 0.01)
    closed: list[bool] = []

    async def on_sign_out() -> None:
        closed.append(True)

    async def go() -> None:
        watch = sockets.SignOutWatch(scope={"user": SimpleNamespace(pk=7)}, on_sign_out=on_sign_out)
        await watch.start()
        assert watch.task is not None
        await asyncio.wait_for(watch.task, 5)

    aio.run(go())
    assert closed == [True] and layer.receives == 3
    assert layer.joined == ["user-7", "user-7", "user-7"]  # joined at start, then again after each failure
