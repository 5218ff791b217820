"""LAB_ENGINES: how many embedded engines, each one's port, cores and role, and everything that follows
the one layout (labapp.engine_layout): the stack's engine components, the worker's slots, the router's
engines, the engines list and the status page's rows."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

from bench import engines, pools
from bench.models import BenchJob, Engine
from labapp import engine_layout as layout
from labapp.ops.stack import __main__ as stack
from labapp.ops.stack import components
from labapp.ops.stack.components import Component
from labapp.status import probes as status
from rag.vllm import client as vllm_client

FIRST = "http://127.0.0.1:8200"


def _build(count: int, chat: int | None = None, threads: str = "all", cpus: int = 2) -> layout.Layout:
    chat = layout.default_chat(count) if chat is None else chat
    return layout.build(first_url=FIRST, embedded=True, count=count, chat=chat, threads=threads, cpu_count=cpus)


def test_the_roles_agree_with_the_engine_model() -> None:
    assert (layout.MEASURE, layout.CHAT, layout.BOTH) == (Engine.Role.MEASURE, Engine.Role.CHAT, Engine.Role.BOTH)


@pytest.mark.parametrize(
    ("cpus", "gib", "count"),
    [(1, 64, 1), (2, 23, 1), (3, 64, 1), (4, 64, 2), (8, 64, 4), (8, 16, 2), (64, 4, 1), (16, 128, 8)],
)
def test_auto_gives_an_engine_per_two_cores_and_per_eight_gib(cpus: int, gib: float, count: int) -> None:
    assert layout.default_count(cpus, gib) == count


def test_one_engine_measures_and_chats_on_every_core_as_before() -> None:
    found = _build(1)
    assert [(e.name, e.url, e.role, e.cores) for e in found.engines] == [("engine", FIRST, "both", "0-1")]
    assert found.worker_slots == 2 and not found.chat_pool and not found.wants_router
    assert found.router_engines == [FIRST]


def test_two_engines_on_two_cores_one_measures_one_chats_a_core_each_on_consecutive_ports() -> None:
    found = _build(2)
    assert [(e.name, e.port, e.role, e.cores) for e in found.engines] == [
        ("engine", 8200, "measure", "0"),
        ("engine-2", 8201, "chat", "1"),
    ]
    assert found.worker_slots == 2  # one measuring engine, one slot for the default queue
    assert found.wants_router and found.router_engines == ["http://127.0.0.1:8201"]


def test_more_engines_split_the_cores_in_equal_runs_the_last_ones_chat() -> None:
    found = _build(3, chat=1, cpus=8)
    assert [(e.role, e.cores) for e in found.engines] == [("measure", "0-1"), ("measure", "2-3"), ("chat", "4-5")]
    assert found.worker_slots == 3  # cores 6-7 are left to the web server and the worker
    assert [e.role for e in _build(4, chat=2, cpus=8).engines] == ["measure", "measure", "chat", "chat"]
    assert [e.role for e in _build(2, chat=0).engines] == ["both", "both"]  # no chat pool: no router
    assert not _build(2, chat=0).wants_router and _build(2, chat=0).worker_slots == 3


def test_the_cores_come_from_vllm_cpu_threads() -> None:
    assert [e.cores for e in _build(2, threads="2-5", cpus=8).engines] == ["2-3", "4-5"]
    assert [e.cores for e in _build(2, threads="0,2,4,6", cpus=8).engines] == ["0,2", "4,6"]
    assert [e.cores for e in _build(2, threads="auto").engines] == [None, None]
    assert [e.cores for e in _build(1, threads="1").engines] == ["0"]


@pytest.mark.parametrize(
    ("count", "chat", "threads", "says"),
    [(3, 1, "all", "core per engine"), (2, 2, "all", "none of LAB_ENGINES=2 to measure"), (2, 1, "x-y", "0-3")],
)
def test_a_layout_that_does_not_fit_names_the_variables(count: int, chat: int, threads: str, says: str) -> None:
    with pytest.raises(layout.LayoutError, match=says):
        _build(count, chat, threads)


def test_an_external_engine_is_the_one_engine_whatever_lab_engines_says() -> None:
    found = layout.build(first_url="http://gpu:8000/", embedded=False, count=4, chat=1)
    assert [(e.url, e.role, e.embedded) for e in found.engines] == [("http://gpu:8000", "both", False)]
    assert found.embedded == ()


def test_the_settings_refuse_a_layout_that_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import labapp.settings

    for name, value in {"LAB_ENGINES": "2", "LAB_CHAT_ENGINES": "2", "VLLM_BASE_URL": ""}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match="LAB_CHAT_ENGINES=2"):
        importlib.reload(labapp.settings)
    monkeypatch.setenv("LAB_CHAT_ENGINES", "auto")
    reloaded = importlib.reload(labapp.settings)
    assert reloaded.LAB_ROUTER is True  # auto: a chat pool gets the router …
    host, port = reloaded.VLLM_BASE_URL.rsplit(":", 1)
    assert reloaded.LAB_ROUTER_ENGINES == [f"{host}:{int(port) + 1}"]  # … in front of the chat engine
    monkeypatch.setenv("LAB_ROUTER", "false")
    assert importlib.reload(labapp.settings).LAB_ROUTER is False  # … unless it is switched off
    monkeypatch.undo()
    importlib.reload(labapp.settings)


TWO = {"LAB_ENGINES": 2, "LAB_CHAT_ENGINES": 1, "VLLM_EMBEDDED": True, "VLLM_BASE_URL": FIRST}


def test_the_stack_starts_an_engine_component_per_engine_on_its_port_and_cores(monkeypatch: Any) -> None:
    monkeypatch.setattr(components, "has_nvidia_gpu", lambda: False)
    with override_settings(**TWO, VLLM_CPU_THREADS="all"):
        started = components.GROUPS["engine"]()
        worker = components.worker()
    assert [c.name for c in started] == ["engine", "engine-2"]
    for component, port, cores in zip(started, (8200, 8201), ("0", "1"), strict=True):
        assert component.port == port and component.command[component.command.index("--port") + 1] == str(port)
        assert component.env["VLLM_CPU_OMP_THREADS_BIND"] == cores
    assert worker.command[worker.command.index("--concurrency") + 1] == "2"


def test_the_wrapper_runs_each_engine_of_the_line_and_a_dead_one_leaves_the_other_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], settings: Any, tmp_path: Any
) -> None:
    """The Procfile's one ``engine`` line: each engine started, reported and stopped by its own name."""
    settings.DATA_DIR = tmp_path
    group = [
        Component(name="engine", command=["/bin/sleep", "30"]),
        Component(name="engine-2", command=["/bin/sh", "-c", "sleep 0.3; exit 3"]),
    ]
    monkeypatch.setattr(components, "GROUPS", {"engine": lambda: group})
    stack._stop.clear()
    threading.Timer(2.0, stack._stop.set).start()
    assert stack.run("engine") == 0
    out = capsys.readouterr().out
    assert "[engine] started" in out and "[engine-2] started" in out
    assert "[engine-2] FAILED: exited with code 3" in out
    assert "[engine] stopping" in out and "[engine] stopped" in out  # still running until the wrapper stopped


