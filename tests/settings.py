"""Test settings: the one settings module, pointed at ports and a data folder of the test run.

The harness (tests/harness.py) starts real Redis, Chroma, vLLM, Celery and Daphne
processes on these ports; the environment set here is what those child processes
inherit, so every process of a test run agrees on where everything is.
"""

import os
import socket
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if "LAB_TEST_DATA_DIR" not in os.environ:
    # Chosen once per test run; child processes inherit it.
    (ROOT / "data" / "tests").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=ROOT / "data" / "tests"))
    for shared in ("models", "vllm-cache"):  # the converted model and compile cache are reused
        (ROOT / "data" / shared).mkdir(parents=True, exist_ok=True)
        (run_dir / shared).symlink_to(ROOT / "data" / shared)
    os.environ["LAB_TEST_DATA_DIR"] = str(run_dir)
    os.environ["DATA_DIR"] = str(run_dir)
    for name in ("REDIS_PORT", "CHROMA_PORT", "WEB_PORT"):
        os.environ[name] = str(free_port())
    # A running `make run` keeps its engine on 8200; the tests start their own.
    os.environ.setdefault("VLLM_PORT", str(free_port()))
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{run_dir}/lab.sqlite3")
    # The fault tests kill a component and read the status page at once: no reused probe results
    # (tests/site/test_status.py turns the cache on to prove it).
    os.environ.setdefault("STATUS_CACHE_S", "0")

from labapp.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast users in tests
