"""Session-scoped real services, started once per test run and reused by every test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from labapp.ops import scripted
from labapp.ops.stack.__main__ import port_in_use
from tests import harness
from tests.csp_watch import CspWatchingBrowser

ROOT = Path(__file__).resolve().parent.parent
_services: dict[str, harness.Service] = {}


def _start_once(name: str) -> harness.Service:
    if name not in _services:
        _services[name] = harness.start(name)
    return _services[name]


# The fixtures that start (or stand for) a real process: a test using any of them, directly or
# through another fixture (``item.fixturenames`` is the closure), is an integration test, and
# `make check` (``-m "not integration and not browser"``) leaves it out. The database fixtures
# belong here too: the file database exists so that a worker or web process sees the test's rows.
SERVICE_FIXTURES = frozenset(
    {
        "engine",
        "redis_server",
        "chroma_server",
        "celery_worker",
        "web_server",
        "full_stack",
        "chapter_indexed",
        "migrated_database",
        "shared_database",
        "document_owner",
        "service_faults",
        "router_pool",
        "prefix_replicas",  # its tests start the real vllm-router in front of them (bench/router_run.py)
    }
)
BROWSER_FIXTURES = frozenset({"chromium", "browser"})


def tier_markers(fixturenames: Iterable[str]) -> set[str]:
    """The tier markers a test earns by the fixtures it uses (its own markers are kept as well).

    ``engine``: it needs the real vLLM engine, the one service that takes minutes to start; CI's
    PostgreSQL pass leaves these out (their database work is the same ORM code the others run).
    """
    names = set(fixturenames)
    tiers = {"integration"} if names & SERVICE_FIXTURES else set()
    tiers |= {"engine"} if "engine" in names else set()
    return tiers | ({"browser"} if names & BROWSER_FIXTURES else set())


# Not tryfirst: after pytest-django's reordering (so the browser tests stay last), and, as a conftest's
# hook, still before pytest's own -m selection, which reads the markers.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(tier_markers(getattr(item, "fixturenames", ()))):
            item.add_marker(name)
    # Playwright's sync API keeps an event loop running in the main thread for the rest of
    # the session, after which Django refuses ORM calls there and asyncio.run() fails:
    # tests that use the browser go last. Before them, the tests that need the engine: it
    # starts in the background at collection (pytest_collection_finish) and takes minutes,
    # which the tests without it fill. A stable sort keeps pytest-django's order in each group.
    items.sort(
        key=lambda item: (item.get_closest_marker("browser") is not None, item.get_closest_marker("engine") is not None)
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    # The engine takes the longest to come up: start it while the unit tests run.
    if settings.VLLM_EMBEDDED and any("engine" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_once("engine")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for service in reversed(list(_services.values())):
        service.stop()
    run_dir = Path(os.environ["LAB_TEST_DATA_DIR"])
    # LAB_KEEP_TEST_DATA=1 keeps a green run's folder too (its logs, database and job timings).
    if exitstatus == 0 and run_dir.parent.name == "tests" and not os.environ.get("LAB_KEEP_TEST_DATA"):
        shutil.rmtree(run_dir, ignore_errors=True)


def _running(name: str) -> harness.Service:
    service = _start_once(name)
    service.wait_ready()
    return service


class ServiceFaults:
    """Kill a session service's whole process tree (SIGKILL) and start it again on the same port.

    The new process replaces the entry in ``_services``, so the rest of the run (and the
    end-of-run stop) uses it. A test that fails between ``kill`` and ``restart`` still
    leaves every service running: the fixture's teardown restarts what was killed.
    """

    def __init__(self) -> None:
        self.killed: set[str] = set()
        self.restart_s: dict[str, float] = {}

    def pid(self, name: str) -> int:
        return _services[name].process.pid

    def kill(self, name: str) -> None:
        self.killed.add(name)
        _services[name].kill()

    def restart(self, name: str) -> harness.Service:
        """Start the service again with the same command; returns once it is ready (seconds in ``restart_s``)."""
        if _services[name].process.poll() is None:
            self.kill(name)
        port = _services[name].component.port
        deadline = time.monotonic() + 30
        while port is not None and port_in_use(port) and time.monotonic() < deadline:
            time.sleep(0.2)  # a killed server's socket can take a moment to go
        service = _services[name] = harness.start(name)
        self.restart_s[name] = service.wait_ready()
        self.killed.discard(name)
        return service

    def restore(self) -> None:
        for name in sorted(self.killed):
            self.restart(name)


@pytest.fixture(autouse=True)
def _korean_by_default() -> Iterator[None]:
    """Each test starts in the default language: a request through the test client leaves its
    language active in the thread, so an English page in one test made the next test's messages
    English (a subset of the suite failed on "caps … 작아야" that way)."""
    from django.utils import translation

    translation.activate(settings.LANGUAGE_CODE)
    yield
    translation.deactivate()


@pytest.fixture
def engine_script() -> scripted.Script:
    """What ``scripted_engine`` answers: four pieces 1 ms apart. A test module that needs another
    script overrides this fixture."""
    return scripted.Script(delay_s=0.001)


@pytest.fixture
def scripted_engine(engine_script: scripted.Script) -> Iterator[tuple[scripted.Script, str]]:
    """The scripted OpenAI-compatible server in a thread of this process while the test runs: its
    script (a test may change it mid-run) and its base URL."""
    with scripted.serve(engine_script) as url:
        yield engine_script, url


@dataclass
class RouterPool:
    """The real vllm-router (the stack's ``router`` component, as `make run` starts it) in front of
    scripted engines in threads of this process, each answering its own name."""

    url: str
    service: harness.Service
    engines: dict[str, scripted.ThreadedServer]  # base URL -> server; ``kill`` stops one
    names: dict[str, str]  # the text each engine answers -> its base URL

    def answered_by(self, text: str) -> str:
        """The base URL of the engine whose name the answer ``text`` is."""
        return self.names[text.strip()]

    def kill(self, url: str) -> None:
        """Stop an engine: it stops listening and drops every connection, as a killed process does."""
        self.engines[url].stop()


@pytest.fixture
def prefix_replicas() -> Iterator[list[str]]:
    """Two scripted engines with a simulated prefix cache (their URLs), for a router policy to spread
    conversations over (tests/ops/test_router_policy.py, the router_policy job kind's test)."""
    servers = [
        scripted.ThreadedServer(scripted.Script(delay_s=0.001, prefix_cache=scripted.PrefixCache())) for _ in range(2)
    ]
    try:
        yield [server.start() for server in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def router_pool(settings: Any) -> Iterator[RouterPool]:
    """Two scripted engines behind the real vllm-router, the chat's router while the test runs
    (LAB_ROUTER on, the default policy: consistent_hash on X-Session-ID)."""
    servers = [scripted.ThreadedServer(scripted.Script(pieces=[f"engine-{n}"], delay_s=0.001)) for n in (1, 2)]
    urls = [server.start() for server in servers]
    settings.LAB_ROUTER, settings.LAB_ROUTER_ENGINES = True, urls
    service = harness.start("router")
    try:
        service.wait_ready(timeout=60)
        yield RouterPool(
            url=str(settings.ROUTER_URL),
            service=service,
            engines=dict(zip(urls, servers, strict=True)),
            names={f"engine-{n}": url for n, url in enumerate(urls, start=1)},
        )
    finally:
        service.stop()
        for server in servers:
            server.stop()


@pytest.fixture
def service_faults() -> Iterator[ServiceFaults]:
    faults = ServiceFaults()
    try:
        yield faults
    finally:
        faults.restore()


@pytest.fixture(scope="session")
def engine() -> str:
    """Base URL of a real vLLM server: the harness's embedded engine or VLLM_BASE_URL."""
    if settings.VLLM_EMBEDDED:
        _running("engine")
    return str(settings.VLLM_BASE_URL)


@pytest.fixture(scope="session")
def redis_server() -> str:
    if settings.REDIS_EMBEDDED:
        _running("redis")
    return str(settings.REDIS_URL)


@pytest.fixture(scope="session")
def chroma_server() -> str:
    if settings.CHROMA_EMBEDDED:
        _running("chroma")
    return str(settings.CHROMA_URL)


@pytest.fixture(scope="session")
def migrated_database() -> None:
    """The file database that the harness's web and worker processes share."""
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    subprocess.run([sys.executable, "manage.py", "load_chapter"], cwd=ROOT, check=True, capture_output=True)


@pytest.fixture
def shared_database(migrated_database: None, django_db_blocker: Any) -> Iterator[None]:
    """This process's default connection on the file database the worker and web server use.

    pytest-django's test database lives only in this process (SQLite in memory); a test
    whose rows a worker or web process must see uses this for its length.
    """
    from django.db import connections

    from labapp.settings import _database

    original = connections["default"]
    shared = original.__class__({**original.settings_dict, "NAME": _database()["NAME"]}, alias="default")
    connections["default"] = shared
    try:
        with django_db_blocker.unblock():
            yield
    finally:
        shared.close()
        connections["default"] = original


@pytest.fixture
def document_owner(shared_database: None) -> Iterator[Any]:
    """A user on the shared database; their documents (rows and chunks) and the user go afterwards."""
    import uuid

    from django.contrib.auth.models import User

    from rag import services, vectorstore
    from rag.models import Document

    user = User.objects.create_user(username=f"owner-{uuid.uuid4().hex[:8]}")
    yield user
    for document in Document.objects.filter(owner=user):
        try:
            services.document_delete(document=document)
        except vectorstore.RetrievalUnavailable:
            pass  # a test without Chroma wrote nothing there
    user.delete()


@pytest.fixture(scope="session")
def chapter_indexed(chroma_server: str, migrated_database: None) -> None:
    """The chapter embedded in Chroma at every chunk size, as `make run`'s index step does."""
    subprocess.run(
        [sys.executable, "manage.py", "build_index", "--wait", "60"], cwd=ROOT, check=True, capture_output=True
    )


@pytest.fixture(scope="session")
def celery_worker(redis_server: str, migrated_database: None) -> harness.Service:
    return _running("worker")


@pytest.fixture(scope="session")
def web_server(redis_server: str, migrated_database: None) -> str:
    _running("web")
    return f"http://127.0.0.1:{settings.WEB_PORT}"


@pytest.fixture(scope="session")
def full_stack(
    engine: str, redis_server: str, chroma_server: str, celery_worker: harness.Service, web_server: str
) -> str:
    return web_server


@pytest.fixture
def browser(chromium: object) -> Iterator[object]:
    """The session's Chromium, failing the test on any Content-Security-Policy violation a page reports."""
    watching = CspWatchingBrowser(chromium)
    yield watching
    if watching.violations:
        pytest.fail("Content-Security-Policy violations:\n" + "\n".join(watching.violations), pytrace=False)


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    harness.refuse_in_check_tier("chromium")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield chromium
        chromium.close()
