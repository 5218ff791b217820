"""Test settings: the one settings module, pointed at ports and a data folder of the test run.

The harness (tests/harness.py) starts real Redis, Chroma, vLLM, Celery and Daphne
processes on these ports; the environment set here is what those child processes
inherit, so every process of a test run agrees on where everything is.
"""

import os
import random
import socket
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port below the kernel's ephemeral range.

    A port taken from the ephemeral range (``bind(0)``) can be handed to an outgoing
    connection, or to vLLM's own ``bind(0)`` for its ZMQ sockets, before the service meant
    for it starts: a CI run once failed with "redis: port 40771 is already in use".
    Ports below that range are only ever taken by a listener that asks for one.
    """
    low = max(_ephemeral_low(), 12000)
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(10000, low)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


# Set for the processes this run starts (web servers, workers), which load this module again.
STARTED_BY_TESTS = "LAB_TEST_STARTED"
# pytest-xdist's workers (`make check`) inherit the variable from the run they serve, but are that run.
started_by_tests = bool(os.environ.get(STARTED_BY_TESTS)) and "PYTEST_XDIST_WORKER" not in os.environ
if "LAB_TEST_DATA_DIR" not in os.environ:
    # Chosen once per test run; child processes inherit it.
    os.environ[STARTED_BY_TESTS] = "1"
    (ROOT / "data" / "tests").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=ROOT / "data" / "tests"))
    for shared in ("models", "vllm-cache"):  # the converted model and compile cache are reused
        (ROOT / "data" / shared).mkdir(parents=True, exist_ok=True)
        (run_dir / shared).symlink_to(ROOT / "data" / shared)
    os.environ["LAB_TEST_DATA_DIR"] = str(run_dir)
    os.environ["DATA_DIR"] = str(run_dir)
    for name in ("REDIS_PORT", "CHROMA_PORT", "WEB_PORT", "LAB_ROUTER_PORT", "LAB_ROUTER_METRICS_PORT"):
        os.environ[name] = str(free_port())
    # A running `make run` keeps its engine on 8200; the tests start their own.
    os.environ.setdefault("VLLM_PORT", str(free_port()))
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{run_dir}/lab.sqlite3")
    # The fault tests kill a component and read the status page at once: no reused probe results
    # (tests/site/test_status.py turns the cache on to prove it).
    os.environ.setdefault("STATUS_CACHE_S", "0")
    # One engine whatever the machine's cores (LAB_ENGINES=auto would give a CI runner's four cores two):
    # the harness starts one; tests of several build their layout themselves.
    os.environ.setdefault("LAB_ENGINES", "1")
    os.environ.setdefault("ENGINE_PROBE_CACHE_S", "0")  # the same for the engines page (test_engines turns it on)

from labapp.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast users in tests

# Each lab's minimum settings (what it accepts for a hand-in; bench.kinds' ``missing``), for the run
# buttons of the web servers the tests start: the browser tests drive the same pages, jobs and checks
# on the real engine in a fraction of the time (a default Lab 1 takes about 4 min on two cores).
MINIMUM_LAB_RUNS: dict[int, dict[str, object]] = {
    1: {"repeats": 1},  # the four shapes once each
    4: {"questions": 1, "top_ks": [1, 3], "chunk_sizes": [200, 500]},  # two top-k values, two chunk sizes
    6: {"questions": 1, "caps": [16, 32, 64]},  # three caps, all below the normal answer's max_tokens
}
if started_by_tests:
    LAB_RUN_SETTINGS = MINIMUM_LAB_RUNS
else:
    WEB_WARM_UP = False  # the test process imports labapp.asgi to drive it, never to serve: no model loads
    # The test process counts the sign-up limits in its own cache, cleared between tests; the tests
    # that need Redis's shared count name the run's Redis themselves (tests/site/test_signup_limits.py).
    # The web servers the run starts share the run's Redis, as a class server's do.
    SIGNUP_LIMITS_REDIS_URL = ""
    CHAT_ADMISSION_REDIS_URL = ""  # likewise the chat admission (tests/rag/test_admission.py names it)
    # and LTI's launches (tests/lti/ run in this process; the browser tests' web server uses Redis)
    CACHES = {**CACHES, "lti": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "lti"}}  # noqa: F405
