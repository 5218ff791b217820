"""Objects the site tests share."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from bench.models import BenchJob
from labapp.chapter.services import chapter_load
from rag.access import user_collection_name
from rag.models import Document
from tests.site.test_labs import GOOD


@pytest.fixture
def learner_work(db: None) -> tuple[User, BenchJob]:
    """A learner with a finished Lab 1 job and a ready document in their own collection."""
    chapter_load()
    learner = User.objects.create_user("csp-learner")
    job = BenchJob.objects.create(owner=learner, kind="speed", engine_url="http://x", status="done", results=GOOD[1])
    Document.objects.create(
        owner=learner,
        collection=user_collection_name(learner),
        title="메모",
        filename="memo.md",
        kind="md",
        size_bytes=10,
        text="메모",
        content_hash="x",
        status="ready",
    )
    return learner, job
