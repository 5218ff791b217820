"""The one access layer: every role predicate and resolver for every persona, and the
pages, sockets and exports that go through them.

Personas: anonymous, a learner of class A, a learner of class B (the other learner), the
instructor of class A, the instructor of class B and an admin (staff). The learner owns
the job, the conversation and the documents every table row is about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.http import Http404
from django.test import Client
from django.utils import timezone

from bench import access as bench_access
from bench.models import BenchJob, Engine
from labapp import access
from labapp.classes import access as class_access
from labapp.classes import services as class_services
from labapp.models import Assignment, Classroom, Membership
from rag import access as rag_access
from rag.models import Answer, Conversation, Document
from tests import aio

PERSONAS = ("anonymous", "learner", "other_learner", "instructor", "other_instructor", "admin")


@dataclass
class World:
    room: Classroom
    other_room: Classroom
    learner: User
    other_learner: User
    instructor: User
    other_instructor: User
    admin: User
    job: BenchJob
    imported: BenchJob  # the learner's run read from another tool's file: the one kind its owner may delete
    conversation: Conversation
    answer: Answer
    own_document: Document
    class_document: Document
    assignment: Assignment
    engine: Engine

    def user(self, persona: str) -> AbstractBaseUser | AnonymousUser:
        return AnonymousUser() if persona == "anonymous" else getattr(self, persona)

    def client(self, persona: str) -> Client:
        client = Client()
        if persona != "anonymous":
            client.force_login(getattr(self, persona))
        return client


def _document(owner: User, collection: str, name: str) -> Document:
    return Document.objects.create(
        owner=owner,
        collection=collection,
        title=name,
        filename=name,
        kind="md",
        size_bytes=1,
        text="x",
        content_hash=name,
    )


@pytest.fixture
def world(db: None) -> World:
    instructor, other_instructor = User.objects.create(username="inst"), User.objects.create(username="inst-b")
    room = class_services.classroom_create(name="A", instructor=instructor)
    other_room = class_services.classroom_create(name="B", instructor=other_instructor)
    learner, other_learner = User.objects.create(username="learner"), User.objects.create(username="learner-b")
    Membership.objects.create(classroom=room, user=learner)
    Membership.objects.create(classroom=other_room, user=other_learner)
    conversation = Conversation.objects.create(owner=learner, title="q")
    now = timezone.now()
    return World(
        room=room,
        other_room=other_room,
        learner=learner,
        other_learner=other_learner,
        instructor=instructor,
        other_instructor=other_instructor,
        admin=User.objects.create(username="admin", is_staff=True),
        job=BenchJob.objects.create(owner=learner, kind="retrieval", engine_url="http://e", status="done"),
        imported=BenchJob.objects.create(owner=learner, kind="imported", status="done", results={"cells": []}),
        conversation=conversation,
        answer=Answer.objects.create(conversation=conversation, question="q", text="a", status="done"),
        own_document=_document(learner, rag_access.user_collection_name(learner), "mine.md"),
        class_document=_document(learner, room.collection_name, "shared.md"),
        assignment=Assignment.objects.create(classroom=room, lab=1, opens_at=now, due_at=now + timedelta(days=1)),
        engine=Engine.objects.create(name="gpu", base_url="http://gpu:8000", added_by=instructor),
    )


def _gets(resolve: Callable[[World, Any], object]) -> Callable[[World, Any], bool]:
    """A resolver as a yes/no: the object came back, or it raised 404 (nothing else)."""

    def check(w: World, user: Any) -> bool:
        try:
            return resolve(w, user) is not None
        except (Http404, rag_access.CollectionNotFound):
            return False

    return check


# (what, check(world, user), the personas for whom it is yes / who get the object)
TABLE: list[tuple[str, Callable[[World, Any], bool], set[str]]] = [
    ("is_admin", lambda w, u: access.is_admin(u), {"admin"}),
    ("teaches", lambda w, u: access.teaches(u, w.room), {"instructor"}),
    ("learns_in", lambda w, u: access.learns_in(u, w.room.pk), {"learner"}),
    ("is_member", lambda w, u: access.is_member(u, w.room), {"learner", "instructor"}),
    ("may_manage_class", lambda w, u: access.may_manage_class(u, w.room), {"instructor", "admin"}),
    ("may_create_class", lambda w, u: access.may_create_class(u), {"instructor", "other_instructor", "admin"}),
    ("may_register_engine", lambda w, u: access.may_register_engine(u), {"instructor", "other_instructor", "admin"}),
    ("may_view_learner", lambda w, u: access.may_view_learner(u, w.learner), {"learner", "instructor", "admin"}),
    ("may_reset_password", lambda w, u: access.may_reset_password(u, w.learner), {"instructor", "admin"}),
    (
        "password_resettable",
        lambda w, u: w.learner.pk in access.password_resettable(u, w.room),
        {"instructor", "admin"},
    ),
    ("classroom_for", _gets(lambda w, u: class_access.classroom_for(u, w.room.pk)), {"instructor", "admin"}),
    ("learner_for", _gets(lambda w, u: class_access.learner_for(u, w.room, w.learner.pk)), {"instructor", "admin"}),
    (
        "assignment_for",
        _gets(lambda w, u: class_access.assignment_for(u, w.room, w.assignment.pk)),
        {"instructor", "admin"},
    ),
    (
        "learner_job_for",
        _gets(lambda w, u: class_access.learner_job_for(u, w.learner, w.job.pk)),
        {"learner", "instructor", "admin"},
    ),
    ("job_for", _gets(lambda w, u: bench_access.job_for(u, w.job.pk)), {"learner"}),
    ("job_for of the kind", _gets(lambda w, u: bench_access.job_for(u, w.job.pk, kind="retrieval")), {"learner"}),
    ("jobs_for", _gets(lambda w, u: bench_access.jobs_for(u, [w.job.pk])), {"learner"}),
    ("job_to_delete imported", _gets(lambda w, u: bench_access.job_to_delete(u, w.imported.pk)), {"learner"}),
    ("job_to_delete measured", _gets(lambda w, u: bench_access.job_to_delete(u, w.job.pk)), set()),
    ("owned_job", lambda w, u: bench_access.owned_job(u, w.job.pk) is not None, {"learner"}),
    ("owns", lambda w, u: bench_access.owns(u, w.job), {"learner"}),
    ("jobs_of", lambda w, u: bench_access.jobs_of(u).filter(pk=w.job.pk).exists(), {"learner"}),
    (
        "job_for_viewer",
        _gets(lambda w, u: bench_access.job_for_viewer(u, w.job.pk)),
        {"learner", "instructor", "admin"},
    ),
    ("may_remove_engine", lambda w, u: access.may_remove_engine(u, w.engine.added_by_id), {"instructor", "admin"}),
    ("engine_for", _gets(lambda w, u: bench_access.engine_for(u, w.engine.pk)), {"instructor", "admin"}),
    (
        "removable_engines",
        lambda w, u: w.engine in bench_access.removable_engines(u),
        {"instructor", "admin"},
    ),
    ("own document_for", _gets(lambda w, u: rag_access.document_for(u, w.own_document.pk)), {"learner"}),
    (
        "class document_for",
        _gets(lambda w, u: rag_access.document_for(u, w.class_document.pk)),
        {"learner", "instructor"},
    ),
    (
        "class document_for manage",
        _gets(lambda w, u: rag_access.document_for(u, w.class_document.pk, manage=True)),
        {"learner", "instructor"},
    ),
    (
        "may_manage_document",
        lambda w, u: rag_access.may_manage_document(u, w.class_document),
        {"learner", "instructor"},
    ),
    ("may_add_class_material", lambda w, u: access.may_add_class_material(u, w.room), {"instructor", "admin"}),
    (
        "may_upload_into class",
        lambda w, u: rag_access.may_upload_into(u, w.room.collection_name),
        {"instructor", "admin"},
    ),
    (
        "may_upload_into own",
        lambda w, u: rag_access.may_upload_into(u, rag_access.user_collection_name(w.learner)),
        {"learner"},
    ),
    (
        "upload_collections class",
        lambda w, u: f"class-{w.room.pk}" in {ref.key for ref in rag_access.upload_collections(u)},
        {"instructor"},  # an admin who is not a member does not see the class's documents either
    ),
    ("may_replace_document", lambda w, u: rag_access.may_replace_document(u, w.class_document), {"learner"}),
    (
        "class collection_resolve",
        _gets(lambda w, u: rag_access.collection_resolve(u, f"class-{w.room.pk}")),
        {"learner", "instructor"},
    ),
    (
        "class collection_for",
        _gets(lambda w, u: rag_access.collection_for(u, f"class-{w.room.pk}")),
        {"learner", "instructor"},
    ),
    ("conversation_for", _gets(lambda w, u: rag_access.conversation_for(u, w.conversation.pk)), {"learner"}),
    ("answers_visible", lambda w, u: rag_access.answers_visible(u).filter(pk=w.answer.pk).exists(), {"learner"}),
]


@pytest.mark.parametrize(("what", "check", "allowed"), TABLE, ids=[row[0] for row in TABLE])
def test_each_predicate_and_resolver_answers_yes_for_exactly_these_personas(
    world: World, what: str, check: Callable[[World, Any], bool], allowed: set[str]
) -> None:
    assert allowed <= set(PERSONAS)
    got = {persona for persona in PERSONAS if check(world, world.user(persona))}
    assert got == allowed, what


def test_a_superuser_who_is_not_staff_is_an_admin_too(world: World) -> None:
    root = User.objects.create(username="root", is_superuser=True)
    assert access.is_admin(root) and access.may_register_engine(root) and access.may_manage_class(root, world.room)
    assert bench_access.job_for_viewer(root, world.job.pk) == world.job


def test_nobody_resets_the_password_of_an_admin_or_of_anyone_who_teaches(world: World) -> None:
    Membership.objects.create(classroom=world.room, user=world.other_instructor)  # teaches B, learns in A
    Membership.objects.create(classroom=world.room, user=world.admin)
    assert not access.may_reset_password(world.instructor, world.other_instructor)
    assert not access.may_reset_password(world.instructor, world.admin)
    assert access.password_resettable(world.instructor, world.room) == {world.learner.pk}
    assert not access.may_reset_password(world.learner, world.learner)  # nor one's own, here


def test_a_viewer_reaches_a_job_only_through_its_owner(world: World) -> None:
    with pytest.raises(Http404):
        bench_access.job_for_viewer(world.instructor, world.job.pk, owner=world.instructor)
    with pytest.raises(Http404):
        bench_access.jobs_for(world.learner, [world.job.pk, world.job.pk + 1000])  # one not theirs: all refused
    assert bench_access.jobs_for(world.learner, [world.job.pk, world.job.pk]) == [world.job]


# --- the pages, sockets and exports go through the resolvers ----------------------------------


@pytest.mark.parametrize("persona", ["other_learner", "instructor", "admin"])
def test_another_persons_job_page_export_cancel_and_compare_are_not_found(world: World, persona: str) -> None:
    client = world.client(persona)
    mine = BenchJob.objects.create(
        owner=getattr(world, persona), kind="retrieval", engine_url="http://e", status="done"
    )
    assert client.get(f"/bench/{world.job.pk}/").status_code == 404
    assert client.get(f"/bench/{world.job.pk}/export.json").status_code == 404
    assert client.get(f"/bench/{world.job.pk}/export.csv").status_code == 404
    assert client.get(f"/bench/{world.job.pk}/export.engine.csv").status_code == 404
    assert client.post(f"/bench/{world.job.pk}/cancel/").status_code == 404
    assert client.get("/bench/compare/", {"ids": [mine.pk, world.job.pk]}).status_code == 404
    assert f"/bench/{world.job.pk}/" not in client.get("/bench/").content.decode()


def test_the_owner_reaches_their_job_page_and_export(world: World) -> None:
    client = world.client("learner")
    assert client.get(f"/bench/{world.job.pk}/").status_code == 200
    assert client.get(f"/bench/{world.job.pk}/export.json").json()["status"] == "done"
    assert client.get(f"/bench/{world.job.pk}/export.engine.csv").content.decode().startswith("cell,t_s,")


def test_the_demo_sweep_state_of_another_persons_job_is_not_found(world: World) -> None:
    assert world.client("learner").get(f"/demo/sweep/{world.job.pk}.json").status_code == 200
    other = world.client("other_learner")
    assert other.get(f"/demo/sweep/{world.job.pk}.json").status_code == 404
    assert 'id="demo-chart"' not in other.get(f"/demo/?job={world.job.pk}").content.decode()
    speed = BenchJob.objects.create(owner=world.learner, kind="speed", engine_url="http://e")
    assert world.client("learner").get(f"/demo/sweep/{speed.pk}.json").status_code == 404  # not a sweep


@pytest.mark.parametrize(("persona", "status"), [("instructor", 200), ("admin", 200), ("other_instructor", 404)])
def test_a_learners_job_is_read_through_their_class_only(world: World, persona: str, status: int) -> None:
    url = f"/classes/{world.room.pk}/learners/{world.learner.pk}/jobs/{world.job.pk}/"
    assert world.client(persona).get(url).status_code == status


def test_the_class_page_offers_a_password_reset_for_plain_learners_only(world: World) -> None:
    Membership.objects.create(classroom=world.room, user=world.other_instructor)
    page = world.client("instructor").get(f"/classes/{world.room.pk}/").content.decode()
    base = f"/classes/{world.room.pk}/learners"
    assert f"{base}/{world.learner.pk}/password/" in page
    assert f"{base}/{world.other_instructor.pk}/password/" not in page


@pytest.mark.parametrize(("persona", "status"), [("instructor", 302), ("other_instructor", 404)])
def test_an_assignment_is_changed_only_by_its_classes_instructor(world: World, persona: str, status: int) -> None:
    url = f"/classes/{world.room.pk}/assignments/{world.assignment.pk}/delete/"
    assert world.client(persona).post(url).status_code == status
    assert Assignment.objects.filter(pk=world.assignment.pk).exists() == (status == 404)


@pytest.mark.parametrize(
    ("persona", "status"),
    [("learner", 404), ("other_instructor", 404), ("instructor", 302), ("admin", 302)],
)
def test_an_engine_is_removed_only_by_who_added_it_or_an_admin(world: World, persona: str, status: int) -> None:
    assert world.client(persona).post(f"/engines/{world.engine.pk}/delete/").status_code == status
    assert Engine.objects.filter(pk=world.engine.pk).exists() == (status == 404)


@pytest.mark.parametrize(
    ("persona", "status"),
    [("other_learner", 404), ("instructor", 404), ("admin", 404), ("learner", 302)],
)
def test_an_imported_run_is_deleted_by_its_owner_only_and_a_measured_run_by_nobody(
    world: World, persona: str, status: int
) -> None:
    client = world.client(persona)
    assert client.post(f"/bench/{world.job.pk}/delete/").status_code == 404
    response = client.post(f"/bench/{world.imported.pk}/delete/")
    deleted = persona == "learner"
    assert response.status_code == status and (response.get("Location") == "/bench/") == deleted
    assert BenchJob.objects.filter(pk=world.imported.pk).exists() != deleted
    assert BenchJob.objects.filter(pk=world.job.pk).exists()  # a run measured here stays, whoever asks


def test_another_persons_conversation_and_documents_are_not_found(world: World) -> None:
    other = world.client("other_learner")
    assert other.get(f"/chat/{world.conversation.pk}/").status_code == 404
    assert list(other.get("/chat/history/").context["conversations"]) == []
    assert other.get(f"/documents/{world.own_document.pk}/preview/").status_code == 404
    assert other.get("/passage/", {"collection": f"class-{world.room.pk}", "id": "x"}).status_code == 404
    assert other.post(f"/documents/{world.class_document.pk}/delete/").status_code == 404
    mate = User.objects.create(username="mate")
    Membership.objects.create(classroom=world.room, user=mate)
    client = Client()
    client.force_login(mate)
    assert client.post(f"/documents/{world.class_document.pk}/delete/").status_code == 404  # not the uploader
    assert Document.objects.filter(pk=world.class_document.pk).exists()


def _cookie(user: User) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def sockets(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    from channels.layers import channel_layers

    from rag import embeddings

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    monkeypatch.setattr(embeddings, "warm_in_background", lambda: None)  # no model load for an access check
    yield
    channel_layers.backends.clear()


def _socket(path: str, cookie: bytes) -> Any:
    from channels.testing import WebsocketCommunicator

    from labapp.asgi import application

    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
    return WebsocketCommunicator(application, path, headers=headers)


@pytest.mark.django_db(transaction=True)
def test_the_job_socket_closes_for_anyone_but_the_owner(world: World, sockets: None) -> None:
    async def connect(cookie: bytes) -> Any:
        socket = _socket(f"/ws/bench/{world.job.pk}/", cookie)
        connected = await socket.connect()
        await socket.disconnect()
        return connected

    assert aio.run(connect(_cookie(world.learner)))[0]
    for persona in ("other_learner", "instructor", "admin"):
        assert aio.run(connect(_cookie(getattr(world, persona)))) == (False, 4404), persona


@pytest.mark.django_db(transaction=True)
def test_the_chat_socket_neither_continues_nor_times_another_persons_answers(world: World, sockets: None) -> None:
    cookie = _cookie(world.other_learner)

    async def go() -> list[dict[str, Any]]:
        socket = _socket("/ws/chat/", cookie)
        assert (await socket.connect())[0]
        ask = {"type": "ask", "id": "q1", "question": "?", "settings": {}, "conversation": world.conversation.pk}
        await socket.send_json_to(ask)
        frames = [await socket.receive_json_from(timeout=5)]
        await socket.send_json_to({"type": "client_timing", "answer_id": world.answer.pk, "first_token_ms": 1})
        frames.append(await socket.receive_json_from(timeout=5))
        await socket.disconnect()
        return frames

    asked, timed = aio.run(go())
    assert asked["type"] == "error" and timed["type"] == "error"
    assert Answer.objects.count() == 1 and "browser" not in Answer.objects.get().timings