@pytest.mark.django_db
def test_the_engines_list_has_each_configured_engine_with_its_role_and_chat_goes_to_the_chat_engine() -> None:
    with override_settings(**TWO, LAB_ROUTER=False):
        found = engines.configured()
        assert [(c.url, c.role, c.key, c.configured) for c in found] == [
            (FIRST, "measure", "default", True),
            ("http://127.0.0.1:8201", "chat", "default-2", True),
        ]
        assert [c.url for c in pools.measurers(("default", ""), engines.choices())] == [FIRST]
        assert pools.chat_engine(FIRST).url == "http://127.0.0.1:8201"
        with pytest.raises(engines.EngineError, match="이미"):  # its address is taken
            engines.engine_add(user=None, name="x", base_url="http://127.0.0.1:8201")


@pytest.mark.django_db
def test_the_chat_goes_through_the_router_when_it_stands_in_front_of_the_chat_engine() -> None:
    from bench import selectors

    with override_settings(**TWO, LAB_ROUTER=True, LAB_ROUTER_ENGINES=["http://127.0.0.1:8201"]):
        routed = selectors.chat_engine(None)
        assert routed.url == "" and routed.request_url == django_settings.ROUTER_URL
    with override_settings(**TWO, LAB_ROUTER=False):
        assert selectors.chat_engine(None).url == "http://127.0.0.1:8201"  # straight to the chat engine


