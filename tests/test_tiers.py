"""The two test tiers: `make check` (no services) and `make test` (everything).

tests/conftest.py marks a test ``integration`` when it uses a fixture that starts (or stands
for) a real process and ``browser`` when it uses Chromium; `make check` leaves those out and
sets LAB_CHECK_TIER, under which the harness refuses to start anything.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import harness
from tests.conftest import BROWSER_FIXTURES, SERVICE_FIXTURES, tier_markers

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("fixture", sorted(SERVICE_FIXTURES))
def test_a_test_using_a_service_fixture_is_an_integration_test(fixture: str) -> None:
    engine = {"engine"} if fixture == "engine" else set()  # the one that takes minutes: CI's PostgreSQL pass skips it
    assert tier_markers(["settings", fixture, "tmp_path"]) == {"integration"} | engine


def test_a_test_using_the_browser_is_a_browser_and_integration_test_when_it_also_uses_a_service() -> None:
    for fixture in BROWSER_FIXTURES:
        assert tier_markers([fixture]) == {"browser"}
        assert tier_markers([fixture, "full_stack"]) == {"browser", "integration"}


def test_a_test_using_no_service_fixture_stays_in_the_check_tier() -> None:
    assert tier_markers(["settings", "client", "tmp_path", "monkeypatch", "db"]) == set()


def test_the_collected_tests_carry_their_tier(request: pytest.FixtureRequest) -> None:
    """The markers are on the collected items (so `-m` sees them): this test has none."""
    own = {mark.name for mark in request.node.iter_markers()}
    assert not own & {"integration", "browser"}


@pytest.mark.parametrize("name", ["redis", "engine", "web", "chromium"])
def test_under_make_check_the_harness_refuses_to_start_a_service_and_names_the_test(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(harness.CHECK_TIER_ENV, "1")
    with pytest.raises(harness.CheckTierStart) as refused:
        if name == "chromium":
            harness.refuse_in_check_tier(name)
        else:
            harness.start(name)
    assert "test_under_make_check_the_harness_refuses_to_start_a_service_and_names_the_test" in str(refused.value)
    assert repr(name) in str(refused.value)


def test_the_minimum_lab_runs_of_the_test_servers_meet_each_labs_minimums_and_are_smaller() -> None:
    """The browser tests' lab runs (tests/settings.py) can be handed in, and cost fewer requests than a default run."""
    from bench.kinds import registry
    from tests.settings import MINIMUM_LAB_RUNS

    for number, raw in MINIMUM_LAB_RUNS.items():
        kind = registry.for_lab(number)
        assert kind is not None and kind.lab is not None
        config = kind.config(raw)
        # Every variant over the same question, as the job asks them (Lab 6's rule reads it from the results).
        cells = [{"cell": name, "completed": 1, "answers": [{"id": 1}]} for name in getattr(config, "variants", dict)()]
        assert kind.lab.missing(config, {"cells": cells}) == [], number
        assert config.total_requests < kind.config({}).total_requests, number


def test_only_the_processes_a_test_run_starts_use_the_minimum_lab_runs() -> None:
    """The run buttons of this process keep the catalogue's settings (the unit tests read those); a
    process started from it (as the harness starts the web server) lays the minimum runs over them."""
    from django.conf import settings

    from tests.settings import MINIMUM_LAB_RUNS

    assert settings.LAB_RUN_SETTINGS == {}
    shown = "from labapp.labs.services import run_config; print(repr({n: run_config(n) for n in (1, 4, 6)}))"
    child = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", shown],
        cwd=ROOT,
        env={name: value for name, value in os.environ.items() if name != "PYTEST_XDIST_WORKER"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert ast.literal_eval(child.stdout.strip().splitlines()[-1]) == MINIMUM_LAB_RUNS
