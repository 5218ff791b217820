"""`make run` itself: the supervisor, a component that cannot start, Ctrl-C, and reuse of installs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from labapp.ops.stack import __main__ as stack
from labapp.ops.stack.components import Component, PrepareError
from tests.axe import AXE_JS
from tests.settings import free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


class MakeRun:
    def __init__(self, process: subprocess.Popen[str], web_url: str) -> None:
        self.process = process
        self.web_url = web_url
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 180, since: int = 0) -> re.Match[str]:
        """The first line matching ``pattern``, from line ``since`` on."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines)[since:]:
                if found := re.search(pattern, line):
                    return found
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise AssertionError(f"no line matching {pattern!r} in:\n{self.output()[-6000:]}")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def _ctrl_c(run: MakeRun) -> None:
    """What a terminal does on Ctrl-C: SIGINT to the whole foreground process group."""
    os.killpg(run.process.pid, signal.SIGINT)
    run.process.wait(timeout=90)


@contextmanager
def make_run(engine_url: str, tmp_path: Path, **overrides: str) -> Iterator[MakeRun]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "models").symlink_to(ROOT / "data" / "models")
    web_port = free_port()
    environment = {
        k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "LAB_TEST_DATA_DIR", "VLLM_PORT")
    }
    environment |= {
        "DATA_DIR": str(data),
        "DATABASE_URL": f"sqlite:///{data}/lab.sqlite3",
        "REDIS_PORT": str(free_port()),
        "CHROMA_PORT": str(free_port()),
        "WEB_PORT": str(web_port),
        # The harness's engine stands in for the embedded one: starting a second
        # engine would only repeat the engine's own test at twice the memory.
        "VLLM_BASE_URL": engine_url,
    } | overrides
    web_port = int(environment["WEB_PORT"])
    process = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    run = MakeRun(process, f"http://127.0.0.1:{web_port}")
    try:
        yield run
    finally:
        if process.poll() is None:
            _ctrl_c(run)


pytestmark = pytest.mark.integration


def test_make_run_serves_every_component_green_and_ctrl_c_leaves_no_orphans(
    engine: str, browser: object, tmp_path: Path
) -> None:
    with make_run(engine, tmp_path) as run:
        run.wait_for(r"\[web\] open http://localhost:\d+/")
        run.wait_for(r"\[index\] finished", timeout=420)  # embeds ~500 chunks on a busy CPU
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        page.goto(f"{run.web_url}/status/", timeout=120_000)
        rows = {
            key: page.locator(f"#component-{key}").get_attribute("class")
            for key in ["database", "redis", "chroma", "vllm", "celery", "embeddings"]
        }
        page.wait_for_selector("#ws-row[data-ok='true']", timeout=15_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "make-run-status.png"), full_page=True)
        page.close()
        assert rows == dict.fromkeys(rows, "ok"), run.output()[-4000:]

        # The worker killed as the kernel's OOM killer would (its pool with it): the wrapper starts it again.
        worker = next(
            p for p in _descendants(run.process.pid) if p.cmdline()[1:3] == ["-m", "celery"] and "worker" in p.cmdline()
        )
        before = len(run.lines)
        for process in [*worker.children(recursive=True), worker]:
            process.kill()
        run.wait_for(r"\[worker\] exited with code -9 after it had answered; starting it again in 1 s", since=before)
        run.wait_for(r"\[worker\] started \(pid \d+\)", since=before)
        run.wait_for(r"\[worker\] ready in", timeout=120, since=before)
        celery = {c["key"]: c for c in httpx.get(f"{run.web_url}/status.json", timeout=90).json()["components"]}
        assert celery["celery"]["ok"], celery["celery"]

        family = _descendants(run.process.pid)
        assert len(family) >= 10  # honcho, 6 wrappers, redis, chroma, worker(s), daphne
        _ctrl_c(run)
        time.sleep(1)
        alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"left running after Ctrl-C: {[(p.pid, p.cmdline()[:3]) for p in alive]}"