@pytest.mark.django_db
def test_the_status_page_shows_each_engine_with_its_role_pool_queue_and_health(
    monkeypatch: pytest.MonkeyPatch, django_user_model: Any
) -> None:
    def engine_up(url: str = FIRST) -> dict[str, str]:
        if url.endswith(":8201"):
            raise ConnectionError("refused")
        return {"url": url, "model": "m"}

    monkeypatch.setattr(status, "probe_vllm", engine_up)
    monkeypatch.setattr(status, "probe_engine", engine_up)
    kept = [
        replace_call(p, engine_up) if p.key == "vllm" else p for p in status.PROBES if p.key in ("vllm", "database")
    ]
    monkeypatch.setattr(status, "PROBES", kept)
    owner = django_user_model.objects.create(username="learner")
    for _ in range(2):
        BenchJob.objects.create(owner=owner, kind="speed", engine_url=FIRST)
    with override_settings(**TWO, LAB_ROUTER=False, STATUS_CACHE_S=0, LANGUAGE_CODE="ko"):
        page = Client().get("/status/").content.decode()
        data = Client().get("/status.json").json()
    first = page.split('id="component-vllm" class="')[1].split("</tr>")[0]
    second = page.split('id="component-vllm-2" class="')[1].split("</tr>")[0]
    assert first.startswith("ok") and second.startswith("down")  # each engine's own health
    assert "vLLM 엔진 1" in first and 'data-role="measure"' in first and "대기 2건" in first
    assert "풀 <code>default</code>" in first
    assert "vLLM 엔진 2" in second and 'data-role="chat"' in second and "작업을 받지 않음" in second
    by_key = {c["key"]: c for c in data["components"]}
    assert by_key["vllm"]["role"]["queue"] == 2 and by_key["vllm-2"]["role"]["queue"] is None


def replace_call(probe: status.ComponentProbe, call: Any) -> status.ComponentProbe:
    from dataclasses import replace

    return replace(probe, call=call)


def test_a_router_run_elsewhere_takes_the_chat_and_the_stack_starts_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import labapp.settings

    for name, value in {"LAB_ROUTER": "true", "LAB_ROUTER_URL": "http://router:8000/"}.items():
        monkeypatch.setenv(name, value)
    reloaded = importlib.reload(labapp.settings)
    assert reloaded.ROUTER_URL == "http://router:8000" and reloaded.ROUTER_EMBEDDED is False
    with override_settings(LAB_ROUTER=True, ROUTER_EMBEDDED=False, ROUTER_URL="http://router:8000"):
        assert vllm_client.chat_url() == "http://router:8000"  # docker/compose.yaml's router service
        assert components.router().external == "LAB_ROUTER_URL=http://router:8000"  # idles, naming it
        assert layout.main(["", "router-needed"]) == 1  # `make setup` installs no router of its own
    with override_settings(LAB_ROUTER=True, ROUTER_EMBEDDED=True):
        assert layout.main(["", "router-needed"]) == 0
    monkeypatch.setenv("LAB_ROUTER_URL", "router:8000")
    with pytest.raises(ImproperlyConfigured, match="LAB_ROUTER_URL"):
        importlib.reload(labapp.settings)
    monkeypatch.undo()
    importlib.reload(labapp.settings)
