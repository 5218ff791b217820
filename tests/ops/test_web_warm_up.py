"""A web process loads the Korean analyser and the embedding model before it serves (``labapp.asgi``,
WEB_WARM_UP): on first use, on a thread, their loads held the interpreter's lock for seconds and stalled
every socket of the process (a just-started web process's first answer 7.7 s late in `make load`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
LOADED = (
    "import labapp.asgi; from rag import embeddings, lexical; "
    "print(bool(lexical._kiwi_analyser), embeddings._load.cache_info().currsize)"
)


def _import_asgi(warm: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}  # as a web process the run starts
    env |= {"WEB_WARM_UP": warm, "LAB_TEST_STARTED": "1", "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", LOADED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.split("\n")[-2]


def test_a_web_process_has_both_loaded_once_its_application_is_imported_before_it_listens() -> None:
    assert _import_asgi("true") == "True 1"
    assert settings.WEB_WARM_UP is False  # the test process imports the application to drive it, not to serve
