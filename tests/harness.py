"""Start the real services for the integration tests, exactly as `make run` does.

Commands and readiness checks come from labapp.ops.stack.components; each process
runs in its own process group and is stopped as a group at the end of the run.
"""

from __future__ import annotations

import os
from pathlib import Path

from labapp.ops.stack import launch
from labapp.ops.stack.launch import Service, ServiceFailed

__all__ = ["LOG_DIR", "CheckTierStart", "Service", "ServiceFailed", "refuse_in_check_tier", "start"]

LOG_DIR = Path(os.environ["LAB_TEST_DATA_DIR"]) / "logs"
# Set by `make check`, the tier that runs without services (tests/conftest.py marks the rest).
CHECK_TIER_ENV = "LAB_CHECK_TIER"


class CheckTierStart(RuntimeError):
    """A test of the check tier asked for a real service: its fixtures do not say it needs one."""


def refuse_in_check_tier(name: str) -> None:
    """Under `make check`, fail loudly, naming the test, instead of starting a service or the browser."""
    if os.environ.get(CHECK_TIER_ENV):
        test = os.environ.get("PYTEST_CURRENT_TEST", "collection").rsplit(" ", 1)[0]
        raise CheckTierStart(
            f"{test} started {name!r} under `make check`, the tier without services: use the service's "
            "fixture (tests/conftest.py then marks the test integration or browser) or mark the test so"
        )


def start(name: str) -> Service:
    refuse_in_check_tier(name)
    return launch.start(name, LOG_DIR)
