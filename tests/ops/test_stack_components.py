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


@pytest.mark.parametrize("nice", [0, 7])
def test_spawn_starts_the_command_at_the_components_niceness(nice: int) -> None:
    """The one place a component's process is made (make run's supervisor, the harness, the rehearsal)."""
    probe = components.Component(
        name="probe", command=[sys.executable, "-c", "import os; print(os.nice(0))"], env={"PROBE": "1"}, nice=nice
    )
    child = components.spawn(probe, stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=30)
    assert int(out) == min(19, os.nice(0) + nice)


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
