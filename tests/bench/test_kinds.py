"""The registry of job kinds: every kind's form shows its config's defaults, and a kind added only
through the registry runs end to end (form, worker, command) with no other code knowing of it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from html.parser import HTMLParser
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from bench import configs, kinds, services, views
from bench.kinds import registry
from bench.models import BenchJob, Engine
from bench.reporting import Reporter
from labapp.ops import scripted

KIND_NAMES = [kind.name for kind in kinds.registry.runnable_kinds()]  # an imported run is never started


class _FormControls(HTMLParser):
    """name → the attributes of each input and select of a page, a select's "value" its selected option
    (a group of radios: the first radio's attributes, "value" the checked one's)."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: dict[str, dict[str, str]] = {}
        self._select: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "input" and found.get("type") == "radio" and "name" in found:  # a choice shown as radios
            group = self.controls.setdefault(found["name"], found | {"tag": "radio", "value": ""})
            if "checked" in found:
                group["value"] = found["value"]
        elif tag in ("input", "select") and "name" in found:
            self.controls[found["name"]] = found | {"tag": tag}
            self._select = self.controls[found["name"]] if tag == "select" else None
        elif tag == "option" and self._select is not None and "selected" in found:
            self._select["value"] = found["value"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None


def _controls(html: str) -> dict[str, dict[str, str]]:
    parser = _FormControls()
    parser.feed(html)
    return parser.controls


@pytest.fixture
def learner(monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setattr(views, "engine_max_model_len", lambda: 8192)
    client = Client()
    client.force_login(User.objects.create(username="kinds"))
    return client


def _without_seed(config: Any) -> Any:
    return dataclasses.replace(config, seed=0)


@pytest.mark.django_db
@pytest.mark.parametrize("name", KIND_NAMES)
def test_the_form_shows_each_kinds_own_defaults_and_an_empty_form_runs_exactly_them(learner: Client, name: str) -> None:
    kind = kinds.get(name)
    default = kind.default()
    controls = _controls(learner.get("/bench/", {"kind": name}).content.decode())
    assert controls["kind"]["value"] == name
    shown: dict[str, str] = {}
    for field in kind.fields:
        control = controls[field.name]
        assert name in control["data-kinds"].split(), field.name
        expected = field.shown(getattr(default, field.attribute))
        if field.widget == "jsonl":
            assert control["type"] == "file" and expected == "" and not getattr(default, field.attribute)
        elif field.widget == "choice":
            assert control["tag"] in ("select", "radio") and control["value"] == expected, field.name
        else:
            assert control["placeholder"] == expected, (field.name, control["placeholder"], expected)
        assert json.loads(control["data-defaults"])[name] == expected, field.name
        if field.widget != "jsonl":
            shown[field.name] = expected

    if kind.engines_check is not None:  # e.g. the router policy comparison: two chatting engines in the pool
        Engine.objects.create(name="second", base_url="http://engine-second:8000", role=Engine.Role.CHAT)
    assert learner.post("/bench/", {"kind": name}).status_code == 302
    job = BenchJob.objects.get(kind=name)
    assert _without_seed(kinds.config_for(job.kind, job.config)) == _without_seed(default)
    assert job.total_requests == default.total_requests
    job.status = BenchJob.Status.DONE  # a learner has one run waiting at most: this one is out of the way
    job.save(update_fields=["status"])
    # What the form shows reads back as the same settings.
    assert learner.post("/bench/", {"kind": name, **shown}).status_code == 302
    again = BenchJob.objects.filter(kind=name).latest("pk")
    assert _without_seed(kinds.config_for(again.kind, again.config)) == _without_seed(default)


def test_every_kinds_total_is_its_configs_and_unknown_kinds_are_refused_at_the_kind_field() -> None:
    for kind in kinds.registry.runnable_kinds():
        config = kinds.config_for(kind.name, {})
        assert config == kind.default() and config.total_requests > 0
    with pytest.raises(configs.ConfigError) as caught:
        kinds.config_for("telepathy", {})
    assert caught.value.field == "kind"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(dataclasses.replace(kinds.get("speed"), label="another speed"))


# --- a kind that only the registry knows ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PingConfig:
    pings: int = 3
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.pings

    def longest_requests(self) -> list[tuple[str, int]]:
        return []


async def _ping(config: PingConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    """Sends nothing: a cell per ping, progress after each."""
    cells: list[dict[str, Any]] = []
    for number in range(1, config.pings + 1):
        cells.append({"cell": f"ping {number}", "completed": 1, "failed": 0, "errors": [], "requests": []})
        await reporter.partial({"cells": cells, "partial": True})
        if not await reporter.progress(number, config.pings, f"ping {number}"):
            return {"cells": cells, "cancelled": True}, True
    return {"cells": cells, "cancelled": False, "pings": config.pings, "seed": config.seed}, False


PING = registry.JobKind(
    name="ping",
    label="ping (a test's kind)",
    config_type=PingConfig,
    fields=(registry.Field("pings", "pings", "integer", low=1, high=10),),
    measure=_ping,
)


@pytest.fixture
def ping_kind() -> Iterator[registry.JobKind]:
    registry.register(PING)
    try:
        yield PING
    finally:
        registry.unregister(PING.name)
    assert registry.find(PING.name) is None


@pytest.fixture
def scripted_engine(settings: Any) -> Iterator[str]:
    with scripted.serve(scripted.Script(delay_s=0.001)) as url:
        settings.VLLM_BASE_URL, settings.VLLM_MODEL = url, ""
        yield url


@pytest.mark.django_db
def test_a_kind_registered_only_in_the_registry_runs_from_the_form_to_done(
    ping_kind: registry.JobKind, scripted_engine: str, learner: Client
) -> None:
    controls = _controls(learner.get("/bench/", {"kind": "ping"}).content.decode())
    assert controls["kind"]["value"] == "ping" and controls["pings"]["placeholder"] == "3"
    assert controls["pings"]["data-kinds"] == "ping"
    refused = learner.post("/bench/", {"kind": "ping", "pings": "11"}).content.decode()
    assert 'data-error-for="pings"' in refused and not BenchJob.objects.exists()
    assert learner.post("/bench/", {"kind": "ping", "pings": "2"}).status_code == 302
    job = BenchJob.objects.get(kind="ping")
    assert job.total_requests == 2 and job.engine_url == scripted_engine
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    assert done.done_requests == done.total_requests == 2
    assert [c["cell"] for c in done.results["cells"]] == ["ping 1", "ping 2"]
    assert done.results["pings"] == 2 and done.results["seed"] == job.config["seed"] and done.results["model"]
    page = learner.get(f"/bench/{job.pk}/").content.decode()
    assert "ping (a test&#x27;s kind)" in page and "export.csv" in page
    assert learner.get(f"/bench/{job.pk}/export.csv").content.decode().count("\r\n") == 1  # no requests: a header


def test_a_kind_registered_only_in_the_registry_runs_from_the_command(
    ping_kind: registry.JobKind, scripted_engine: str, tmp_path: Any
) -> None:
    out = StringIO()
    call_command("bench", "ping", set=["pings=2"], json=tmp_path / "p.json", stdout=out)
    assert out.getvalue().splitlines() == ["ping 1", "ping 2"]
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["kind"] == "ping" and data["results"]["pings"] == 2 and len(data["benchmarks"]) == 2
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="pings"):
        call_command("bench", "ping", set=["pings=0"], stdout=out)
