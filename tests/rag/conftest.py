"""Fixtures of the document tests: a class with its instructor and a learner, the ingestion task's
queue seen as a list, and an ingestion that records what it would index instead of indexing it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction

from labapp.classes import services as class_services
from labapp.models import Classroom, Membership
from rag import services, vectorstore


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Document ids handed to the Celery worker.

    On-commit callbacks run at once here (a test's transaction never commits), so "nothing
    was sent" is a real check; that the task is sent only after the commit is
    test_documents' test_an_upload_is_saved_and_queued_after_commit.
    """
    from rag import tasks

    sent: list[int] = []
    monkeypatch.setattr(tasks.document_ingest, "delay", sent.append)
    monkeypatch.setattr(transaction, "on_commit", lambda callback, using=None, robust=False: callback())
    return sent


@pytest.fixture
def instructor() -> User:
    return User.objects.create_user(username="inst")


@pytest.fixture
def room(instructor: User) -> Classroom:
    return class_services.classroom_create(name="A", instructor=instructor)


@pytest.fixture
def learner(room: Classroom) -> User:
    user = User.objects.create_user(username="learner")
    Membership.objects.create(classroom=room, user=user)
    return user


@pytest.fixture
def no_indexing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Texts the ingestion would chunk and embed (no Chroma, no model)."""
    texts: list[str] = []
    monkeypatch.setattr(vectorstore, "delete_where", lambda name, where: None)

    def index(**kwargs: Any) -> tuple[bool, int]:
        texts.append(kwargs["text"])
        return True, 1

    monkeypatch.setattr(services, "source_index", index)
    return texts
