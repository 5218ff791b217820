"""Every event that should end a user's sessions does, by every way the code can make it.

``WAYS`` names, for each event in ``labapp.session_ends.EVENTS`` (the list the signal
receivers use), each way the project lets it happen: the site's pages, Django's admin, a
management command, the ORM from the other side of a relation. For each way the user is
signed in twice; a chat socket is open on the session that did not act; the way runs;
then that socket is closed, told either by the close event (a channel layer up) or at its
next frame (no layer: the event is lost), that session's next page is the sign-in, and a
session that acted on its own account is still signed in. A new event without a way here
fails ``test_every_event_has_a_way_that_the_walk_takes``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.test import Client

from bench.models import BenchJob
from labapp import session_ends, sockets
from labapp.classes import services
from labapp.models import Classroom, Membership
from labapp.session_ends import Event
from rag import retrieval
from rag.models import Answer
from tests import aio

PASSWORD = "correct-horse-battery"  # noqa: S105 - test accounts
NEW_PASSWORD = "a-new-long-phrase"  # noqa: S105
ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 20  # a bound on waiting for a frame on a busy machine, not a speed claim


@dataclass
class World:
    room: Classroom
    learner: User
    instructor: User
    admin: User  # a superuser: Django's admin pages

    def client(self, persona: str) -> Client:
        client = Client()
        client.force_login(getattr(self, persona))
        return client


@pytest.fixture
def world(settings: Any, monkeypatch: pytest.MonkeyPatch) -> World:
    from rag import embeddings

    settings.LAB_MODE = "class"
    monkeypatch.setattr(embeddings, "warm_in_background", lambda: None)
    instructor = User.objects.create_user("inst", password=PASSWORD)
    room = services.classroom_create(name="A반", instructor=instructor)
    learner = User.objects.create_user("learner", password=PASSWORD)
    Membership.objects.create(classroom=room, user=learner)
    admin = User.objects.create_superuser("root", password=PASSWORD)
    return World(room=room, learner=learner, instructor=instructor, admin=admin)


@pytest.fixture(autouse=True)
def _fresh_layers() -> Iterator[None]:
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def _use_layer(settings: Any, up: bool) -> None:
    """An in-memory channel layer, or none at all (every close event is lost)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}} if up else {}
    channel_layers.backends.clear()


# --- Django's admin forms, filled as a browser would -------------------------------------


class _FormReader(HTMLParser):
    """The fields a browser would send from the page's change form (``id="<model>_form"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self.state = "before"  # before, in, after the form
        self.select = ""
        self.textarea = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id", "").endswith("_form") and self.state == "before":
            self.state = "in"
        elif self.state != "in":
            return
        elif tag == "input" and a.get("name") and a.get("type") not in ("submit", "button", "file", "image"):
            if a.get("type") not in ("checkbox", "radio") or "checked" in a:
                self.data.setdefault(a["name"], []).append(a.get("value", "on" if a.get("type") == "checkbox" else ""))
        elif tag == "select":
            self.select = a.get("name", "")
        elif tag == "option" and self.select and "selected" in a:
            self.data.setdefault(self.select, []).append(a.get("value", ""))
        elif tag == "textarea":
            self.textarea = a.get("name", "")
            self.data[self.textarea] = [""]

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.state == "in":
            self.state = "after"
        self.select = "" if tag == "select" else self.select
        self.textarea = "" if tag == "textarea" else self.textarea

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.data[self.textarea][-1] += data


def _admin_post(admin: Client, path: str, change: Callable[[dict[str, list[str]]], None]) -> None:
    page = admin.get(path)
    assert page.status_code == 200, path
    reader = _FormReader()
    reader.feed(page.content.decode())
    change(reader.data)
    response = admin.post(path, reader.data)
    assert response.status_code == 302, (path, response.content.decode()[:2000])


Act = Callable[["World", Client | None], None]  # the world, and the acting client (None for a command)


def _user_form(**fields: bool | list[str]) -> Act:
    """The learner's page in the admin, with these boxes ticked (True), cleared (False) or chosen (ids)."""

    def change(data: dict[str, list[str]]) -> None:
        for name, value in fields.items():
            data.pop(name, None)
            if value:
                data[name] = value if isinstance(value, list) else ["on"]

    def act(world: World, admin: Client | None) -> None:
        assert admin is not None
        _admin_post(admin, f"/admin/auth/user/{world.learner.pk}/change/", change)

    return act


