"""Static checks of docker/compose.yaml and docker/Dockerfile against the app's own config.

No Docker engine is needed: the compose file is parsed with PyYAML and compared with
``labapp.env.VARIABLES`` and the app's URL validators.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from labapp.env import VARIABLES, env_url

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"

SERVICES = {"web", "worker", "redis", "postgres", "chroma", "vllm"}
APP_SERVICES = ("web", "worker")
# The port each backing service's image listens on inside the compose network.
SERVICE_PORTS = {"postgres": 5432, "redis": 6379, "chroma": 8000, "vllm": 8000}
# URL variable -> (service it must point at, schemes the app accepts).
URLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "DATABASE_URL": ("postgres", ("postgres", "postgresql")),
    "REDIS_URL": ("redis", ("redis",)),
    "CHROMA_URL": ("chroma", ("http", "https")),
    "VLLM_BASE_URL": ("vllm", ("http", "https")),
}
# ${NAME...} or $NAME, but not the $$ escape compose uses for a literal dollar.
INTERPOLATION = re.compile(r"(?<!\$)\$(?:\{([A-Za-z_]\w*)|([A-Za-z_]\w*))")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def argv(value: str | list[str] | None) -> list[str]:
    """A compose ``command``/``test`` or Dockerfile exec form as a list of arguments."""
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def option(args: list[str], *names: str) -> str | None:
    """The value of ``-x VALUE``, ``--name VALUE`` or ``--name=VALUE`` in ``args``."""
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            return args[i + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def dockerfile_instructions(name: str) -> list[str]:
    """Arguments of every ``name`` instruction, with line continuations joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    prefix = name.upper() + " "
    return [line.strip()[len(prefix) :].strip() for line in text.splitlines() if line.strip().startswith(prefix)]


def dockerfile_exec(name: str) -> list[str]:
    values = dockerfile_instructions(name)
    assert values, f"Dockerfile has no {name}"
    last = values[-1]
    return json.loads(last) if last.startswith("[") else shlex.split(last)


def service_command(services: dict[str, dict[str, Any]], name: str) -> list[str]:
    return argv(services[name].get("command")) or dockerfile_exec("CMD")


def assert_pinned(image: str) -> None:
    name, _, tag = image.rpartition(":")
    assert "@sha256:" in image or (name and "/" not in tag and tag and tag != "latest"), (
        f"image {image!r} is not pinned to a tag"
    )


def test_all_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert SERVICES <= services.keys()


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_build_the_app_image(services: dict[str, dict[str, Any]], name: str) -> None:
    build = services[name].get("build")
    assert isinstance(build, dict), f"{name} must be built from docker/Dockerfile"
    context = (COMPOSE_FILE.parent / build.get("context", ".")).resolve()
    assert context == ROOT, f"{name} build context must be the repository root"
    assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE
    assert services["web"].get("image") == services["worker"].get("image")


def test_web_runs_daphne_on_8000(services: dict[str, dict[str, Any]]) -> None:
    args = service_command(services, "web")
    assert args[0] == "daphne"
    assert "labapp.asgi:application" in args
    assert option(args, "-p", "--port") == "8000"
    assert option(args, "-b", "--bind") == "0.0.0.0"
    assert option(args, "--websocket_connect_timeout") == "30"  # as the embedded web server


def test_worker_runs_celery_on_both_queues(services: dict[str, dict[str, Any]]) -> None:
    args = service_command(services, "worker")
    assert args[0] == "celery" and "worker" in args
    assert option(args, "-A", "--app") == "labapp"
    queues = option(args, "-Q", "--queues") or ""
    assert {"default", "bench"} <= set(queues.split(","))


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_environment_is_declared(services: dict[str, dict[str, Any]], name: str) -> None:
    env = environment(services[name])
    undeclared = env.keys() - VARIABLES.keys()
    assert not undeclared, f"{name} sets variables labapp.env does not read: {sorted(undeclared)}"
    assert env.get("LAB_MODE") == "class"
    assert env.get("SECRET_KEY", "").startswith("${SECRET_KEY:?"), "SECRET_KEY must be required"
    assert URLS.keys() <= env.keys()


@pytest.mark.parametrize("name", APP_SERVICES)
@pytest.mark.parametrize("variable", URLS)
def test_urls_point_at_their_service(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, name: str, variable: str
) -> None:
    target, schemes = URLS[variable]
    value = environment(services[name])[variable]
    parts = urlsplit(value)
    assert parts.hostname == target, f"{variable}={value} should name the {target} service"
    assert parts.port == SERVICE_PORTS[target], f"{variable}={value} should use port {SERVICE_PORTS[target]}"
    assert target in services
    monkeypatch.setenv(variable, value)
    assert env_url(variable, schemes=schemes) == value.rstrip("/")


def test_vllm_service(services: dict[str, dict[str, Any]]) -> None:
    vllm = services["vllm"]
    image = vllm["image"]
    assert image.startswith("vllm/vllm-openai:")
    assert_pinned(image)
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)
    args = argv(vllm.get("command"))
    assert "--enable-per-request-metrics" in args
    assert "--enable-prompt-tokens-details" in args
    model = option(args, "--model") or (args[0] if args and not args[0].startswith("-") else None)
    assert model is not None, "vllm command names no model"
    assert model == environment(services["web"])["VLLM_MODEL"], "vllm must serve the model the app asks for"
    assert option(args, "--port") in (None, str(SERVICE_PORTS["vllm"]))


@pytest.mark.parametrize("name", ["chroma", "postgres", "redis"])
def test_backing_images_are_pinned(services: dict[str, dict[str, Any]], name: str) -> None:
    assert_pinned(services[name]["image"])


def test_interpolations_use_known_names() -> None:
    names = {a or b for a, b in INTERPOLATION.findall(COMPOSE_FILE.read_text())}
    assert "SECRET_KEY" in names
    unknown = {n for n in names if n not in VARIABLES and not n.startswith("POSTGRES_")}
    assert not unknown, f"compose interpolates undeclared variables: {sorted(unknown)}"


def test_dockerfile_entrypoint_and_lock(services: dict[str, dict[str, Any]]) -> None:
    copies = [argv(c) for c in dockerfile_instructions("COPY")]
    sources = [a for c in copies for a in c[:-1] if not a.startswith("--")]
    assert "requirements.lock" in sources, "the image must install the pinned requirements.lock"
    assert any("-r" in r and "requirements.lock" in r for r in dockerfile_instructions("RUN"))

    entrypoint = Path(dockerfile_exec("ENTRYPOINT")[0]).name
    local = [c for c in copies if not any(a.startswith("--from") for a in c)]
    script = next((c[-2] for c in local if Path(c[-1]).name == entrypoint), None)
    assert script is not None, f"ENTRYPOINT {entrypoint} is not copied from the repository"
    path = ROOT / script
    assert path.is_file() and os.access(path, os.X_OK), f"{script} must exist and be executable"
    assert 'exec "$@"' in path.read_text()

    assert dockerfile_exec("CMD") == service_command(services, "web"), "default CMD is the web command"


def test_dockerfile_collects_static_with_a_valid_throwaway_key() -> None:
    run = next((r for r in dockerfile_instructions("RUN") if "collectstatic" in r), None)
    assert run is not None, "the image must run collectstatic at build time"
    key = re.search(r"\bSECRET_KEY=(\S+)", run)
    assert key is not None and len(key.group(1)) >= 32, "settings reject a SECRET_KEY under 32 characters"


def test_dockerignore_keeps_context_small() -> None:
    entries = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv*", "data/"} <= entries
