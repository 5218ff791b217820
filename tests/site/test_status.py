"""The status page on a class server: names and states for everyone, details for admins only,
no credentials in any URL, and probes run once per STATUS_CACHE_S however often it is asked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from labapp import access
from labapp.status import probes as status

pytestmark = pytest.mark.django_db

SECRETS = ("s3cret", "hunter2", "lab.sqlite3", "worker-7", "cache.internal", "gpu.internal", "ConnectError")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Probes that name a database path, URLs with credentials, a worker host and a raw error."""
    made: list[str] = []

    def database() -> dict[str, str]:
        made.append("database")
        return {"engine": "sqlite", "name": "/srv/lab/data/lab.sqlite3"}

    def redis() -> dict[str, str]:
        return {"url": "redis://:s3cret@cache.internal:6379/0", "version": "7.2"}

    def celery() -> dict[str, str]:
        return {"workers": "celery@worker-7", "queues": "default, bench"}

    def vllm() -> dict[str, str]:
        raise RuntimeError("vLLM at http://lab:hunter2@gpu.internal:8000: ConnectError: [Errno 111] refused")

    monkeypatch.setattr(
        status,
        "PROBES",
        [
            status.ComponentProbe("database", "DB", database, 5.0),
            status.ComponentProbe("redis", "Redis", redis, 5.0),
            status.ComponentProbe("celery", "Celery", celery, 5.0),
            status.ComponentProbe("vllm", "vLLM", vllm, 5.0),
        ],
    )
    cache.clear()
    yield made
    cache.clear()


def _as(username: str | None, **fields: Any) -> Client:
    client = Client()
    if username is not None:
        client.force_login(User.objects.create(username=username, **fields))
    return client


def _pages(client: Client) -> tuple[str, dict[str, Any], str]:
    cache.delete(status.DOWN_KEY)  # the banner asks the components itself (from the cache, here)
    page = client.get("/status/").content.decode()
    return page, client.get("/status.json").json(), client.get("/status/banner/").content.decode()


@pytest.mark.parametrize("who", ["anonymous", "learner", "instructor"])
def test_on_a_class_server_only_admins_see_more_than_each_components_name_and_state(
    calls: list[str], settings: Any, who: str
) -> None:
    settings.LAB_MODE = "class"
    client = _as(None if who == "anonymous" else who)
    if who == "instructor":
        from labapp.classes import services as class_services

        class_services.classroom_create(name="A", instructor=User.objects.get(username=who))
    page, data, banner = _pages(client)
    assert 'id="component-redis" class="ok"' in page and 'id="component-vllm" class="down"' in page
    components = page.split('id="status-table"')[1].split("</table>")[0]  # (the websocket row is the browser's)
    assert 'class="rtt"' not in components and 'class="detail"' not in components
    assert data["ok"] is False
    assert data["components"] == [
        {"key": "database", "label": "DB", "ok": True},
        {"key": "redis", "label": "Redis", "ok": True},
        {"key": "celery", "label": "Celery", "ok": True},
        {"key": "vllm", "label": "vLLM", "ok": False},
    ]
    assert "vLLM" in banner
    for text in (page, str(data), banner):
        assert not [secret for secret in SECRETS if secret in text], who


def test_an_admin_sees_the_details_but_no_credentials_in_any_url(calls: list[str], settings: Any) -> None:
    settings.LAB_MODE = "class"
    page, data, _ = _pages(_as("root", is_staff=True))
    assert "redis://cache.internal:6379/0" in page and "lab.sqlite3" in page and "worker-7" in page
    assert "vLLM at http://gpu.internal:8000: ConnectError" in page and " ms" in page
    by_key = {c["key"]: c for c in data["components"]}
    assert by_key["redis"]["details"]["url"] == "redis://cache.internal:6379/0"
    assert by_key["vllm"]["error"].startswith("RuntimeError: vLLM at http://gpu.internal:8000:")
    assert by_key["database"]["round_trip_ms"] is not None
    assert "s3cret" not in page + str(data) and "hunter2" not in page + str(data)


def test_a_local_learner_sees_every_detail_as_before(calls: list[str], settings: Any) -> None:
    settings.LAB_MODE = "local"
    page, data, _ = _pages(Client())  # signed in as the local learner
    assert "lab.sqlite3" in page and "worker-7" in page and "gpu.internal" in page and "hunter2" not in page
    assert {"round_trip_ms", "details", "error"} <= data["components"][0].keys()


def test_two_requests_within_the_cache_window_probe_once(calls: list[str], settings: Any) -> None:
    settings.STATUS_CACHE_S = 5
    client = _as("learner")
    client.get("/status/")
    client.get("/status.json")
    client.get("/status/", headers={"HX-Request": "true"})
    assert calls == ["database"]
    cache.delete(status.CACHE_KEY)  # the window over
    client.get("/status.json")
    assert calls == ["database", "database"]


def test_with_no_cache_window_every_request_probes(calls: list[str], settings: Any) -> None:
    settings.STATUS_CACHE_S = 0
    client = _as("learner")
    client.get("/status.json")
    client.get("/status.json")
    assert calls == ["database", "database"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("postgres://lab:pw@db:5432/lab", "postgres://db:5432/lab"),
        ("http://u:p@ss@h:1/x?next=a@b", "http://h:1/x?next=a@b"),  # up to the host's @, not the query's
        ("broker (redis://u@r:1/0) and http://plain:8000/", "broker (redis://r:1/0) and http://plain:8000/"),
        ("no URL: celery@worker-7", "no URL: celery@worker-7"),
    ],
)
def test_without_credentials_takes_user_and_password_out_of_every_url(text: str, shown: str) -> None:
    assert status.without_credentials(text) == shown


def test_status_details_are_for_admins_on_a_class_server_and_for_everyone_locally(settings: Any) -> None:
    learner, admin = User.objects.create(username="l"), User.objects.create(username="a", is_superuser=True)
    settings.LAB_MODE = "class"
    assert access.may_see_status_details(admin) and not access.may_see_status_details(learner)
    settings.LAB_MODE = "local"
    assert access.may_see_status_details(learner)
