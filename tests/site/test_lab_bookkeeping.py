"""Predict, then measure; bookkeeping that matches what happened; the lab page's run card. One test per rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone, translation

from bench import engines
from bench.kinds.checks import Check
from bench.models import BenchJob
from labapp.labs import predict
from labapp.labs import selectors as lab_selectors
from labapp.labs import services as lab_services
from labapp.labs.catalog import LABS, Lab, Status, state_for
from labapp.models import Assignment, Classroom, LabSubmission, Membership
from tests.site.test_labs import GOOD

ENGINE = "http://e"


def _job(user: User, number: int, results: dict[str, Any] | None = None, **extra: Any) -> BenchJob:
    fields: dict[str, Any] = {"status": "done", "lab": number, "engine_url": ENGINE} | extra
    return BenchJob.objects.create(
        owner=user, kind=LABS[number].job_kind, results=GOOD[number] if results is None else results, **fields
    )


@pytest.fixture
def learner(db: None, monkeypatch: pytest.MonkeyPatch, settings: Any) -> User:
    settings.LAB_MODE = "class"
    monkeypatch.setattr(engines, "chosen_url", lambda session: ENGINE)
    return User.objects.create(username="p1")


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _fake_create(monkeypatch: pytest.MonkeyPatch, user: User) -> list[dict[str, Any]]:
    from bench import services

    made: list[dict[str, Any]] = []

    def job_create(**kw: Any) -> BenchJob:
        made.append(kw)
        return _job(user, 1, {}, status="queued", prediction=kw.get("prediction"))

    monkeypatch.setattr(services, "job_create", job_create)
    return made


def test_the_run_form_saves_the_prediction_and_the_lab_with_the_run(
    learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _fake_create(monkeypatch, learner)
    assert _client(learner).post("/labs/1/run/", {"prediction": "5.2"}).status_code == 302
    assert made[0]["lab"] == 1 and made[0]["prediction"]["value"] == 5.2 and made[0]["prediction"]["unit"] == "s"
    assert "800/100" in made[0]["prediction"]["what"] and made[0]["prediction"]["made_at"]
    BenchJob.objects.filter(owner=learner).update(status="done")  # one waiting run at most: the first has run
    assert _client(learner).post("/labs/1/run/", {"prediction": ""}).status_code == 302
    assert made[1]["lab"] == 1 and made[1]["prediction"] is None  # optional


def test_a_bad_prediction_starts_nothing_and_keeps_what_was_typed(
    learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _fake_create(monkeypatch, learner)
    page = _client(learner).post("/labs/1/run/", {"prediction": "빠름"}, follow=True).content.decode()
    assert not made and "숫자로 적어 주세요" in page and 'value="빠름"' in page
    page = _client(learner).post("/labs/1/run/", {"prediction": "-3"}, follow=True).content.decode()
    assert not made and "사이의 수여야 합니다" in page


def test_a_jobs_prediction_is_compared_with_what_that_job_measured(learner: User) -> None:
    job = _job(learner, 1, prediction={"value": 5.0, "unit": "s", "what": "800/100", "made_at": "x"})
    found = predict.compare(job)
    assert found is not None and found.measured == 4.0 and found.error == 1.0 and found.error_pct == 25.0
    page = _client(learner).get("/labs/1/").content.decode()
    assert 'data-predicted="5.0"' in page and "+1 s (+25.0%)" in page


def test_the_prediction_box_holds_only_what_i_typed_and_the_estimate_is_shown_apart(learner: User) -> None:
    page = _client(learner).get("/labs/1/").content.decode()
    assert 'name="prediction" value=""' in page  # no speeds yet: the chapter's example shown, nothing filled
    assert "800 ÷ 1000 + 100 ÷ 50 = 0.8 + 2 = 2.8 s" in page
    _job(learner, 1)  # prefill 600 tok/s, decode 25 tok/s
    page = _client(learner).get("/labs/1/").content.decode()
    # The estimate is the estimator's, under its name; the box is the learner's (nothing typed yet: empty).
    assert 'name="prediction" value=""' in page and "800 ÷ 600 + 100 ÷ 25 = 1.33 + 4 = 5.33 s" in page
    assert "(5 × 1000 + 200) ÷ 600 tok/s ≈ 8667 ms" in _client(learner).get("/labs/4/").content.decode()


def test_my_prediction_stays_on_screen_through_the_run_and_beside_the_result_apart_from_the_estimators(
    learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job(learner, 1)  # speeds: the estimator says 5.33 s
    made = _fake_create(monkeypatch, learner)
    assert _client(learner).post("/labs/1/run/", {"prediction": "7.5"}).status_code == 302
    kept = made[0]["prediction"]
    assert kept["value"] == 7.5 and kept["estimate"] == pytest.approx(5.33) and "5.33 s" in kept["formula"]
    running = BenchJob.objects.filter(status="queued").get()
    page = _client(learner).get("/labs/1/").content.decode()
    card = page.split('id="lab-run"')[1].split('id="lab-results"')[0]
    shown = card.split('id="running-prediction"')[1].split("</p>")[0]  # the running state shows it, as mine
    assert 'data-predicted="7.5"' in shown and "내 예측" in shown and "<b>7.50 s</b>" in shown
    assert 'data-estimate="5.33"' in shown and "추정기가 낸 값" in shown and "<b>5.33 s</b>" in shown
    assert 'name="prediction" value="7.5"' in card  # the box still holds what I typed, not the estimate
    running.status, running.results = "done", GOOD[1]  # measured 4 s
    running.save()
    page = _client(learner).get("/labs/1/").content.decode()
    results = page.split('id="lab-results"')[1].split('id="lab-submit"')[0]
    beside = results.split('class="prediction"')[1].split("</p>")[0]
    assert 'data-predicted="7.5"' in beside and 'data-measured="4.0"' in beside and "<b>7.50 s</b>" in beside
    assert "추정기가 낸 값" in beside and "<b>5.33 s</b>" in beside and 'id="running-prediction"' not in page
    assert 'name="prediction" value="7.5"' in page  # after the run too: mine, never replaced by the estimator's
    reader = _client(learner)
    reader.cookies["django_language"] = "en"
    english = reader.get("/labs/1/").content.decode().split('id="lab-results"')[1].split('id="lab-submit"')[0]
    assert "My prediction" in english and "The estimator's value" in english


def test_a_hand_in_shows_its_own_jobs_checks_not_a_later_runs(learner: User) -> None:
    handed = _job(learner, 1, GOOD[1] | {"check": {"estimate_s": 6.0, "measured_s": 4.0, "error_pct": 50.0}})
    lab_services.lab_submit(user=learner, number=1, reflection="추정이 빗나갔습니다")
    later = _job(learner, 1)  # passes every check
    submission = LabSubmission.objects.get()
    assert submission.job == handed and not submission.passed
    state = state_for(learner.pk, 1)
    assert state.shown_job == handed and state.checked_job == later and state.newer_run
    assert [c.passed for c in state.shown_checks].count(False) == 1 and all(c.passed for c in state.checks)
    row = _client(learner).get("/labs/").content.decode().split('data-lab="1"')[1].split("</tr>")[0]
    assert "✗" in row and f"#{handed.pk}" in row and f"#{later.pk}" not in row
    page = _client(learner).get("/labs/1/").content.decode()
    results, handed_in = page.split('id="lab-results"')[1].split('id="lab-submit"')
    assert f'data-job="{later.pk}"' in results and f'data-job="{handed.pk}"' not in results
    assert f'data-job="{handed.pk}"' in handed_in and 'id="newer-run"' in handed_in


def test_a_lab_passes_only_from_runs_made_for_it(learner: User) -> None:
    _job(learner, 3, lab=None)  # a /bench/ job of the same kind, with passing results
    assert state_for(learner.pk, 3).status == Status.NOT_STARTED
    _job(learner, 3)
    assert state_for(learner.pk, 3).status == Status.PASSED


@pytest.mark.django_db
def test_the_data_migration_marks_only_the_jobs_hand_ins_name() -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("labapp.migrations.0005_lab_jobs_from_hand_ins")
    user = User.objects.create(username="old")
    named, other = _job(user, 4, lab=None), _job(user, 4, lab=None)
    LabSubmission.objects.create(user=user, lab=4, job=named, reflection="r", submitted_at=timezone.now())
    migration.mark_handed_in_jobs(apps, None)
    named.refresh_from_db()
    other.refresh_from_db()
    assert named.lab == 4 and other.lab is None


def test_the_gradebook_shows_each_learners_prediction_error(learner: User) -> None:
    teacher = User.objects.create(username="t1")
    room = Classroom.objects.create(name="예측반", join_code="P1")
    Membership.objects.create(classroom=room, user=teacher, role="instructor")
    Membership.objects.create(classroom=room, user=learner)
    _job(learner, 1, prediction={"value": 3.0, "unit": "s", "what": "", "made_at": "x"})
    page = _client(teacher).get(f"/classes/{room.pk}/results/").content.decode()
    assert 'data-prediction-error="-25.0"' in page and "-25.0%" in page
    csv_text = _client(teacher).get(f"/classes/{room.pk}/results.csv").content.decode("utf-8-sig")
    assert "실습 1: 예측 오차 (%)" in csv_text and "-25.0" in csv_text


def test_the_run_time_comes_from_runs_with_the_same_settings_on_the_same_engine_else_the_estimator(
    learner: User,
) -> None:
    same = lab_services.run_config(1)
    assert lab_selectors.run_time(1, ENGINE, None).seconds is None
    speeds = type("S", (), {"prefill": 1000.0, "decode": 50.0})()
    estimated = lab_selectors.run_time(1, ENGINE, speeds)
    one_round = 0.1 + 1 + 1.5 + 1 + 0.1 + 10 + 0.8 + 2  # each shape's prefill + decode at those speeds
    settings = lab_services.run_settings(1)
    assert estimated.seconds == pytest.approx(one_round * settings.repeats) and "추정기" in estimated.basis
    start = timezone.now() - timedelta(hours=1)
    other = User.objects.create(username="p2")
    # Runs of another shape never set the time: a /bench/ job of the kind, a lab run with other settings,
    # and a run of the same settings on another engine.
    _job(other, 1, lab=None, config=same, started_at=start, finished_at=start + timedelta(seconds=90))
    _job(other, 1, config=same | {"repeats": 9}, started_at=start, finished_at=start + timedelta(seconds=300))
    _job(
        other, 1, config=same, engine_url="http://elsewhere", started_at=start, finished_at=start + timedelta(seconds=7)
    )
    assert lab_selectors.run_time(1, ENGINE, speeds).seconds == pytest.approx(one_round * settings.repeats)
    _job(other, 1, config=same, started_at=start, finished_at=start + timedelta(seconds=40))  # anyone's, same settings
    _job(learner, 1, config=same, started_at=start, finished_at=start + timedelta(seconds=30))
    timed = lab_selectors.run_time(1, ENGINE, speeds)
    assert timed.seconds == 35 and "같은 설정" in timed.basis
    page = _client(learner).get("/labs/1/").content.decode()
    assert page.index('id="run-lab"') < page.index('id="lab-results"') and 'data-seconds="35.0"' in page


def test_a_run_time_the_estimator_cannot_give_says_why_never_just_first_run(learner: User) -> None:
    speeds = type("S", (), {"prefill": 1000.0, "decode": 50.0})()
    first = lab_selectors.run_time(1, ENGINE, None)  # Lab 1 measures the speeds the estimator needs
    unshaped = lab_selectors.run_time(3, ENGINE, speeds)  # the load lab sends its requests at once
    assert first.seconds is None and unshaped.seconds is None
    for said_so in (first.basis, unshaped.basis, lab_selectors.run_time(2, ENGINE, None).basis):
        assert "처음 실행이라" not in said_so and said_so
    assert "속도" in first.basis and "동시에" in unshaped.basis
    assert lab_selectors.run_time(2, ENGINE, speeds).seconds is not None  # the sweep's requests are fixed


@pytest.mark.parametrize("number", [4, 5, 6])
def test_a_rag_lab_estimates_its_first_run_from_lab_1s_speeds_else_says_why_not(learner: User, number: int) -> None:
    page = _client(learner).get(f"/labs/{number}/").content.decode()
    assert 'data-seconds=""' in page and "실습 1을 하면 채워집니다" in page  # no Lab 1 on this engine yet
    _job(learner, 1)  # the learner's speeds on this engine, and no run of this lab
    shapes = LABS[number].declared.shapes(lab_services.run_settings(number))
    assert shapes and all(i > 0 and o > 0 for i, o in shapes)
    estimated = lab_selectors.run_time(number, ENGINE, _speeds(learner))
    assert estimated.seconds is not None and estimated.seconds > 0
    page = _client(learner).get(f"/labs/{number}/").content.decode()
    assert f'data-seconds="{estimated.seconds}"' in page and "약 " in page
    assert "실습 1에서 잰 내 속도" in page and "top-k × 청크 크기로 어림" in page


def _speeds(user: User) -> Any:
    from bench import selectors as bench_selectors

    return bench_selectors.learner_speeds(user, ENGINE)


def test_a_rag_labs_estimate_grows_with_what_its_settings_retrieve() -> None:
    """The reckoned prompt follows top-k × chunk size, so a larger retrieval is estimated slower."""
    from bench.kinds import prefix, retrieval, short

    small, large = retrieval.RetrievalConfig(top_ks=(1,)), retrieval.RetrievalConfig(top_ks=(5,))
    assert sum(i for i, _o in retrieval.request_shapes(large)) > sum(i for i, _o in retrieval.request_shapes(small))
    cold, warm, *_rest = prefix.request_shapes(prefix.PrefixConfig(contexts=1))
    assert cold[0] > warm[0]  # the warm ask prefills only what follows its cached chunks
    variants = short.request_shapes(short.ShortConfig(questions=1, caps=(16,)))
    assert [o for _i, o in variants] == [160, short.ONE_LINE_TOKENS, 16]


def test_a_failed_checks_advice_is_shown_with_a_run_again_button(
    learner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = [Check("조용한 엔진", False, "다른 요청 2개", "다른 사람이 없을 때 다시 실행하세요")]
    monkeypatch.setattr(Lab, "checks", lambda self, results, config: failing)
    _job(learner, 1)
    page = _client(learner).get("/labs/1/").content.decode()
    assert "다른 사람이 없을 때 다시 실행하세요" in page and 'id="rerun-lab"' in page


def test_class_times_carry_their_time_zone_and_the_lab_list_marks_assigned_and_overdue(learner: User) -> None:
    room = Classroom.objects.create(name="서울반", join_code="S1")
    Membership.objects.create(classroom=room, user=learner)
    now = timezone.now()
    Assignment.objects.create(classroom=room, lab=2, opens_at=now - timedelta(days=2), due_at=now - timedelta(days=1))
    Assignment.objects.create(classroom=room, lab=5, opens_at=now - timedelta(days=2), due_at=now + timedelta(days=1))
    listing = _client(learner).get("/labs/").content.decode()
    lab2 = listing.split('data-lab="2"')[1].split("</tr>")[0]
    lab5 = listing.split('data-lab="5"')[1].split("</tr>")[0]
    assert "서울반" in lab2 and "KST" in lab2 and 'data-overdue="true"' in lab2
    assert "서울반" in lab5 and 'data-overdue="true"' not in lab5 and "Asia/Seoul" in listing
    assert "KST" in _client(learner).get("/labs/2/").content.decode().split('id="lab-dates"')[1][:60]
    assert "KST" in _client(learner).get("/classes/").content.decode()


def test_an_empty_class_chart_says_so(learner: User) -> None:
    teacher = User.objects.create(username="t2")
    room = Classroom.objects.create(name="빈반", join_code="E1")
    Membership.objects.create(classroom=room, user=teacher, role="instructor")
    Membership.objects.create(classroom=room, user=learner)
    _job(learner, 1)
    page = _client(teacher).get(f"/classes/{room.pk}/results/").content.decode()
    assert 'id="class-speeds-data"' in page and "아직 끝난 실행이 없어 빠진 차트" in page


def test_the_gradebook_stands_on_stored_outcomes_and_reads_no_results_once_they_are_kept(learner: User) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labapp.labs import outcomes
    from labapp.labs.catalog import states_for

    jobs = [_job(learner, n, prediction={"value": 1.0, "unit": "s"}) for n in (1, 3, 5)]
    with_words = states_for([learner.pk], [1, 3, 5])
    first = states_for([learner.pk], [1, 3, 5], words=False)  # computes the outcomes once and keeps them
    for job in jobs:
        job.refresh_from_db()
        assert outcomes.current(job.lab_summary) and job.lab_summary["checks"]
    with CaptureQueriesContext(connection) as queries:
        again = states_for([learner.pk], [1, 3, 5], words=False)
    assert not any('"results"' in q["sql"] for q in queries.captured_queries)  # not one run's results read
    for key, state in again.items():
        full = with_words[key]
        assert [(c.passed, c.applies) for c in state.checks] == [(c.passed, c.applies) for c in full.checks]
        assert state.status == full.status == first[key].status and state.key_numbers == full.key_numbers
        assert all(c.name == "" for c in state.checks)  # no words: the gradebook shows counts only
    # The prediction's error in the gradebook comes from the stored measurement, the same as from results.
    state = again[(learner.pk, 1)]
    assert predict.compare(state.checked_job, stored=state.summary) == predict.compare(jobs[0])


def test_outcomes_made_by_other_code_are_made_again(learner: User, monkeypatch: pytest.MonkeyPatch) -> None:
    from labapp.labs import outcomes
    from labapp.labs.catalog import states_for

    job = _job(learner, 5)
    states_for([learner.pk], [5], words=False)
    job.refresh_from_db()
    kept = job.lab_summary["v"]
    outcomes.version.cache_clear()
    monkeypatch.setattr(outcomes, "CODE", (*outcomes.CODE, "labapp/labs/views.py"))  # as if the checks changed
    try:
        states_for([learner.pk], [5], words=False)
        job.refresh_from_db()
        assert job.lab_summary["v"] != kept and outcomes.current(job.lab_summary)
    finally:
        outcomes.version.cache_clear()


def test_a_run_with_only_a_seed_is_named_without_an_empty_settings_gap(learner: User) -> None:
    _job(learner, 1, config={"seed": 7})
    page = _client(learner).get("/labs/1/").content.decode()
    named = page.split('class="job-name"')[1].split("</span>")[0]
    assert "<code></code>" not in named and " ·  · " not in named and "seed" not in named
    _job(learner, 1, config={"seed": 8, "repeats": 3})
    named = _client(learner).get("/labs/1/").content.decode().split('class="job-name"')[1].split("</span>")[0]
    assert "<code>repeats=3</code>" in named


def test_the_gradebook_benchmark_times_both_pages_and_leaves_nothing_behind(learner: User) -> None:
    import json as json_module
    from io import StringIO

    from django.core.management import call_command

    from labapp.models import Classroom

    for number in LABS:
        _job(learner, number)
    out = StringIO()
    call_command("bench_gradebook", learners=3, runs=1, times=1, json=True, stdout=out)
    row = json_module.loads(out.getvalue())
    assert row["learners"] == 3 and row["labs"] == 6 and row["gradebook_ms"] > 0 and row["lab_page_ms"] > 0
    assert row["ratio"] == pytest.approx(row["gradebook_ms"] / row["lab_page_ms"], abs=0.01)
    assert not User.objects.filter(username__startswith="bench-gradebook").exists()
    assert not Classroom.objects.filter(name__startswith="bench-gradebook").exists()
    assert BenchJob.objects.count() == 6  # only the learner's own runs are left


@pytest.mark.parametrize("number", sorted(LABS))
def test_a_hand_in_made_in_korean_reads_in_english_for_an_english_reader(
    learner: User, number: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks are kept as msgids and values (labapp.said), not as the sentences of the day."""
    from bench import charts
    from tests.site.test_korean import hangul

    monkeypatch.setattr(charts, "charts", lambda *a, **k: {})  # GOOD's results carry the checks' numbers only

    _job(learner, number)
    with translation.override("ko"):
        lab_services.lab_submit(user=learner, number=number, reflection="반영")
    stored = LabSubmission.objects.get().checks
    assert all(isinstance(c["name"], dict) for c in stored), stored  # keys and values, not sentences
    english = _client(learner)
    english.cookies["django_language"] = "en"
    page = english.get(f"/labs/{number}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    handed = page.split('id="handed-checks"')[1].split("</ul>")[0]
    assert "<li" in handed and not hangul([handed]), handed
    with translation.override("ko"):
        korean = [c.name for c in state_for(learner.pk, number).shown_checks]
        assert korean == [c.name for c in LABS[number].checks(GOOD[number], {})]


def test_the_data_migration_keeps_older_hand_ins_checks_as_keys_when_the_verdicts_agree(learner: User) -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("labapp.migrations.0006_hand_in_checks_in_the_readers_language")
    with translation.override("ko"):
        made = LABS[1].checks(GOOD[1], {})
    sentences = [c.as_dict() | {"name": str.__str__(c.name), "message": "옛 문장"} for c in made]
    agreeing = LabSubmission.objects.create(
        user=learner, lab=1, job=_job(learner, 1), reflection="r", submitted_at=timezone.now(), checks=sentences
    )
    other = User.objects.create(username="p2")
    flipped = [c | {"passed": not c["passed"]} for c in sentences]  # graded by other code: its verdicts stay
    disagreeing = LabSubmission.objects.create(
        user=other, lab=1, job=_job(other, 1), reflection="r", submitted_at=timezone.now(), checks=flipped
    )
    migration.keep_keys(apps, None)
    agreeing.refresh_from_db()
    disagreeing.refresh_from_db()
    assert all(isinstance(c["name"], dict) for c in agreeing.checks)
    assert disagreeing.checks == flipped