def _membership_form(persona: str, *, role: str = "", delete: bool = False) -> Act:
    """The class's page in the admin, with the persona's membership row changed or deleted."""

    def act(world: World, admin: Client | None) -> None:
        assert admin is not None
        membership = Membership.objects.get(classroom=world.room, user=getattr(world, persona))

        def change(data: dict[str, list[str]]) -> None:
            prefix = next(
                k.removesuffix("-id") for k, v in data.items() if k.endswith("-id") and v == [str(membership.pk)]
            )
            data.update({f"{prefix}-role": [role]} if role else {f"{prefix}-DELETE": ["on"]} if delete else {})

        _admin_post(admin, f"/admin/labapp/classroom/{world.room.pk}/change/", change)

    return act


def _own_password_change(path: str) -> Act:
    def act(world: World, client: Client | None) -> None:
        assert client is not None
        form = {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
        assert client.post(path, form).status_code == 302

    return act


def _reset_by_instructor(world: World, client: Client | None) -> None:
    assert client is not None
    response = client.post(f"/classes/{world.room.pk}/learners/{world.learner.pk}/password/", {})
    assert response.status_code == 200


def _admin_sets_password(world: World, client: Client | None) -> None:
    assert client is not None
    form = {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD, "usable_password": "true"}
    assert client.post(f"/admin/auth/user/{world.learner.pk}/password/", form).status_code == 302


def _changepassword_command(world: World, client: Client | None) -> None:
    with mock.patch("getpass.getpass", return_value=NEW_PASSWORD):
        call_command("changepassword", "learner", stdout=io.StringIO())


def _delete_in_admin(path: Callable[[World], str]) -> Act:
    def act(world: World, client: Client | None) -> None:
        assert client is not None
        assert client.post(path(world), {"post": "yes"}).status_code == 302

    return act


def _graders(world: World) -> Group:
    return Group.objects.get_or_create(name="graders")[0]


def _group_gains(world: World, client: Client | None) -> None:
    _graders(world).user_set.add(world.learner)  # from the group's side of the relation


def _admin_adds_group(world: World, admin: Client | None) -> None:
    _user_form(groups=[str(_graders(world).pk)])(world, admin)


@dataclass(frozen=True)
class Way:
    name: str
    event: Event
    user: str  # whose sessions end: "learner", "instructor" or "admin"
    actor: str  # who acts: "self" (from one of the user's two sessions), a persona, or "command"
    act: Act

    def __str__(self) -> str:
        return self.name


P, A, R, L, D = Event.PASSWORD, Event.ADMIN_RIGHTS, Event.CLASS_ROLE, Event.CLASS_LEFT, Event.DELETED
WAYS = [
    Way("own password change", P, "learner", "self", _own_password_change("/accounts/password_change/")),
    Way("own password change in the admin", P, "admin", "self", _own_password_change("/admin/password_change/")),
    Way("instructor's reset", P, "learner", "instructor", _reset_by_instructor),
    Way("admin sets a password", P, "learner", "admin", _admin_sets_password),
    Way("manage.py changepassword", P, "learner", "command", _changepassword_command),
    Way("admin deactivates", Event.ACTIVE, "learner", "admin", _user_form(is_active=False)),
    Way("admin makes staff", A, "learner", "admin", _user_form(is_staff=True)),
    Way("admin makes superuser", A, "learner", "admin", _user_form(is_superuser=True)),
    Way("admin adds a group", A, "learner", "admin", _admin_adds_group),
    Way("a group gains the user", A, "learner", "command", _group_gains),
    Way("admin makes a learner instructor", R, "learner", "admin", _membership_form("learner", role="instructor")),
    Way("admin demotes an instructor", R, "instructor", "admin", _membership_form("instructor", role="learner")),
    Way("admin removes from a class", L, "learner", "admin", _membership_form("learner", delete=True)),
    Way(
        "admin deletes the class",
        L,
        "learner",
        "admin",
        _delete_in_admin(lambda w: f"/admin/labapp/classroom/{w.room.pk}/delete/"),
    ),
    Way(
        "admin deletes the account",
        D,
        "learner",
        "admin",
        _delete_in_admin(lambda w: f"/admin/auth/user/{w.learner.pk}/delete/"),
    ),
]


def test_every_event_has_a_way_that_the_walk_takes() -> None:
    assert {way.event for way in WAYS} == set(session_ends.EVENTS)


def _socket(client: Client, path: str = "/ws/chat/") -> WebsocketCommunicator:
    from labapp.asgi import application

    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
    return WebsocketCommunicator(application, path, headers=headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("told", ["by the close event", "at the next frame"])
@pytest.mark.parametrize("way", WAYS, ids=str)
def test_every_session_ending_event_ends_the_other_session_and_its_socket(
    world: World, settings: Any, way: Way, told: str
) -> None:
    _use_layer(settings, up=told == "by the close event")
    acting, other = world.client(way.user), world.client(way.user)
    actor = acting if way.actor == "self" else None if way.actor == "command" else world.client(way.actor)

    async def go() -> dict[str, Any]:
        socket = _socket(other)
        assert (await socket.connect())[0]
        await sync_to_async(way.act)(world, actor)
        if told == "at the next frame":
            await socket.send_json_to({"type": "stop", "id": "x"})
        closed: dict[str, Any] = await socket.receive_output(timeout=WAIT_S)
        return closed

    assert aio.run(go()) == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}
    assert other.get("/labs/")["Location"].startswith("/accounts/login/")
    if way.actor == "self":
        assert acting.get("/labs/").status_code == 200  # the session that acted stays signed in


# --- what no event tells: the socket's own check at each frame ----------------------------


def _vanish(user: User, key: str) -> None:
    Session.objects.filter(session_key=key).delete()  # a query-set delete: no signal, no event


def _deactivate_by_update(user: User, key: str) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def _password_by_update(user: User, key: str) -> None:
    User.objects.filter(pk=user.pk).update(password="pbkdf2_sha256$1$x$y")  # noqa: S106


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/chat/", "/ws/bench/JOB/"])
@pytest.mark.parametrize("change", [_vanish, _deactivate_by_update, _password_by_update], ids=lambda f: f.__name__)
def test_a_socket_refuses_its_next_frame_once_its_session_is_no_longer_valid(
    world: World, settings: Any, path: str, change: Callable[[User, str], None]
) -> None:
    _use_layer(settings, up=True)
    client = world.client("learner")
    job = BenchJob.objects.create(owner=world.learner, kind="speed", engine_url="http://x")

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        socket = _socket(client, path.replace("JOB", str(job.pk)))
        assert (await socket.connect())[0]
        await socket.send_to(text_data='{"type": "stop", "id": "x"}')
        answered = await socket.receive_output(timeout=WAIT_S) if "chat" in path else {"type": "no answer expected"}
        await sync_to_async(change)(world.learner, client.cookies["sessionid"].value)
        await socket.send_to(text_data='{"type": "stop", "id": "x"}')
        closed: dict[str, Any] = await socket.receive_output(timeout=WAIT_S)
        return answered, closed

    answered, closed = aio.run(go())
    assert answered["type"] != "websocket.close"  # still valid before the change
    assert closed == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", [_vanish, _deactivate_by_update, _password_by_update], ids=lambda f: f.__name__)
def test_a_question_sent_once_the_session_is_no_longer_valid_closes_the_chat_and_nothing_is_searched_or_saved(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch, change: Callable[[User, str], None]
) -> None:
    """An ask's session is read on its check's thread (rag.ask), not before the frame: still no work for it."""
    _use_layer(settings, up=True)
    client = world.client("learner")
    searched: list[str] = []
    monkeypatch.setattr(retrieval, "retrieve", lambda question, **kwargs: searched.append(question))
    ask = {"type": "ask", "id": "q1", "question": "프리필이란?", "settings": {}}

    async def go() -> dict[str, Any]:
        socket = _socket(client, "/ws/chat/")
        assert (await socket.connect())[0]
        await sync_to_async(change)(world.learner, client.cookies["sessionid"].value)
        await socket.send_json_to(ask)
        return dict(await socket.receive_output(timeout=WAIT_S))

    assert aio.run(go()) == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}
    assert searched == [] and not Answer.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_job_progress_stops_at_the_next_push_once_the_session_is_gone(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import consumers

    _use_layer(settings, up=True)
    monkeypatch.setattr(consumers, "RECHECK_PUSH_S", 0.0)
    client = world.client("learner")
    job = BenchJob.objects.create(owner=world.learner, kind="speed", engine_url="http://x")

    async def go() -> tuple[Any, Any]:
        socket = _socket(client, f"/ws/bench/{job.pk}/")
        assert (await socket.connect())[0]
        push = {"type": "job.progress", "done": 1}
        await channel_layers["default"].group_send(consumers.group_name(job.pk), push)
        first = await socket.receive_json_from(timeout=WAIT_S)
        await sync_to_async(_vanish)(world.learner, client.cookies["sessionid"].value)
        await channel_layers["default"].group_send(consumers.group_name(job.pk), push)
        return first, await socket.receive_output(timeout=WAIT_S)

    first, closed = aio.run(go())
    assert first == {"done": 1}
    assert closed == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}


