"""The chapter's two widgets: where they appear, the learner's speeds, the English labels."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from bench.models import BenchJob
from rag.vllm import client as vllm_client

pytestmark = pytest.mark.django_db

SPEEDS_SCRIPT = re.compile(r'<script id="learner-speeds" type="application/json">(.*?)</script>', re.S)
MY_SPEEDS_BUTTON = re.compile(r'<button type="button" id="est-my-speeds"[^>]*>')


@pytest.fixture
def chapter() -> None:
    call_command("load_chapter")


def signed_in(username: str) -> tuple[Client, User]:
    user = User.objects.create(username=username)
    client = Client()
    client.force_login(user)
    return client, user


def learner_speeds_in(page: str) -> object:
    found = SPEEDS_SCRIPT.search(page)
    assert found, "no learner-speeds json_script on the page"
    return json.loads(found[1])


def test_each_widget_appears_only_on_its_own_section(chapter: None, client: Client) -> None:
    estimator = client.get("/chapter/estimator/").content.decode()
    kv_cache = client.get("/chapter/kv-cache/").content.decode()
    assert 'id="estimator"' in estimator and 'id="kv-stepper"' not in estimator
    assert 'id="kv-stepper"' in kv_cache and 'id="estimator"' not in kv_cache
    for page in (estimator, kv_cache):
        assert "lab/widgets.js" in page and "lab/widgets.css" in page
    for slug in ("prefill-decode", "rag-cautions", "measured-figures"):
        other = client.get(f"/chapter/{slug}/").content.decode()
        assert "widgets.js" not in other and 'id="estimator"' not in other and 'id="kv-stepper"' not in other


def test_the_estimator_has_four_labelled_inputs_and_the_three_example_rows(chapter: None, client: Client) -> None:
    page = client.get("/chapter/estimator/").content.decode()
    for field in ("est-prompt", "est-output", "est-prefill-speed", "est-decode-speed"):
        assert f'<label for="{field}">' in page and f'id="{field}"' in page
    rows = re.findall(r'<tr data-prompt="(\d+)" data-output="(\d+)">', page)
    assert rows == [("100", "50"), ("1500", "50"), ("100", "500")]
    assert page.count("이 행 불러오기</button>") == 3
    assert 'data-example-prefill="1000" data-example-decode="50"' in page
    assert 'aria-live="polite"' in page


def test_a_learner_with_a_finished_speed_probe_gets_their_speeds_and_an_enabled_button(chapter: None) -> None:
    client, user = signed_in("measured")
    BenchJob.objects.create(
        owner=user,
        kind="speed",
        lab=1,  # a run made for Lab 1 (a /bench/ job does not count)
        status="done",
        engine_url=vllm_client.base_url(),  # the engine the page estimates for (the learner picked no other)
        results={"prefill_speed": 600.0, "decode_speed": 25.0, "cells": []},
    )
    page = client.get("/chapter/estimator/").content.decode()
    speeds = learner_speeds_in(page)
    assert isinstance(speeds, dict)
    assert (speeds["prefill"], speeds["decode"]) == (600.0, 25.0)
    assert "실습 1" in speeds["basis"]
    button = MY_SPEEDS_BUTTON.search(page)
    assert button and "disabled" not in button[0]
    assert "프리필 600.0 토큰/초, 디코드 25.0 토큰/초" in page


def test_without_a_finished_speed_probe_the_button_is_disabled_and_points_to_lab_1(chapter: None) -> None:
    client, user = signed_in("unmeasured")
    BenchJob.objects.create(owner=user, kind="speed", status="failed", engine_url="x", results={})
    someone_else = User.objects.create(username="someone-else")
    BenchJob.objects.create(
        owner=someone_else,
        kind="speed",
        lab=1,
        status="done",
        engine_url=vllm_client.base_url(),  # the same engine: only the owner decides
        results={"prefill_speed": 900.0, "decode_speed": 30.0, "cells": []},
    )
    page = client.get("/chapter/estimator/").content.decode()
    assert learner_speeds_in(page) is None
    button = MY_SPEEDS_BUTTON.search(page)
    assert button and " disabled" in button[0]
    assert 'href="/bench/"' in page and "실습 1 속도 측정" in page
    assert "900.0" not in page


def test_the_kv_stepper_holds_four_prompt_cells_then_three_answer_cells(chapter: None, client: Client) -> None:
    page = client.get("/chapter/kv-cache/").content.decode()
    cells = re.findall(
        r'<li class="kv-cell (kv-prompt|kv-answer)" data-step="(\d)" hidden>'
        r'<span class="token" lang="ko">([^<]+)<',
        page,
    )
    assert cells == [
        ("kv-prompt", "1", "연차"),
        ("kv-prompt", "1", "는"),
        ("kv-prompt", "1", "며칠"),
        ("kv-prompt", "1", "인가요"),
        ("kv-answer", "2", "15"),
        ("kv-answer", "3", "일"),
        ("kv-answer", "4", "입니다"),
    ]
    for label in (">처음<", ">한 단계<", ">재생<", "캐시 칸: {n} (입력 {p} + 출력 {k})"):
        assert label in page
    assert page.count('role="status"') == 1


def test_the_english_switch_shows_the_widgets_in_english(chapter: None, client: Client) -> None:
    client.cookies["django_language"] = "en"  # what the language switch sets
    estimator = client.get("/chapter/estimator/").content.decode()
    kv_cache = client.get("/chapter/kv-cache/").content.decode()
    assert 'lang="en"' in estimator
    for label in ("Fill in my Lab 1 speeds", "Load this row", "Input (prompt) tokens", "Prefill speed (tokens/s)"):
        assert label in estimator, label
    assert "Run the Lab 1 speed probe" in estimator
    for label in (">Start over<", ">One step<", ">Play<", "Cache cells: {n} (input {p} + output {k})"):
        assert label in kv_cache, label
    for korean in ("내 실습 1 속도 넣기", "이 행 불러오기", "한 단계", "캐시 칸"):
        assert korean not in estimator + kv_cache, korean