def test_a_component_that_cannot_start_is_named_and_the_rest_keep_running(engine: str, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        # Something else already holds the embedded Redis port.
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        redis_port = squatter.getsockname()[1]
        with make_run(engine, tmp_path, REDIS_PORT=str(redis_port)) as run:
            run.wait_for(rf"\[redis\] FAILED to start: port {redis_port} on 127.0.0.1 is already in use")
            run.wait_for(r"\[web\] open http://localhost:\d+/")
            run.wait_for(r"\[chroma\] ready")
            # Under a full test run the fresh stack is busy indexing: a probe may miss its deadline
            # once, so the page is asked again (as its htmx refresh does) until the live ones answer.
            for _ in range(10):
                status = httpx.get(f"{run.web_url}/status.json", timeout=90).json()
                by_key = {c["key"]: c for c in status["components"]}
                if all(by_key[key]["ok"] for key in ("database", "chroma", "vllm")):
                    break
                time.sleep(3)
            assert by_key["redis"]["ok"] is False and by_key["redis"]["error"]
            assert by_key["celery"]["ok"] is False
            live = {key: (by_key[key]["ok"], by_key[key].get("error")) for key in ("database", "chroma", "vllm")}
            assert all(ok for ok, _ in live.values()), live
            home = httpx.get(f"{run.web_url}/", timeout=30)
            assert home.status_code == 200
            banner = httpx.get(f"{run.web_url}/status/banner/", timeout=30).text
            assert "Redis" in banner
            chapter = httpx.get(f"{run.web_url}/chapter/prefill-decode/", timeout=30)
            assert chapter.status_code == 200


def test_the_wrapper_names_a_missing_binary_and_a_failed_preparation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_prepare() -> None:
        raise PrepareError("model conversion failed (exit 1):\nOSError: no space left on device")

    builders = {
        "ghost": lambda: Component(name="ghost", command=["/nonexistent/ghost-server"]),
        "model": lambda: Component(name="model", command=["/bin/true"], prepare=failing_prepare),
    }
    monkeypatch.setattr("labapp.ops.stack.components.BUILDERS", builders)
    for name in builders:
        stack._stop.clear()
        threading.Timer(0.3, stack._stop.set).start()
        assert stack.run(name) == 0  # it idles rather than exiting: honcho keeps the others
    out = capsys.readouterr().out
    assert "[ghost] FAILED to start: missing binary /nonexistent/ghost-server" in out
    assert "[model] FAILED to start: model conversion failed (exit 1)" in out
    assert "no space left on device" in out


def test_the_wrapper_records_each_start_so_the_status_page_can_say_starting(
    monkeypatch: pytest.MonkeyPatch, settings: object, tmp_path: Path
) -> None:
    from labapp import starts

    settings.DATA_DIR = tmp_path  # type: ignore[attr-defined]
    seen: list[bool] = []

    def ready() -> bool:  # a warm-up: answers on its third check
        record = starts.read("slow")
        seen.append(record is not None and record.starting())
        return len(seen) >= 3

    builders = {"slow": lambda: Component(name="slow", command=["/bin/sleep", "30"], ready=ready)}
    monkeypatch.setattr("labapp.ops.stack.components.BUILDERS", builders)
    stack._stop.clear()
    threading.Timer(2.5, stack._stop.set).start()
    assert stack.run("slow") == 0
    assert seen[:2] == [True, True]  # started, not answering yet: "starting"
    record = starts.read("slow")
    assert record is not None and record.answered_at is not None and not record.starting()
    assert len(record.durations) == 1 and record.durations[0] > 0  # kept for the next start's estimate
    assert record.pid == 0  # stopped


def test_a_second_make_finds_every_install_and_the_model_up_to_date() -> None:
    AXE = str(AXE_JS.relative_to(ROOT))
    targets = [
        ".venv/.installed",
        ".venv-engine/.installed",
        ".venv-router/.installed",
        "data/models/gemma-3-270m/config.json",
        AXE,
    ]
    done = subprocess.run(["make", "--question", *targets], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"make would redo work: {done.stdout}{done.stderr}"
    dry = subprocess.run(
        ["make", "--dry-run", "test", "PYTEST_ARGS=--version"], cwd=ROOT, capture_output=True, text=True
    )
    assert "pip install" not in dry.stdout and "convert_model" not in dry.stdout and "npm install" not in dry.stdout


def test_a_component_that_dies_after_answering_is_started_again_and_one_that_never_answered_is_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(stack, "RESTARTS_MAX", 2)
    monkeypatch.setattr(stack, "_stop", threading.Event())
    monkeypatch.setattr("labapp.starts.begun", lambda name, pid: None)
    monkeypatch.setattr("labapp.starts.answered", lambda name: None)
    monkeypatch.setattr("labapp.starts.ended", lambda name: None)
    runs = tmp_path / "runs"
    # Answers (its ready check passes), then dies: a crash while serving.
    crashing = Component(
        name="crashy",
        command=["/bin/sh", "-c", f"echo x >> {runs}; sleep 0.3; exit 3"],
        ready=lambda: True,
    )
    threading.Timer(7.0, stack._stop.set).start()  # runs 3 x 0.3 s, pauses 1 + 2 s, then it idles
    assert stack.supervise(crashing) == 0
    out = capsys.readouterr().out
    assert out.count("[crashy] started") == 3 and runs.read_text().count("x") == 3  # the first run and 2 restarts
    assert "[crashy] exited with code 3 after it had answered; starting it again in 1 s" in out
    assert "[crashy] exited with code 3 after it had answered; starting it again in 2 s" in out
    assert "[crashy] FAILED: exited with code 3 (2 restarts in the last 10 min already)" in out
    # Dies before it ever answered: a bad setting would only fail again.
    stack._stop.clear()
    never = Component(name="never", command=["/bin/sh", "-c", "exit 4"], ready=lambda: False)
    threading.Timer(2.0, stack._stop.set).start()
    assert stack.supervise(never) == 0
    out = capsys.readouterr().out
    assert out.count("[never] started") == 1 and "[never] FAILED: exited with code 4; see its output above" in out
