"""Issue 29's router policy comparison (bench.kinds.router_policy): its settings, its arithmetic,
the engines it needs, and the whole job on two scripted replicas behind the real vllm-router."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bench import configs, kinds
from bench.kinds import router_policy
from bench.kinds.router_policy import RouterPolicyConfig, Turn
from bench.models import Engine
from bench.reporting import ProgressReporter
from rag.vllm.records import RequestRecord
from tests import aio


def test_defaults_compare_round_robin_with_consistent_hash() -> None:
    config = kinds.config_for("router_policy", {})
    assert config == RouterPolicyConfig()
    assert config.policy_list == ["round_robin", "consistent_hash"]
    assert config.total_requests == 2 * 6 * 4


def test_policies_read_any_list_of_known_ones() -> None:
    config = kinds.config_for("router_policy", {"policies": " cache_aware, power_of_two ,round_robin", "turns": "2"})
    assert config.policy_list == ["cache_aware", "power_of_two", "round_robin"]
    assert config.total_requests == 3 * 6 * 3


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"policies": "round_robin,random"}, "policies", "알 수 없는 라우팅 정책: random"),
        ({"policies": "round_robin,round_robin"}, "policies", "두 번"),
        ({"policies": "consistent_hash"}, "policies", "두 개 이상"),
        ({"conversations": "1"}, "conversations", ""),
        ({"turns": "0"}, "turns", ""),
        ({"max_tokens": "0"}, "max_tokens", ""),
    ],
)
def test_bad_settings_are_refused_in_words_naming_the_field(raw: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(configs.ConfigError) as caught:
        kinds.config_for("router_policy", raw)
    assert caught.value.field == field
    assert words in caught.value.message


def test_the_longest_turn_is_checked_against_the_engine() -> None:
    with pytest.raises(configs.ConfigError) as caught:
        kinds.config_for("router_policy", {"turns": "10"}, max_model_len=512)
    assert caught.value.field == "turns"


def _turn(
    conversation: int, turn: int, engine: int | None, *, cached: int, prompt: int = 100, ttft: float = 0.1
) -> Turn:
    record = RequestRecord(success=True, prompt_tokens=prompt, cached_tokens=cached, t_send=0.0, text_chunk_at=[ttft])
    return Turn(conversation, turn, record, engine)


def test_a_policys_cell_splits_first_turns_from_follow_ups() -> None:
    turns = [
        _turn(0, 0, 0, cached=0, ttft=0.2), _turn(0, 1, 0, cached=80, ttft=0.05), _turn(0, 2, 1, cached=0, ttft=0.3),
        _turn(1, 0, 1, cached=0, ttft=0.4), _turn(1, 1, 1, cached=60, ttft=0.1), _turn(1, 2, None, cached=90, ttft=0.1),
    ]  # fmt: skip
    cell = router_policy.policy_cell("round_robin", turns, 2)
    assert cell["first_hit_rate"] == 0.0
    assert cell["follow_up_hit_rate"] == pytest.approx((80 + 0 + 60 + 90) / 400)
    assert cell["first_ttft_p50_ms"] == pytest.approx(300)
    assert cell["follow_up_ttft_p50_ms"] == pytest.approx(100)
    assert cell["per_engine"] == [2, 3] and cell["unattributed"] == 1
    assert cell["balance"] == pytest.approx(2 / 3)
    assert cell["stuck_share"] == pytest.approx(2 / 3)  # 0→0, 0→1, 1→1; the unattributed turn not judged
    assert [row["engine"] for row in cell["requests"]] == [0, 0, 1, 1, 1, None]


def test_the_engine_that_served_a_request_is_the_one_whose_count_rose() -> None:
    assert router_policy.served_by([3.0, 5.0], [3.0, 6.0]) == 1
    assert router_policy.served_by([3.0, 5.0], [3.0, 5.0]) is None
    assert router_policy.served_by([3.0, 5.0], [4.0, 6.0]) is None  # other traffic: not attributed
    assert router_policy.served_by([float("nan"), 5.0], [float("nan"), 6.0]) == 1


def _results(sticky: float, spread: float, per_engine: list[int]) -> dict[str, Any]:
    return {
        "cells": [
            {"cell": "round_robin", "follow_up_hit_rate": spread, "per_engine": per_engine,
             "balance": min(per_engine) / max(per_engine)},
            {"cell": "consistent_hash", "follow_up_hit_rate": sticky, "per_engine": [8, 16], "balance": 0.5},
        ]
    }  # fmt: skip


def test_checks_say_what_was_compared() -> None:
    passed = router_policy.checks(_results(0.82, 0.58, [12, 12]))
    assert [c.passed for c in passed] == [True, True]
    assert "0.82, 라운드 로빈 0.58" in passed[0].message
    failed = router_policy.checks(_results(0.5, 0.6, [20, 4]))
    assert [c.passed for c in failed] == [False, False]
    assert failed[0].advice and failed[1].advice
    assert kinds.get("router_policy").own_checks(_results(0.82, 0.58, [12, 12]))[0].passed


def test_a_router_that_names_another_policy_than_asked_fails_a_check() -> None:
    results = _results(0.82, 0.58, [12, 12])
    for cell in results["cells"]:
        cell["policy_said"] = cell["cell"]
    assert [c.passed for c in router_policy.checks(results)] == [True, True, True]
    results["cells"][0]["policy_said"] = "cache_aware"
    said = router_policy.checks(results)[2]
    assert not said.passed and "cache_aware" in said.message and said.advice


def test_checks_speak_english_when_asked() -> None:
    from django.utils import translation

    with translation.override("en"):
        found = router_policy.checks(_results(0.82, 0.58, [12, 12]))
    assert "follow-up" in found[0].name.lower() and "0.82" in found[0].message


def test_a_pool_with_one_chatting_engine_is_refused_naming_what_is_there(db: None, settings: Any) -> None:
    settings.VLLM_BASE_URL, settings.LAB_ENGINES = "http://engine-a:8000", 1
    with pytest.raises(configs.ConfigError) as caught:
        kinds.get("router_policy").check_engines("http://engine-a:8000")
    assert "2대 이상" in caught.value.message and "1대" in caught.value.message
    Engine.objects.create(name="measurer", base_url="http://engine-m:8000", role=Engine.Role.MEASURE)
    with pytest.raises(configs.ConfigError):
        kinds.get("router_policy").check_engines("http://engine-a:8000")
    Engine.objects.create(name="chatter", base_url="http://engine-c:8000", role=Engine.Role.CHAT)
    kinds.get("router_policy").check_engines("http://engine-a:8000")
    assert [url for url, _name in router_policy.pool_engines("http://engine-a:8000")] == [
        "http://engine-a:8000",
        "http://engine-c:8000",
    ]


def test_other_kinds_need_no_particular_engines(db: None) -> None:
    kinds.get("speed").check_engines("http://nowhere:8000")


@pytest.mark.integration
def test_the_whole_job_finds_follow_ups_cached_more_often_with_consistent_hash(
    prefix_replicas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_policy, "pool_engines", lambda base: [(u, f"replica {u[-5:]}") for u in prefix_replicas])
    config = kinds.config_for("router_policy", {"conversations": "6", "turns": "3"})
    results, cancelled = aio.run(
        kinds.measure(
            "router_policy", config, base_url=prefix_replicas[0], model="fake-model",
            reporter=ProgressReporter(aio.keep_going),
        )
    )  # fmt: skip
    assert not cancelled
    by = {c["cell"]: c for c in results["cells"]}
    print({p: (c["follow_up_hit_rate"], c["per_engine"], c["follow_up_ttft_p50_ms"]) for p, c in by.items()})
    assert all(c["completed"] == 24 and c["unattributed"] == 0 for c in by.values())
    assert by["consistent_hash"]["follow_up_hit_rate"] > by["round_robin"]["follow_up_hit_rate"]
    assert by["round_robin"]["balance"] == 1.0
    assert by["consistent_hash"]["stuck_share"] == 1.0
    assert all(c["policy_said"] == c["cell"] for c in by.values())  # each router named its policy itself
    assert [c.passed for c in router_policy.checks(results)] == [True, True, True]
    for url in prefix_replicas:
        assert httpx.get(f"{url}/health").status_code == 200


@pytest.mark.django_db
def test_the_form_refuses_a_submit_with_one_chatting_engine_and_makes_no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from bench import views
    from bench.models import BenchJob

    monkeypatch.setattr(views, "engine_max_model_len", lambda: 8192)
    learner = Client()
    learner.force_login(User.objects.create(username="router-learner"))
    page = learner.post("/bench/", {"kind": "router_policy"})
    assert page.status_code == 200 and not BenchJob.objects.filter(kind="router_policy").exists()
    assert "2대 이상 필요합니다" in page.content.decode()


@pytest.mark.django_db
def test_a_finished_runs_page_names_every_engine_its_routers_spread_over() -> None:
    """Not only the pool's first engine (the job's own address): "측정한 엔진" lists those the run measured."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.utils import timezone

    from bench.models import BenchJob

    owner = User.objects.create(username="router-owner")
    engines = ["http://127.0.0.1:8602", "http://127.0.0.1:8603"]
    job = BenchJob.objects.create(
        owner=owner, kind="router_policy", config={}, engine_url=engines[0], status="done", started_at=timezone.now(),
        results={"cells": [], "engines": engines, "cancelled": False},
    )  # fmt: skip
    client = Client()
    client.force_login(owner)
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert "측정한 엔진: 라우터를 거친 엔진 2대: http://127.0.0.1:8602, http://127.0.0.1:8603" in page
    client.cookies["django_language"] = "en"
    english = client.get(f"/bench/{job.pk}/").content.decode()
    assert "2 engines through the router: http://127.0.0.1:8602, http://127.0.0.1:8603" in english
