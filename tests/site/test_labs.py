"""The six labs: auto-checks on scripted results, status, pages, running, handing in, dates."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from bench.models import BenchJob
from labapp.labs import services as lab_services
from labapp.labs.catalog import LABS, Status, state_for, states_for
from labapp.models import Assignment, Classroom, LabSubmission, Membership

QUIET = {"disturbed": False, "extra_requests": 0.0}  # no other traffic on the engine while the cell ran
ANSWERS = [{"id": f"q{n}", "coverage": 0.5} for n in range(3)]

GOOD: dict[int, dict[str, Any]] = {
    1: {
        "cells": [
            {
                "completed": 2,
                "failed": 0,
                "input_tokens": 100,
                "output_tokens": 50,
                "median_ttft_ms": 180.0,
                "median_decode_ms": 2000.0,
            }
            | QUIET,
        ],
        "prefill_speed": 600.0,
        "decode_speed": 25.0,
        "check": {"estimate_s": 4.2, "measured_s": 4.0, "error_pct": 5.0},
    },
    2: {
        "cells": [
            {"completed": 1, "failed": 0, "sweep": "input", "input_tokens": i, "output_tokens": 16} | QUIET
            for i in (100, 400, 800, 1200, 1600)
        ]
        + [
            {"completed": 1, "failed": 0, "sweep": "output", "input_tokens": 100, "output_tokens": o} | QUIET
            for o in (16, 64, 128, 192, 256)
        ],
        "fits": {
            "ttft_vs_input": {"slope": 1.6, "intercept": 40, "r2": 0.99},
            "decode_vs_output": {"slope": 40, "intercept": 5, "r2": 0.999},
            "tpot_by_input": {"100": 40.0, "400": 41.0, "800": 42.0, "1200": 43.0, "1600": 44.0},
            "prefill_speed": 620.0,
            "tpot_ms": 40.0,
        },
    },
    3: {
        "cells": [
            {"completed": 8, "failed": 0, "request_throughput": 0.5, "median_tpot_ms": 40} | QUIET,
            {"completed": 8, "failed": 0, "request_throughput": 1.4, "median_tpot_ms": 70} | QUIET,
        ],
        "slo": {"ttft_ms": 3000.0, "tpot_ms": 200.0, "share": 0.9},
        "best_level": 4,
    },
    4: {
        "cells": [
            {"completed": 2, "failed": 0, "median_tpot_ms": 40, "chunk_size": 500, "top_k": 1}
            | {"median_context_tokens": 150, "median_output_tokens": 24, "median_ttft_ms": 350}
            | QUIET,
            {"completed": 2, "failed": 0, "median_tpot_ms": 44, "chunk_size": 500, "top_k": 5}
            | {"median_context_tokens": 750, "median_output_tokens": 24, "median_ttft_ms": 1370}
            | QUIET,
        ],
        "fits": {
            "500": {"slope": 1.7, "intercept": 100, "r2": 0.98},
            "1000": {"slope": 1.6, "intercept": 90, "r2": 0.97},
        },
    },
    5: {
        "cells": [
            {"completed": 2, "failed": 0, "cell": "cold", "median_ttft_ms": 2400, "median_cached_tokens": 0} | QUIET,
            {"completed": 2, "failed": 0, "cell": "warm", "median_ttft_ms": 110, "median_cached_tokens": 1536} | QUIET,
            {
                "completed": 2,
                "failed": 0,
                "cell": "other_question",
                "median_ttft_ms": 300,
                "median_cached_tokens": 1408,
            }
            | QUIET,
            {"completed": 2, "failed": 0, "cell": "reordered", "median_ttft_ms": 1900, "median_cached_tokens": 128}
            | QUIET,
        ],
        "warm_speedup": 21.8,
    },
    6: {
        "cells": [
            {"completed": 3, "failed": 0, "cell": cell, "max_tokens": cap, "median_output_tokens": tokens}
            | {"median_decode_ms": 70.0 * tokens, "answer_coverage": coverage}
            | QUIET
            | {"answers": [a | {"answer": f"{tokens} 토큰의 답"} for a in ANSWERS]}  # a cap changes what it cuts
            # one row per question, in the answers' order: the brief variant is compared question by question
            # the two parts of each request's time, and whether it reached its cap (a cap nobody reached did nothing)
            | {
                "requests": [
                    {
                        "success": True,
                        "output_tokens": tokens,
                        "ttft": 2.0,
                        "decode_time": 0.07 * tokens,
                        "e2el": 2 + 0.07 * tokens,
                    }
                    for _ in ANSWERS
                ],
                "capped": 3 if tokens == cap else 0,
            }
            for cell, cap, tokens, coverage in (
                ("normal", 160, 150, 0.5),
                ("brief", 160, 20, 0.45),
                ("cap_16", 16, 16, 0.2),
                ("cap_32", 32, 32, 0.4),
                ("cap_64", 64, 64, 0.4),
                ("cap_128", 128, 128, 0.5),
            )
        ],
        "time_saved_pct": 70.0,
        "enough_cap": 32,
    },
}


@pytest.mark.parametrize("number", sorted(GOOD))
def test_good_results_pass_every_check_and_a_broken_one_fails_by_name(number: int) -> None:
    lab = LABS[number]
    checks = lab.checks(GOOD[number], {})
    assert checks and all(c.passed for c in checks), [c for c in checks if not c.passed]
    empty = lab.checks({"cells": []}, {})
    assert not all(c.passed for c in empty) and all(c.name and c.message is not None for c in empty)


def test_a_lab1_estimate_off_by_more_than_15_percent_fails_with_the_numbers() -> None:
    results = GOOD[1] | {"check": {"estimate_s": 5.0, "measured_s": 4.0, "error_pct": 25.0}}
    failing = [c for c in LABS[1].checks(results, {}) if not c.passed]
    assert len(failing) == 1 and "15%" in failing[0].name and "25.0" in failing[0].message


def test_lab4_fails_when_ttft_does_not_rise_with_context() -> None:
    flat = GOOD[4] | {"fits": {"500": {"slope": -0.1, "intercept": 100, "r2": 0.1}}}
    assert [c.passed for c in LABS[4].checks(flat, {})] == [True, False, True, True, True]


def _job(user: User, number: int, status: str = "done", results: dict[str, Any] | None = None) -> BenchJob:
    return BenchJob.objects.create(
        owner=user, kind=LABS[number].job_kind, engine_url="http://e", status=status, lab=number,
        results=GOOD[number] if results is None else results,
    )  # fmt: skip


@pytest.mark.django_db
def test_status_goes_from_not_started_to_submitted(django_assert_max_num_queries: Any) -> None:
    learner = User.objects.create(username="l1")
    assert state_for(learner.pk, 1).status == Status.NOT_STARTED
    _job(learner, 1, status="running", results={})
    assert state_for(learner.pk, 1).status == Status.IN_PROGRESS
    _job(learner, 1, results=GOOD[1] | {"check": {"error_pct": 40.0}})
    assert state_for(learner.pk, 1).status == Status.IN_PROGRESS  # finished, a check failed
    _job(learner, 1)
    state = state_for(learner.pk, 1)
    assert state.status == Status.PASSED and state.key_numbers["prefill tok/s"] == 600.0
    lab_services.lab_submit(user=learner, number=1, reflection="프리필이 24배 빠릅니다.")
    assert state_for(learner.pk, 1).status == Status.SUBMITTED
    many = [User.objects.create(username=f"m{i}") for i in range(30)]
    for user in many[:10]:
        _job(user, 2)
    with django_assert_max_num_queries(3):
        states = states_for([u.pk for u in many])
    assert len(states) == 30 * 6 and states[(many[0].pk, 2)].status == Status.PASSED


@pytest.mark.django_db
def test_handing_in_needs_an_answer_and_a_finished_run_and_respects_the_class_dates() -> None:
    learner = User.objects.create(username="l2")
    with pytest.raises(lab_services.SubmitError, match="답을 적어"):
        lab_services.lab_submit(user=learner, number=4, reflection="  ")
    with pytest.raises(lab_services.SubmitError, match="실행하세요"):
        lab_services.lab_submit(user=learner, number=4, reflection="답")
    _job(learner, 4)
    room = Classroom.objects.create(name="A", join_code="A1")
    Membership.objects.create(classroom=room, user=learner)
    now = timezone.now()
    assignment = Assignment.objects.create(
        classroom=room, lab=4, opens_at=now + timedelta(days=1), due_at=now + timedelta(days=2)
    )
    with pytest.raises(lab_services.SubmitError, match="열립니다"):
        lab_services.lab_submit(user=learner, number=4, reflection="답")
    Assignment.objects.filter(pk=assignment.pk).update(
        opens_at=now - timedelta(days=2), due_at=now - timedelta(days=1), late_rule="refuse"
    )
    with pytest.raises(lab_services.SubmitError, match="마감"):
        lab_services.lab_submit(user=learner, number=4, reflection="답")
    Assignment.objects.filter(pk=assignment.pk).update(late_rule="accept")
    done = lab_services.lab_submit(user=learner, number=4, reflection="문맥이 길수록 TTFT가 늘어납니다.")
    assert done.created and done.submission.late and done.submission.passed
    assert done.submission.key_numbers["ms/token (500)"] == 1.7
    again = lab_services.lab_submit(user=learner, number=4, reflection="고친 답")
    assert not again.created and LabSubmission.objects.get().reflection == "고친 답"


@pytest.mark.django_db
def test_the_lab_pages_run_show_checks_and_keep_a_refused_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.management import call_command

    from bench import services

    call_command("load_chapter", verbosity=0)
    learner = User.objects.create(username="l3")
    client = Client()
    client.force_login(learner)
    listing = client.get("/labs/").content.decode()
    assert listing.count('data-status="not_started"') == 6
    created: list[dict[str, Any]] = []

    def job_create(**kw: Any) -> BenchJob:
        created.append(kw)
        return _job(learner, 1, "queued", {})

    monkeypatch.setattr(services, "job_create", job_create)
    assert client.post("/labs/1/run/").status_code == 302
    assert created[0]["kind"] == "speed" and created[0]["owner"] == learner
    page = client.get("/labs/1/").content.decode()
    assert 'id="job-state"' in page and "disabled" in page.split('id="run-lab"')[1][:20]
    response = client.post("/labs/1/submit/", {"reflection": "아직 결과 없음"}, follow=True)
    assert "실행하세요" in response.content.decode() and "아직 결과 없음" in response.content.decode()
    _job(learner, 1)
    page = client.get("/labs/1/").content.decode()
    assert page.count('data-passed="true"') == 5 and 'id="job-chart-data"' in page
    assert client.post("/labs/1/submit/", {"reflection": "비율은 24배"}, follow=True).status_code == 200
    assert 'data-status="submitted"' in client.get("/labs/1/").content.decode()
    assert client.get("/labs/7/").status_code == 404
    home = client.get("/").content.decode()
    assert 'id="progress"' in home and 'data-status="submitted"' in home
    other = Client()
    other.force_login(User.objects.create(username="l4"))
    assert 'data-status="not_started"' in other.get("/labs/1/").content.decode()  # nobody else's runs


@pytest.mark.django_db
def test_a_learner_without_speeds_is_told_to_run_this_lab_on_lab_1_and_lab_1_first_on_the_others() -> None:
    client = Client()
    client.force_login(User.objects.create(username="new"))
    first = client.get("/labs/1/").content.decode()
    assert "이 실습을 한 번 실행하면 그 뒤로는 내 속도로" in first and "실습 1을 먼저" not in first
    second = client.get("/labs/2/").content.decode()
    assert "실습 1을 먼저 하면 내 속도로" in second and "이 실습을 한 번 실행하면" not in second
    client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert "Run this lab once and from then on" in client.get("/labs/1/").content.decode()
