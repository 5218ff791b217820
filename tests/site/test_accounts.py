"""Accounts and sessions on a class server: who may reset a password, what a reset ends, the
sockets of a temporary password, the account pages that exist, sign-in and sign-up throttling,
and a roster's passwords kept out of the session.

Personas: a learner of class A, the instructor of A, the instructor of B and an admin.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient, Client, RequestFactory
from django.urls import reverse

from bench.models import BenchJob
from labapp import access, sockets
from labapp.classes import services, throttle
from labapp.models import Classroom, Membership, TemporaryPassword
from tests import aio

PASSWORD = "correct-horse-battery"  # noqa: S105 - test accounts
NEW_PASSWORD = "a-new-long-phrase"  # noqa: S105


@dataclass
class World:
    room_a: Classroom
    room_b: Classroom
    learner: User
    instructor_a: User
    instructor_b: User
    admin: User

    def client(self, persona: str) -> Client:
        client = Client()
        client.force_login(getattr(self, persona))
        return client

    def reset_url(self, room: Classroom | None = None) -> str:
        return f"/classes/{(room or self.room_a).pk}/learners/{self.learner.pk}/password/"


def _user(username: str, **extra: Any) -> User:
    return User.objects.create_user(username=username, password=PASSWORD, **extra)


@pytest.fixture
def world(db: None, settings: Any) -> Iterator[World]:
    settings.LAB_MODE = "class"
    cache.clear()  # the join-code counters live in the cache
    room_a = services.classroom_create(name="A반", instructor=_user("inst_a"))
    room_b = services.classroom_create(name="B반", instructor=_user("inst_b"))
    learner = _user("learner")
    Membership.objects.create(classroom=room_a, user=learner)
    yield World(
        room_a=room_a,
        room_b=room_b,
        learner=learner,
        instructor_a=User.objects.get(username="inst_a"),
        instructor_b=User.objects.get(username="inst_b"),
        admin=_user("admin", is_staff=True),
    )
    cache.clear()


# --- who may reset a password -------------------------------------------------------------


def test_an_instructor_resets_only_a_learner_all_of_whose_classes_they_teach(world: World) -> None:
    assert access.may_reset_password(world.instructor_a, world.learner)
    Membership.objects.create(
        classroom=world.room_b, user=world.learner
    )  # also in a class A's instructor does not teach
    assert not access.may_reset_password(world.instructor_a, world.learner)
    assert world.learner.pk not in access.password_resettable(world.instructor_a, world.room_a)
    instructor = world.client("instructor_a")
    refused = instructor.post(world.reset_url(), {"password": "an-instructors-choice"})
    assert refused.status_code == 302
    world.learner.refresh_from_db()
    assert world.learner.check_password(PASSWORD) and not TemporaryPassword.objects.exists()
    page = instructor.get(f"/classes/{world.room_a.pk}/").content.decode()
    assert world.reset_url() not in page and 'data-reset="admin-only"' in page
    # An admin may reset any plain learner; an instructor of both classes may too.
    assert access.may_reset_password(world.admin, world.learner)
    assert world.client("admin").post(world.reset_url(), {}).status_code == 200
    Membership.objects.create(classroom=world.room_b, user=world.instructor_a, role=Membership.Role.INSTRUCTOR)
    assert access.may_reset_password(world.instructor_a, world.learner)
    assert world.reset_url() in instructor.get(f"/classes/{world.room_a.pk}/").content.decode()


# --- a reset ends the learner's sessions and sockets -------------------------------------


def _session_users() -> list[str]:
    store = import_module(django_settings.SESSION_ENGINE).SessionStore()
    return [str(store.decode(s.session_data).get("_auth_user_id")) for s in Session.objects.all()]


def test_a_reset_deletes_every_session_of_the_learner_and_no_other(world: World) -> None:
    phone, laptop = world.client("learner"), world.client("learner")
    instructor = world.client("instructor_a")
    assert _session_users().count(str(world.learner.pk)) == 2
    assert instructor.post(world.reset_url(), {}).status_code == 200
    assert str(world.learner.pk) not in _session_users()
    assert str(world.instructor_a.pk) in _session_users()
    for device in (phone, laptop):
        assert device.get("/labs/")["Location"].startswith("/accounts/login/")
    assert instructor.get(f"/classes/{world.room_a.pk}/").status_code == 200


def _socket(path: str, client: Client) -> WebsocketCommunicator:
    from labapp.asgi import application

    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
    return WebsocketCommunicator(application, path, headers=headers)


@pytest.fixture
def layer(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """An in-memory channel layer; the list records every embedding warm-up (work a socket does)."""
    from channels.layers import channel_layers

    from rag import embeddings

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    warmed: list[str] = []
    monkeypatch.setattr(embeddings, "warm_in_background", lambda: warmed.append("warm"))
    yield warmed
    channel_layers.backends.clear()


@pytest.mark.django_db(transaction=True)
def test_a_reset_closes_the_learners_open_sockets(world: World, layer: list[str]) -> None:
    browser, instructor = world.client("learner"), world.client("instructor_a")
    job = BenchJob.objects.create(owner=world.learner, kind="speed", engine_url="http://x")

    async def go() -> tuple[Any, Any, tuple[bool, int | None]]:
        chat, progress = _socket("/ws/chat/", browser), _socket(f"/ws/bench/{job.pk}/", browser)
        assert (await chat.connect())[0] and (await progress.connect())[0]
        response = await sync_to_async(instructor.post)(world.reset_url(), {})
        assert response.status_code == 200
        closed = await chat.receive_output(timeout=5), await progress.receive_output(timeout=5)
        again = await _socket("/ws/chat/", browser).connect()
        return closed[0], closed[1], again

    chat, progress, again = aio.run(go())
    assert chat == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}
    assert progress == {"type": "websocket.close", "code": sockets.CLOSE_SIGNED_OUT}
    assert again == (False, 4401)  # the session is gone


@pytest.mark.django_db(transaction=True)
def test_a_temporary_password_opens_no_socket_until_it_is_changed(world: World, layer: list[str]) -> None:
    password = services.password_set_temporary(learner=world.learner, by=world.instructor_a)
    browser = Client()
    assert browser.post("/accounts/login/", {"username": "learner", "password": password}).status_code == 302
    job = BenchJob.objects.create(owner=world.learner, kind="speed", engine_url="http://x")
    flagged_only = world.client("learner")  # a session without the sign-in's flag: the account still says so

    async def connect(path: str, client: Client) -> tuple[bool, int | None]:
        socket = _socket(path, client)
        connected: tuple[bool, int | None] = await socket.connect()
        if connected[0]:
            await socket.disconnect()
        return connected

    for path in ("/ws/chat/", f"/ws/bench/{job.pk}/"):
        assert aio.run(connect(path, browser)) == (False, sockets.CLOSE_PASSWORD_CHANGE), path
        assert aio.run(connect(path, flagged_only)) == (False, sockets.CLOSE_PASSWORD_CHANGE), path
    assert layer == []  # no work was done for the refused chat socket
    change = {"old_password": password, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    assert browser.post("/accounts/password_change/", change).status_code == 302
    assert aio.run(connect("/ws/chat/", browser))[0]
    assert aio.run(connect(f"/ws/bench/{job.pk}/", browser))[0]


# --- the account pages that exist ---------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/MQ/set-password/",
        "/accounts/reset/MQ/abc-123/",
        "/accounts/reset/done/",
    ],
)
def test_there_is_no_password_reset_by_email(world: World, path: str) -> None:
    world.learner.email = "learner@example.org"
    world.learner.save()
    assert Client().get(path).status_code == 404
    assert Client().post(path, {"email": "learner@example.org"}).status_code == 404
    assert Client().post(path, {"email": "nobody@example.org"}).status_code == 404


def test_sign_in_sign_out_and_the_password_change_keep_their_names(world: World) -> None:
    names = ("login", "logout", "password_change", "password_change_done")
    assert [reverse(name) for name in names] == [
        "/accounts/login/",
        "/accounts/logout/",
        "/accounts/password_change/",
        "/accounts/password_change/done/",
    ]
    client = world.client("learner")
    assert client.get("/accounts/password_change/done/").status_code == 200
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/labs/").status_code == 302


# --- sign-in throttling (django-axes) -----------------------------------------------------


def _sign_in(client: Client, username: str, password: str) -> Any:
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_five_wrong_passwords_lock_that_username_from_that_address_for_a_while(world: World) -> None:
    attacker = Client(REMOTE_ADDR="10.0.0.1")
    answers = [_sign_in(attacker, "learner", f"guess-{n}").status_code for n in range(5)]
    assert answers == [200, 200, 200, 200, 429]
    locked = _sign_in(attacker, "learner", PASSWORD)  # even the right password, now
    assert locked.status_code == 429 and "_auth_user_id" not in attacker.session
    page = locked.content.decode()
    assert "5번 틀렸습니다" in page and "15분 뒤에" in page
    assert _sign_in(Client(REMOTE_ADDR="10.0.0.2"), "learner", PASSWORD).status_code == 302  # another address
    assert _sign_in(attacker, "inst_a", PASSWORD).status_code == 302  # another username


@pytest.mark.django_db(transaction=True)
def test_the_lockout_page_is_served_by_the_asgi_handler_too(world: World) -> None:
    """Daphne runs Django's async middleware path, where axes calls the page with two arguments."""

    async def go() -> list[int]:
        client = AsyncClient(REMOTE_ADDR="10.0.0.9")
        form = {"username": "learner", "password": "wrong"}
        return [(await client.post("/accounts/login/", form)).status_code for _ in range(5)]

    assert aio.run(go()) == [200, 200, 200, 200, 429]


