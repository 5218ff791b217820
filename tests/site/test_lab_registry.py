"""A lab is one declaration: a kind registered inside a test, with its lab declared in one place (``ECHO``
below), is a lab everywhere (the catalog, its page, its run with a prediction, its checks, the hand-in)
with no other code knowing of it, and it is gone again once the kind is unregistered."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.translation import gettext_lazy

from bench import engines, services
from bench.kinds import registry
from bench.kinds.checks import Check
from bench.kinds.labs import Estimate, KeyNumber, Lab, Target, measured_at
from bench.models import BenchJob
from bench.reporting import Reporter
from labapp.labs import predict
from labapp.labs import selectors as lab_selectors
from labapp.labs.catalog import LABS, Status, state_for
from labapp.models import LabSubmission
from rag.chat import Speeds

NUMBER = 97


@dataclasses.dataclass(frozen=True)
class EchoConfig:
    echoes: int = 2
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.echoes

    def longest_requests(self) -> list[tuple[str, int]]:
        return []


async def _echo(config: EchoConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    """Sends nothing: one quiet cell per echo, each "measured" at 40 ms."""
    cells: list[dict[str, Any]] = []
    for number in range(1, config.echoes + 1):
        cells.append({"cell": f"echo {number}", "completed": 1, "failed": 0, "disturbed": False, "extra_requests": 0})
        if not await reporter.progress(number, config.echoes, f"echo {number}"):
            return {"cells": cells, "cancelled": True}, True
    return {"cells": cells, "echo_ms": 40.0 * config.echoes}, False


def _echo_checks(results: dict[str, Any]) -> list[Check]:
    heard = results.get("echo_ms") or 0
    return [Check("every echo heard", heard > 0, f"{heard} ms", "" if heard else "shout again")]


def _echo_estimate(config: EchoConfig, prefill: float, decode: float) -> Estimate:
    ms = round(config.echoes * 1000 / decode, 1)
    return Estimate(ms, f"{config.echoes} × 1000 ÷ {decode:g} = {ms:g} ms")


ECHO = registry.JobKind(
    name="echo",
    label="echo (a test's kind)",
    config_type=EchoConfig,
    fields=(registry.Field("echoes", "echoes", "integer", low=1, high=5),),
    measure=_echo,
    lab=Lab(
        number=NUMBER,
        slug="lab97-echo",
        title=gettext_lazy("Lab 97 — echoes"),
        checks=_echo_checks,
        keys=(KeyNumber("echo ms", "echo_ms", "echoes (ms)"),),
        missing=lambda config, results: [] if config.echoes >= 2 else ["two echoes or more"],
        minimums="two echoes or more",
        target=Target(
            lambda c: f"the time of {c.echoes} echoes", "ms", measured_at("echo_ms"), _echo_estimate, high=10_000
        ),
        config={"echoes": 3},
        request_shapes=lambda c: [(10, 5)] * c.echoes,
    ),
)


@pytest.fixture
def echo_lab() -> Iterator[registry.JobKind]:
    registry.register(ECHO)
    try:
        yield ECHO
    finally:
        registry.unregister(ECHO.name)
    assert NUMBER not in LABS and registry.find(ECHO.name) is None


@pytest.fixture
def learner(
    db: None, settings: Any, monkeypatch: pytest.MonkeyPatch, scripted_engine: tuple[object, str]
) -> Iterator[tuple[User, Client]]:
    url = scripted_engine[1]
    settings.VLLM_BASE_URL, settings.VLLM_MODEL = url, ""
    monkeypatch.setattr(engines, "chosen_url", lambda session: url)
    user = User.objects.create(username="echoer")
    client = Client()
    client.force_login(user)
    yield user, client


def test_a_lab_declared_with_its_kind_is_in_the_catalog_after_the_built_in_labs(
    echo_lab: registry.JobKind, learner: tuple[User, Client]
) -> None:
    _user, client = learner
    assert list(LABS) == [1, 2, 3, 4, 5, 6, NUMBER]
    lab = LABS[NUMBER]
    assert (lab.slug, str(lab.title), lab.job_kind, lab.config) == (
        "lab97-echo",
        "Lab 97 — echoes",
        "echo",
        {"echoes": 3},
    )
    listed = client.get("/labs/").content.decode()
    assert f'href="/labs/{NUMBER}/"' in listed and "Lab 97 — echoes" in listed
    page = client.get(f"/labs/{NUMBER}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<h1>Lab 97 — echoes</h1>" in html and "two echoes or more" in html  # title and minimums
    assert "the time of 3 echoes" in html and "echo (a test&#x27;s kind)" in html  # the target on its run settings
    assert "3 × 1000 ÷ 50 = 60 ms" in html  # no speeds yet: the chapter's example speeds in its formula
    assert 'id="model-notice"' not in html
    # No run yet: its time is the estimator's over the request shapes its declaration gives.
    speeds = Speeds(prefill=1000.0, decode=50.0, basis="", samples=1)
    before = lab_selectors.run_time(NUMBER, "http://e", speeds)
    assert before.seconds is not None and "(요청 3개)" in before.basis


def test_a_lab_declared_with_its_kind_runs_with_a_prediction_is_checked_and_handed_in(
    echo_lab: registry.JobKind, learner: tuple[User, Client]
) -> None:
    user, client = learner
    assert predict.estimate(NUMBER, EchoConfig(echoes=3), 600.0, 25.0) == Estimate(120.0, "3 × 1000 ÷ 25 = 120 ms")
    assert client.post(f"/labs/{NUMBER}/run/", {"prediction": "100000"}).status_code == 302  # past the target's high
    assert not BenchJob.objects.exists()
    assert client.post(f"/labs/{NUMBER}/run/", {"prediction": "100"}).status_code == 302
    job = BenchJob.objects.get()
    assert (job.kind, job.lab, job.config["echoes"], job.total_requests) == ("echo", NUMBER, 3, 3)  # its run settings
    assert job.prediction is not None and job.prediction["unit"] == "ms"
    assert job.prediction["what"] == "the time of 3 echoes"
    assert services.job_execute(job_id=job.pk).status == BenchJob.Status.DONE
    job.refresh_from_db()
    assert job.results is not None and job.results["echo_ms"] == 120.0

    comparison = predict.compare(job)
    assert comparison is not None and (comparison.predicted, comparison.measured, comparison.error) == (100, 120, -20)
    state = state_for(user.pk, NUMBER)
    assert [(c.name, c.passed) for c in state.checks] == [
        ("every echo heard", True),
        ("설정이 실습의 최소 조건을 만족", True),
        ("측정 중 다른 트래픽 없음", True),
    ]
    assert state.status == Status.PASSED and state.key_numbers == {"echo ms": 120.0}
    page = client.get(f"/labs/{NUMBER}/").content.decode()
    assert "every echo heard" in page and 'data-predicted="100.0"' in page and "echoes (ms): <b>120" in page

    assert client.post(f"/labs/{NUMBER}/submit/", {"reflection": "an echo takes 40 ms"}).status_code == 302
    handed = LabSubmission.objects.get(user=user, lab=NUMBER)
    assert handed.passed and handed.key_numbers == {"echo ms": 120.0}


def test_a_lab_below_its_declared_minimums_fails_its_settings_check(echo_lab: registry.JobKind) -> None:
    results = {"cells": [{"disturbed": False}], "echo_ms": 40.0}
    checks = LABS[NUMBER].checks(results, {"echoes": 1})
    assert [c.passed for c in checks] == [True, False, True]
    assert LABS[NUMBER].missing(results, {"echoes": 1}) == ["two echoes or more"]


def test_a_second_kind_cannot_serve_a_lab_already_served(echo_lab: registry.JobKind) -> None:
    with pytest.raises(ValueError, match=f"lab {NUMBER} is already served"):
        registry.register(dataclasses.replace(ECHO, name="echo2"))
    assert registry.find("echo2") is None


@pytest.mark.django_db
def test_no_lab_is_left_behind_by_the_registered_one(client: Client) -> None:
    assert NUMBER not in LABS and list(LABS) == [1, 2, 3, 4, 5, 6]
    client.force_login(User.objects.create(username="after"))
    assert client.get(f"/labs/{NUMBER}/").status_code == 404
    assert f"/labs/{NUMBER}/" not in client.get("/labs/").content.decode()
