"""How `make run` starts each service (pure: nothing is started here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from labapp.ops.stack import components


def test_the_engine_is_started_with_the_flags_the_lab_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(components, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(components, "cpu_has_fast_bf16", lambda: False)
    engine = components.engine()
    command = engine.command
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enable-prefix-caching", "--enable-per-request-metrics", "--enable-prompt-tokens-details"):
        assert flag in command
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--dtype") + 1] == "float32"
    assert command[command.index("--served-model-name") + 1] == "gemma-3-270m"
    assert engine.env["HF_HUB_OFFLINE"] == "1"  # the default model never touches a hub
    assert engine.env["VLLM_USE_AOT_COMPILE"] == "0"
    assert engine.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert engine.external is None and engine.prepare is components.convert_embedded_model
    assert engine.nice == 10  # VLLM_CPU_NICE's default: the web processes go first on shared cores


def test_a_cpu_engine_runs_at_its_niceness_and_a_gpu_one_or_a_zero_setting_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(components, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.setattr(components, "has_nvidia_gpu", lambda: False)
    with override_settings(VLLM_CPU_NICE=15):
        assert components.engine().nice == 15
    with override_settings(VLLM_CPU_NICE=0):
        assert components.engine().nice == 0
    monkeypatch.setattr(components, "has_nvidia_gpu", lambda: True)  # a GPU engine's CPU loop feeds the GPU
    assert components.engine().nice == 0
    assert components.web().nice == components.worker().nice == 0


AUTOGROUP = Path("/proc/self/autogroup")  # "/autogroup-N nice K" where the kernel shares the CPU between sessions
PROBE = (
    "import os, pathlib; g = pathlib.Path('/proc/self/autogroup');"
    "print(os.nice(0), g.read_text() if g.exists() else '')"
)


def _probe(nice: int) -> components.Component:
    return components.Component(name="probe", command=[sys.executable, "-c", PROBE], env={"PROBE": "1"}, nice=nice)


@pytest.mark.parametrize("nice", [0, 7])
def test_spawn_starts_the_command_at_the_components_niceness(nice: int) -> None:
    """The one place a component's process is made (make run's supervisor, the harness, the rehearsal)."""
    ours = AUTOGROUP.read_text() if AUTOGROUP.exists() else ""
    out, _ = components.spawn(_probe(nice), stdout=subprocess.PIPE).communicate(timeout=30)
    niceness, group = out.decode().split(" ", 1) if ours else (out.decode(), "")
    assert int(niceness) == min(19, os.nice(0) + nice)
    assert group.strip() == ours.strip()  # the caller's session (this test's) is never lowered


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroup scheduling")
@pytest.mark.parametrize("nice", [0, 7])
def test_a_component_with_a_session_of_its_own_runs_the_session_at_its_niceness(nice: int) -> None:
    """Niceness counts only inside a session under autogroup scheduling: the web processes (their own sessions)
    would share the CPU evenly with a niced engine. Both ways a component gets its own session: a new one
    (the harness, the rehearsal, ``make load``), and honcho's, one per Procfile line (``make run``'s wrapper)."""
    expected = min(19, os.nice(0) + nice) if nice else 0
    out, _ = components.spawn(_probe(nice), start_new_session=True, stdout=subprocess.PIPE).communicate(timeout=30)
    assert out.decode().split()[-1] == str(expected)
    wrapper = (  # as honcho starts `python -m labapp.ops.stack NAME`: a session leader that spawns the component
        "import sys; from labapp.ops.stack import components as c;"
        f"sys.exit(c.spawn(c.Component(name='probe', command=[sys.executable, '-c', {PROBE!r}], nice={nice}),"
        " own_session=True).wait())"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper],
        cwd=components.ROOT,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split()[-1] == str(expected), done


@pytest.mark.parametrize(
    ("gpu", "fast_bf16", "setting", "expected"),
    [
        (True, False, "auto", "bfloat16"),
        (False, True, "auto", "bfloat16"),
        (False, False, "auto", "float32"),
        (False, False, "bfloat16", "bfloat16"),
    ],
)
def test_the_engine_dtype_follows_the_hardware_unless_set(
    monkeypatch: pytest.MonkeyPatch, gpu: bool, fast_bf16: bool, setting: str, expected: str
) -> None:
    monkeypatch.setattr(components, "cpu_has_fast_bf16", lambda: fast_bf16)
    with override_settings(VLLM_DTYPE=setting):
        assert components.engine_dtype(gpu) == expected


def test_an_external_url_means_the_component_is_not_started() -> None:
    with override_settings(
        VLLM_EMBEDDED=False,
        VLLM_BASE_URL="http://gpu-box:8000",
        VLLM_MODEL="Qwen/Qwen2.5-1.5B-Instruct",
        REDIS_EMBEDDED=False,
        REDIS_URL="redis://cache:6379/0",
    ):
        engine = components.engine()
        assert engine.external == "VLLM_BASE_URL=http://gpu-box:8000"
        assert engine.prepare is None  # nothing to convert for another model
        assert components.redis().external == "REDIS_URL=redis://cache:6379/0"


@pytest.mark.parametrize(("choice", "bind"), [("all", None), ("1", "0"), ("0-1", "0-1")])
def test_cpu_threads_bind_the_chosen_cores(choice: str, bind: str | None) -> None:
    with override_settings(VLLM_CPU_THREADS=choice):
        env = components.cpu_thread_env()
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == (bind or env["VLLM_CPU_OMP_THREADS_BIND"])
    assert env["VLLM_CPU_OMP_THREADS_BIND"].startswith("0")


def test_the_model_conversion_runs_the_script_beside_the_components(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor converts the model when `make run`'s own conversion did not (the path once
    pointed at a folder that had moved, and only a machine without the converted model found it)."""
    ran: list[list[str]] = []
    monkeypatch.setattr(components, "embedded_model_dir", lambda: tmp_path / "model")
    monkeypatch.setattr(components, "ENGINE_PYTHON", tmp_path / "python")
    (tmp_path / "python").touch()

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    components.convert_embedded_model()
    assert Path(ran[0][1]).is_file() and Path(ran[0][1]).name == "convert_model.py"


def test_the_router_stands_in_front_of_the_chat_engines_only_when_configured() -> None:
    with override_settings(LAB_ROUTER=False):
        assert components.router().disabled == "no router is configured (LAB_ROUTER=false)"
    engines = ["http://gpu-a:8000", "http://gpu-b:8000"]
    with override_settings(
        LAB_ROUTER=True,
        LAB_ROUTER_ENGINES=engines,
        LAB_ROUTER_POLICY="consistent_hash",
        LAB_ROUTER_PORT=8300,
        LAB_ROUTER_METRICS_PORT=8301,
    ):
        router = components.router()
    command = router.command
    assert router.disabled is None and router.port == 8300
    assert command[0].endswith(".venv-router/bin/vllm-router")
    workers = command.index("--worker-urls") + 1
    assert command[workers : workers + 2] == engines
    assert command[command.index("--policy") + 1] == "consistent_hash"
    assert command[command.index("--host") + 1] == command[command.index("--prometheus-host") + 1] == "127.0.0.1"
    assert command[command.index("--prometheus-port") + 1] == "8301"
    assert router.env["RUST_LOG"] == "warn"  # not a log line per routing decision