def test_a_right_password_clears_the_count_of_wrong_ones(world: World) -> None:
    client = Client(REMOTE_ADDR="10.0.0.3")
    for _round in range(2):
        for n in range(4):
            assert _sign_in(client, "learner", f"typo-{n}").status_code == 200
        assert _sign_in(client, "learner", PASSWORD).status_code == 302
        client.post("/accounts/logout/")


# --- sign-up throttling (wrong join codes) ------------------------------------------------


def _signup(client: Client, code: str, username: str) -> Any:
    return client.post("/accounts/signup/", _signup_form(code, username))


def test_wrong_join_codes_from_one_address_stop_its_sign_ups_for_a_while(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.JOIN_CODE_FAILURE_LIMIT = 3
    now = [1000.0]
    monkeypatch.setattr(throttle, "clock", lambda: now[0])
    guesser = Client(REMOTE_ADDR="10.0.0.4")
    for n in range(3):
        assert "join_code" in _signup(guesser, f"WRONG00{n}", "guesser").context["form"].errors
    refused = _signup(guesser, world.room_a.join_code, "guesser")  # the right code, now refused
    assert refused.status_code == 429 and "15분 뒤에" in refused.content.decode()
    assert not User.objects.filter(username="guesser").exists()
    joined = world.client("learner")
    joined.defaults["REMOTE_ADDR"] = "10.0.0.4"
    assert joined.post("/classes/join/", {"join_code": world.room_b.join_code}).status_code == 429
    assert not Membership.objects.filter(user=world.learner, classroom=world.room_b).exists()
    assert _signup(Client(REMOTE_ADDR="10.0.0.5"), world.room_a.join_code, "neighbour").status_code == 302
    now[0] += settings.JOIN_CODE_FAILURE_WINDOW_S
    assert _signup(guesser, world.room_a.join_code, "guesser").status_code == 302


def _scripted_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(throttle, "clock", lambda: now[0])
    return now


def test_one_address_makes_at_most_its_accounts_an_hour_and_the_form_keeps_what_was_typed(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.SIGNUPS_PER_ADDRESS_PER_HOUR = 3
    now = _scripted_clock(monkeypatch)
    one_address = Client(REMOTE_ADDR="10.0.1.1")
    for n in range(3):
        assert _signup(one_address, world.room_a.join_code, f"nat{n}").status_code == 302
        one_address.post("/accounts/logout/")
    refused = _signup(one_address, world.room_b.join_code, "nat3")  # another class: still this address
    page = refused.content.decode()
    assert refused.status_code == 429 and "한 시간에 3개까지" in page and "60분 뒤에" in page
    assert 'value="nat3"' in page and f'value="{world.room_b.join_code}"' in page  # nothing typed is lost
    assert not User.objects.filter(username="nat3").exists()
    english = Client(REMOTE_ADDR="10.0.1.1")
    english.cookies["django_language"] = "en"
    message = english.post("/accounts/signup/", _signup_form(world.room_b.join_code, "nat3"), HTTP_ACCEPT_LANGUAGE="en")
    assert "new accounts" in message.content.decode() and "네트워크 주소" not in message.content.decode()
    assert _signup(Client(REMOTE_ADDR="10.0.1.2"), world.room_a.join_code, "elsewhere").status_code == 302
    now[0] += settings.SIGNUP_ADDRESS_WINDOW_S
    assert _signup(one_address, world.room_b.join_code, "nat3").status_code == 302


def test_a_class_takes_at_most_its_new_members_a_minute_from_any_addresses(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.JOINS_PER_CLASS_PER_MINUTE = 2
    now = _scripted_clock(monkeypatch)
    for n in range(2):
        assert _signup(Client(REMOTE_ADDR=f"10.0.2.{n}"), world.room_b.join_code, f"b{n}").status_code == 302
    refused = _signup(Client(REMOTE_ADDR="10.0.2.9"), world.room_b.join_code, "b9")
    assert refused.status_code == 429 and "1분에 2명까지" in refused.content.decode()
    assert not User.objects.filter(username="b9").exists()
    joiner = world.client("learner")  # an existing account joining counts as a new member too
    assert joiner.post("/classes/join/", {"join_code": world.room_b.join_code}).status_code == 429
    assert not Membership.objects.filter(user=world.learner, classroom=world.room_b).exists()
    already = world.client("learner")  # a member re-entering the code is no new member: not refused
    assert already.post("/classes/join/", {"join_code": world.room_a.join_code}).status_code == 302
    assert _signup(Client(REMOTE_ADDR="10.0.2.9"), world.room_a.join_code, "a9").status_code == 302  # per class
    now[0] += settings.CLASS_JOIN_WINDOW_S
    assert joiner.post("/classes/join/", {"join_code": world.room_b.join_code}).status_code == 302
    assert Membership.objects.filter(user=world.learner, classroom=world.room_b).exists()


def test_the_default_limits_let_a_class_of_300_behind_one_address_join_in_a_lecture(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 sign-ups from one NAT address over five minutes (one a second): none refused by the defaults."""
    now = _scripted_clock(monkeypatch)
    request = RequestFactory().post("/accounts/signup/", REMOTE_ADDR="10.0.3.1")
    for _n in range(300):
        assert throttle.signup_refusal(request, world.room_a) is None
        now[0] += 1.0
    assert settings.SIGNUPS_PER_ADDRESS_PER_HOUR >= 300 and settings.JOINS_PER_CLASS_PER_MINUTE >= 60


def test_a_sign_up_cut_between_its_two_rows_leaves_neither_and_sent_again_makes_both(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A web process that dies mid sign-up (the class rehearsal's web fault): the account and its
    membership are one transaction, so the learner's second try finds no half-made account."""
    made = Membership.objects.create

    def dies(**fields: Any) -> Membership:
        raise ConnectionError("the web process died here")

    monkeypatch.setattr(Membership.objects, "create", dies)
    with pytest.raises(ConnectionError):
        _signup(Client(REMOTE_ADDR="10.0.4.1"), world.room_a.join_code, "halfway")
    assert not User.objects.filter(username="halfway").exists()
    monkeypatch.setattr(Membership.objects, "create", made)
    again = Client(REMOTE_ADDR="10.0.4.1")
    assert _signup(again, world.room_a.join_code, "halfway").status_code == 302
    assert Membership.objects.filter(user__username="halfway", classroom=world.room_a).count() == 1
    third = _signup(Client(REMOTE_ADDR="10.0.4.1"), world.room_a.join_code, "halfway")  # its answer lost: again
    assert third.status_code == 200 and "username" in third.context["form"].errors
    assert User.objects.filter(username="halfway").count() == 1


def _signup_form(code: str, username: str) -> dict[str, str]:
    return {"join_code": code, "username": username, "email": "", "password1": PASSWORD, "password2": PASSWORD}


# --- a roster's passwords stay out of the session ----------------------------------------


def test_a_roster_preview_keeps_the_files_passwords_out_of_the_session(world: World) -> None:
    instructor = world.client("instructor_a")
    text = "username,email,role,password\nkim,,,a-chosen-passphrase\nlee,,,\n"
    url = f"/classes/{world.room_a.pk}/roster/"
    preview = instructor.post(url, {"roster": SimpleUploadedFile("r.csv", text.encode())})
    assert preview.status_code == 200 and preview["Cache-Control"] == "no-store"
    stored = " ".join(str(s.get_decoded()) for s in Session.objects.all())
    assert "a-chosen-passphrase" not in stored and "kim" not in stored
    signed = preview.context["signed"]
    other = world.client("instructor_b")  # someone else's preview (or a tampered one) confirms nothing
    assert other.post(f"/classes/{world.room_b.pk}/roster/confirm/", {"roster": signed}).status_code == 302
    assert instructor.post(f"{url}confirm/", {"roster": signed[:-2] + "xx"}).status_code == 302
    assert not User.objects.filter(username__in=["kim", "lee"]).exists()
    preview = instructor.post(url, {"roster": SimpleUploadedFile("r.csv", text.encode())})
    done = instructor.post(f"{url}confirm/", {"roster": preview.context["signed"]})
    assert done.status_code == 200 and done["Cache-Control"] == "no-store"
    assert {c.user.username for c in done.context["created"]} == {"kim", "lee"}
    assert User.objects.get(username="kim").check_password("a-chosen-passphrase")
    stored = " ".join(str(s.get_decoded()) for s in Session.objects.all())
    assert "a-chosen-passphrase" not in stored
    assert instructor.post(f"{url}confirm/", {"roster": preview.context["signed"]}).status_code == 302  # once