def _lose_close_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-memory layer drops every ``user.signed_out`` event (as a layer down would)."""
    layer = channel_layers["default"]
    send = layer.group_send

    async def group_send(group: str, message: dict[str, Any]) -> None:
        if message.get("type") != sockets.SIGNED_OUT:
            await send(group, message)

    monkeypatch.setattr(layer, "group_send", group_send)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/chat/", "/ws/bench/JOB/"])
def test_an_idle_socket_whose_close_event_was_lost_closes_within_the_recheck_period(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """No frame and no push reach the socket after the event: only its own timer can notice."""
    _use_layer(settings, up=True)
    _lose_close_events(monkeypatch)
    settings.SOCKET_SESSION_RECHECK_S = 0.5
    client = world.client("learner")
    job = BenchJob.objects.create(owner=world.learner, kind="speed", engine_url="http://x")

    def change_password() -> None:
        world.learner.set_password(NEW_PASSWORD)
        world.learner.save()  # the event: sessions deleted, the close event sent (and lost)

    async def go() -> tuple[bool, dict[str, Any]]:
        socket = _socket(client, path.replace("JOB", str(job.pk)))
        assert (await socket.connect())[0]
        quiet_while_valid = await socket.receive_nothing(timeout=1.5)  # three periods: still signed in
        await sync_to_async(change_password)()
        closed: dict[str, Any] = await socket.receive_output(timeout=WAIT_S)
        return quiet_while_valid, closed

    quiet_while_valid, closed = aio.run(go())
    assert quiet_while_valid
    assert closed == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}


@pytest.mark.django_db(transaction=True)
def test_the_recheck_waits_its_period(world: World, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a period of an hour, the same lost event leaves the idle socket open for now: what
    closes it above is the timer, not something else."""
    _use_layer(settings, up=True)
    _lose_close_events(monkeypatch)
    settings.SOCKET_SESSION_RECHECK_S = 3600
    client = world.client("learner")

    async def go() -> bool:
        socket = _socket(client)
        assert (await socket.connect())[0]
        await sync_to_async(_vanish)(world.learner, client.cookies["sessionid"].value)
        quiet: bool = await socket.receive_nothing(timeout=1.5)
        await socket.disconnect()
        return quiet

    assert aio.run(go())


# --- the signals see every write of these fields ------------------------------------------

# A query-set update() or bulk_update() sends no signal: no code may change these fields so.
_BYPASS = re.compile(
    r"\.(update|bulk_update)\([^)]*\b(" + "|".join([*session_ends.USER_FIELDS, "role"]) + r")\b", re.DOTALL
)


def test_no_code_changes_a_watched_field_past_the_signals() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)[:80]}"
        for app in ("labapp", "rag", "bench")
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
        for match in _BYPASS.finditer(path.read_text())
    ]
    assert found == []


@pytest.mark.django_db
def test_saving_a_user_without_a_watched_change_ends_nothing(world: World) -> None:
    phone = world.client("learner")
    world.learner.first_name = "Kim"
    world.learner.save()
    world.learner.save(update_fields=["last_login"])
    Membership.objects.filter(user=world.learner).get().save()
    assert phone.get("/labs/").status_code == 200
