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

WEB_SERVICES = ("web", "web-2")
WORKER_SERVICES = ("worker", "worker-default")
APP_SERVICES = WEB_SERVICES + WORKER_SERVICES
ENGINES = ("vllm", "vllm-chat-1", "vllm-chat-2")  # the first measures; the router spreads the chat over the others
SERVICES = {*APP_SERVICES, *ENGINES, "nginx", "router", "redis", "postgres", "chroma"}
# The port each backing service's image listens on inside the compose network.
SERVICE_PORTS = {"postgres": 5432, "redis": 6379, "chroma": 8000, "vllm": 8000, "router": 8000}
COMPOSE_ONLY = {"VLLM_MEASURE_GPU", "VLLM_CHAT_GPU_1", "VLLM_CHAT_GPU_2"}  # which GPU each engine takes
# URL variable -> (service it must point at, schemes the app accepts).
URLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "DATABASE_URL": ("postgres", ("postgres", "postgresql")),
    "REDIS_URL": ("redis", ("redis",)),
    "CHROMA_URL": ("chroma", ("http", "https")),
    "VLLM_BASE_URL": ("vllm", ("http", "https")),
    "LAB_ROUTER_URL": ("router", ("http", "https")),
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


@pytest.mark.parametrize("name", WEB_SERVICES)
def test_web_runs_daphne_on_8000_behind_the_proxy(services: dict[str, dict[str, Any]], name: str) -> None:
    args = service_command(services, name)
    assert args[0] == "daphne"
    assert "labapp.asgi:application" in args
    assert option(args, "-p", "--port") == "8000"
    assert option(args, "-b", "--bind") == "0.0.0.0"
    assert option(args, "--websocket_connect_timeout") == "30"  # as the embedded web server
    assert "--proxy-headers" in args  # the client's address from nginx's X-Forwarded-For, as in the rehearsal
    assert "ports" not in services[name], "the web processes are reached through nginx only"


def test_the_workers_consume_both_queues_bench_on_its_own(services: dict[str, dict[str, Any]]) -> None:
    queues: dict[str, set[str]] = {}
    names = set()
    for name in WORKER_SERVICES:
        args = service_command(services, name)
        assert args[0] == "celery" and "worker" in args
        assert option(args, "-A", "--app") == "labapp"
        queues[name] = set((option(args, "-Q", "--queues") or "").split(","))
        names.add(option(args, "-n", "--hostname"))
    assert queues == {"worker": {"bench"}, "worker-default": {"default"}}  # jobs never starve the rest
    assert len(names) == 2 and None not in names, "two workers need two node names"
    # One benchmark slot per measuring engine: the compose file has one that measures.
    assert option(service_command(services, "worker"), "-c", "--concurrency") == "1"


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


@pytest.mark.parametrize("name", ENGINES)
def test_each_vllm_engine_serves_the_apps_model_on_its_own_gpu(services: dict[str, dict[str, Any]], name: str) -> None:
    vllm = services[name]
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
    gpus = {
        str(d["device_ids"][0]) for e in ENGINES for d in services[e]["deploy"]["resources"]["reservations"]["devices"]
    }
    assert len(gpus) == len(ENGINES), "each engine reserves a GPU of its own"


def test_the_router_runs_the_embedded_routers_flags_in_front_of_the_chat_engines(
    services: dict[str, dict[str, Any]],
) -> None:
    from rag.vllm.router import ROUTER_FLAGS

    router = services["router"]
    assert router["build"].get("target") == "router"
    args = argv(router["command"])
    flags = args[args.index("--worker-startup-timeout-secs") :]
    assert flags == list(ROUTER_FLAGS), "the same health checks, retries and circuit breaker as `make run`'s router"
    urls = args[args.index("--worker-urls") + 1 : args.index("--policy")]
    env = environment(services["web"])
    assert urls == env["LAB_ROUTER_ENGINES"].split(",") == [f"http://{e}:8000" for e in ENGINES[1:]]
    assert env["LAB_ROUTER"] == "true" and option(args, "--port") == "8000"
    assert option(args, "--policy") == env["LAB_ROUTER_POLICY"] == "${LAB_ROUTER_POLICY:-consistent_hash}"
    assert any(step.startswith("FROM") and step.endswith("AS router") for step in _dockerfile_lines())
    assert "requirements-router.txt" in " ".join(dockerfile_instructions("COPY"))


