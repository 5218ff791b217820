"""Start the real services for the integration tests, exactly as `make run` does.

Commands and readiness checks come from labapp.ops.stack.components; each process
runs in its own process group and is stopped as a group at the end of the run.
"""

from __future__ import annotations

import os
from pathlib import Path

from labapp.ops.stack import launch
from labapp.ops.stack.launch import Service, ServiceFailed

__all__ = ["LOG_DIR", "Service", "ServiceFailed", "start"]

LOG_DIR = Path(os.environ["LAB_TEST_DATA_DIR"]) / "logs"


def start(name: str) -> Service:
    return launch.start(name, LOG_DIR)
