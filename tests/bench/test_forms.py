"""The job form of /bench/: fixed choices as radios or a select, a help line for every setting."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench.forms import HELP, RADIOS_MOST, JobForm
from bench.kinds import registry


def test_fixed_choices_are_radios_or_a_select_never_free_text() -> None:
    form = JobForm(shown="load")
    for name, (field, _users) in form.settings.items():
        widget = form.fields[name].widget
        if field.widget == "choice":
            expected = "radioselect" if len(field.choices) <= RADIOS_MOST else "select"
            assert widget.__class__.__name__.lower() == expected, name
    assert form.fields["mode"].widget.__class__.__name__ == "RadioSelect"
    assert form["mode"].initial == "concurrency"


def test_every_setting_explains_itself() -> None:
    form = JobForm()
    for kind in registry.all_kinds():
        for field in kind.fields:
            assert str(form.fields[field.name].help_text), f"{kind.name}.{field.name} has no help text"
    assert "ms" in str(HELP["slo_ttft_ms"]) or "밀리초" in str(HELP["slo_ttft_ms"])


def test_a_radio_choice_is_read_like_the_select_was() -> None:
    form = JobForm({"kind": "load", "mode": "rate", "rates": "1, 2"}, max_model_len=lambda: 4096)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["config"]["mode"] == "rate"


@pytest.mark.django_db
def test_the_page_draws_radios_with_the_kinds_that_read_them_and_help_lines() -> None:
    client = Client()
    client.force_login(User.objects.create(username="former"))
    page = client.get("/bench/?kind=load").content.decode()
    assert 'type="radio" name="mode" value="rate"' in page
    assert 'data-kinds="load"' in page and 'id="id_mode_help"' in page
    assert '<fieldset class="radios" id="id_chunk_size">' in page  # read by several kinds: one group


def test_settings_of_another_load_mode_or_workload_say_when_they_are_shown() -> None:
    form = JobForm(shown="load")

    def when(name: str) -> dict[str, object]:
        found: dict[str, object] = json.loads(form.fields[name].widget.attrs.get("data-when", "{}"))
        return found

    assert when("rates") == {"load": {"field": "mode", "values": ["rate"]}}
    assert when("ramp_requests")["load"] == {"field": "mode", "values": ["ramp"]}
    assert when("prefix_tokens")["load"] == {"field": "workload", "values": ["shared_prefix"]}
    # top-k depends on the workload only for a load job: Labs 4 and 6 always read it.
    assert set(when("top_k")) == {"load"} and "retrieval" not in when("top_k")
    assert when("mode") == {} and when("workload") == {}
    # A hidden setting is still read: a bad value in it is an error, not silently dropped.
    bad = JobForm({"kind": "load", "mode": "concurrency", "rates": "0"})
    assert not bad.is_valid() and "rates" in bad.errors