def _dockerfile_lines() -> list[str]:
    return [line.strip() for line in DOCKERFILE.read_text().splitlines()]


def _location(conf: str) -> list[str]:
    """The directives of the ``location /`` block, one a line, as written."""
    block = conf[conf.index("location / {") :]
    block = block[: block.index("}")]
    return [line.strip() for line in block.splitlines()[1:] if line.strip()]


def test_nginx_proxies_both_web_processes_as_the_rehearsal_does(services: dict[str, dict[str, Any]]) -> None:
    from labapp.ops.rehearsal.cluster import NGINX_CONF

    conf = (DOCKER / "nginx.conf").read_text()
    rehearsal = NGINX_CONF.replace("{{", "{").replace("}}", "}")
    assert _location(conf) == _location(rehearsal), "docker/nginx.conf's location block drifted from the rehearsal's"
    assert re.findall(r"server (\S+) max_fails=1 fail_timeout=5s;", conf) == [f"{w}:8000" for w in WEB_SERVICES]
    assert "map $http_upgrade $connection_upgrade" in conf and "listen 8000;" in conf
    nginx = services["nginx"]
    assert_pinned(nginx["image"])
    assert nginx["ports"] == ["${WEB_PORT:-8000}:8000"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in nginx["volumes"]


def test_nginx_answers_a_request_never_answered_with_the_labs_page_written_by_the_web_service(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    """The same page and configuration as the rehearsal's nginx (labapp/ops/web_down.py): the web service's
    entrypoint writes it into the web-down volume, nginx serves it from there, read-only."""
    from labapp.ops import web_down

    conf = (DOCKER / "nginx.conf").read_text()
    served = web_down.NGINX_SERVER.replace("{pages}", "/usr/share/nginx/lab-web-down")
    assert web_down.NGINX_MAP in conf and all(line in conf for line in served.splitlines())
    assert "web-down:/usr/share/nginx/lab-web-down:ro" in services["nginx"]["volumes"]
    for name in WEB_SERVICES:
        assert "web-down:/srv/web-down" in services[name]["volumes"], name
    assert "web-down" in compose["volumes"]
    entrypoint = (DOCKER / "entrypoint.sh").read_text()
    assert "python manage.py web_down_pages /srv/web-down" in entrypoint
    assert any("/srv/web-down" in line and "chown lab:lab" in line for line in _dockerfile_lines())


@pytest.mark.integration
def test_debians_nginx_accepts_the_compose_files_nginx_conf(tmp_path: Path) -> None:
    """``nginx -t`` on docker/nginx.conf, the services' names made loopback (nothing resolves them here)."""
    import shutil
    import subprocess

    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = (DOCKER / "nginx.conf").read_text()
    for name in WEB_SERVICES:
        conf = conf.replace(f"server {name}:8000", "server 127.0.0.1:8000")
    conf = conf.replace("events {", f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{", 1)
    (tmp_path / "nginx.conf").write_text(conf)
    done = subprocess.run(
        [binary, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["chroma", "postgres", "redis"])
def test_backing_images_are_pinned(services: dict[str, dict[str, Any]], name: str) -> None:
    assert_pinned(services[name]["image"])


def test_interpolations_use_known_names() -> None:
    names = {a or b for a, b in INTERPOLATION.findall(COMPOSE_FILE.read_text())}
    assert "SECRET_KEY" in names
    unknown = {n for n in names if n not in VARIABLES and n not in COMPOSE_ONLY and not n.startswith("POSTGRES_")}
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

    # The image alone is the web command; compose adds --proxy-headers, since nginx is in front there.
    assert dockerfile_exec("CMD") == [a for a in service_command(services, "web") if a != "--proxy-headers"]


def test_dockerfile_collects_static_with_a_valid_throwaway_key() -> None:
    run = next((r for r in dockerfile_instructions("RUN") if "collectstatic" in r), None)
    assert run is not None, "the image must run collectstatic at build time"
    key = re.search(r"\bSECRET_KEY=(\S+)", run)
    assert key is not None and len(key.group(1)) >= 32, "settings reject a SECRET_KEY under 32 characters"


def test_dockerignore_keeps_context_small() -> None:
    entries = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv*", "data/"} <= entries
