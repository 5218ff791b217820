"""Engines: registered by admins and instructors, probed, picked by learners, carried by runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import scripted_server, services
from bench.models import BenchJob, Engine
from labapp.models import Classroom, Membership
from tests import aio


@pytest.fixture
def fake() -> Iterator[str]:
    with scripted_server.serve(scripted_server.Script()) as url:
        yield url


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_only_admins_and_instructors_add_engines_and_bad_addresses_are_refused(fake: str) -> None:
    learner = User.objects.create(username="learner-e")
    assert _client(learner).post("/engines/add/", {"name": "x", "base_url": fake}).status_code == 404
    assert 'id="engine-add"' not in _client(learner).get("/engines/").content.decode()
    teacher = User.objects.create(username="teacher-e")
    Membership.objects.create(
        classroom=Classroom.objects.create(name="C", join_code="JC"), user=teacher, role="instructor"
    )
    client = _client(teacher)
    page = client.post("/engines/add/", {"name": "gpu", "base_url": "gpu-box:8000"}, follow=True).content.decode()
    assert "http://" in page and Engine.objects.count() == 0 and 'value="gpu-box:8000"' in page  # kept
    client.post("/engines/add/", {"name": "scripted", "base_url": fake + "/", "hardware": "test"})
    assert Engine.objects.get().base_url == fake  # trailing slash dropped
    again = client.post("/engines/add/", {"name": "scripted", "base_url": "http://other:1"}, follow=True)
    assert "같은 이름" in again.content.decode() and Engine.objects.count() == 1
    admin = User.objects.create(username="admin-e", is_staff=True)
    _client(admin).post("/engines/add/", {"name": "dead", "base_url": "http://127.0.0.1:9"})
    listing = _client(learner).get("/engines/").content.decode()
    assert f'data-url="{fake}" data-ok="true"' in listing and "fake-model" in listing
    assert 'data-url="http://127.0.0.1:9" data-ok="false"' in listing and "ConnectError" in listing
    assert _client(learner).post(f"/engines/{Engine.objects.get(name='dead').pk}/delete/").status_code == 404
    client.post(f"/engines/{Engine.objects.get(name='dead').pk}/delete/")
    assert not Engine.objects.filter(name="dead").exists()


@pytest.mark.django_db
def test_a_learners_pick_goes_with_their_jobs_and_lab_runs(fake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    Engine.objects.create(name="scripted", base_url=fake, hardware="test")
    learner = User.objects.create(username="picker")
    client = _client(learner)
    assert client.post("/engines/pick/", {"url": "http://not-registered"}, follow=True).status_code == 200
    assert client.session.get("engine_url") is None
    client.post("/engines/pick/", {"url": fake})
    assert "scripted" in client.get("/bench/").content.decode()
    made: list[dict[str, Any]] = []

    def job_create(**kw: Any) -> BenchJob:
        made.append(kw)
        return BenchJob.objects.create(owner=learner, kind=kw["kind"], engine_url=kw["engine_url"])

    monkeypatch.setattr(services, "job_create", job_create)
    client.post("/bench/", {"kind": "speed", "repeats": "1"})
    client.post("/labs/4/run/")
    assert [m["engine_url"] for m in made] == [fake, fake]
    job = BenchJob.objects.first()
    assert job is not None and "scripted" in client.get(f"/bench/{job.pk}/").content.decode()
    Engine.objects.all().delete()  # a removed engine falls back to the configured one
    assert "기본 엔진" in client.get("/bench/").content.decode()


def test_another_engines_model_is_asked_even_when_vllm_model_is_set(fake: str, settings: Any) -> None:
    from rag.vllm import client as vllm_client

    settings.VLLM_MODEL = "configured-model"
    assert aio.run(vllm_client.engine_model(fake)) == "fake-model"
    assert aio.run(vllm_client.engine_model(vllm_client.base_url())) == "configured-model"
