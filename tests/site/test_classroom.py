"""Classes in class mode: sign-up with join codes, rosters, assignments, the gradebook and who sees what.

Personas: two learners in two classes, an instructor of each class, an admin and an
anonymous visitor. Every class page, the charts' data and the CSV export are checked
for every persona.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.http import HttpRequest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation

from bench.models import BenchJob
from labapp.classes import services
from labapp.csvcells import csv_safe
from labapp.labs.catalog import LABS
from labapp.models import Assignment, Classroom, LabSubmission, Membership, TemporaryPassword
from rag.access import user_collection_name
from rag.models import Answer, Conversation, Document
from tests.site.test_labs import GOOD, QUIET

PASSWORD = "correct-horse-battery"  # noqa: S105 - test accounts

RETRIEVAL = GOOD[4] | {
    "cells": [
        {"completed": 2, "failed": 0, "median_context_tokens": 480, "median_ttft_ms": 210.0, "median_tpot_ms": 40}
        | {"chunk_size": 500, "top_k": 1, "median_output_tokens": 24}
        | QUIET,
        {"completed": 2, "failed": 0, "median_context_tokens": 1900, "median_ttft_ms": 590.0, "median_tpot_ms": 42}
        | {"chunk_size": 500, "top_k": 5, "median_output_tokens": 24}
        | QUIET,
    ]
}


@pytest.fixture
def class_mode(settings: Any) -> None:
    settings.LAB_MODE = "class"


def _user(username: str, **extra: Any) -> User:
    return User.objects.create_user(username=username, password=PASSWORD, **extra)


def _job(owner: User, kind: str, results: dict[str, Any], *, engine: str = "http://engine-a:8000") -> BenchJob:
    lab = next((n for n, lab in LABS.items() if lab.job_kind == kind), None)  # a run made on its lab's page
    return BenchJob.objects.create(owner=owner, kind=kind, engine_url=engine, status="done", results=results, lab=lab)


@dataclass
class World:
    room_a: Classroom
    room_b: Classroom
    instructor_a: User
    instructor_b: User
    learner_a: User
    learner_b: User
    admin: User
    job_a: BenchJob
    job_b: BenchJob
    conversation_b: Conversation
    document_b: Document

    def client(self, persona: str) -> Client:
        client = Client()
        if persona != "anonymous":
            client.force_login(getattr(self, persona))
        return client


def _work(learner: User) -> tuple[BenchJob, Conversation, Document]:
    job = _job(learner, "speed", GOOD[1])
    _job(learner, "retrieval", RETRIEVAL)
    conversation = Conversation.objects.create(owner=learner, title="질문")
    Answer.objects.create(
        conversation=conversation,
        question=f"{learner.username}의 질문: 프리필이 뭔가요?",
        text=f"{learner.username}에게 준 답",
        status="done",
        timings={"client": {"ttft_ms": 123.4, "e2el_ms": 2000.0}, "tokens": {"prompt": 900, "output": 80}},
    )
    document = Document.objects.create(
        owner=learner,
        collection=user_collection_name(learner),
        title="메모",
        filename=f"{learner.username}.md",
        kind="md",
        size_bytes=10,
        text="비밀 메모",
        content_hash="x",
    )
    return job, conversation, document


@pytest.fixture
def world(db: None) -> World:
    room_a = services.classroom_create(name="A반", instructor=_user("inst_a"))
    room_b = services.classroom_create(name="B반", instructor=_user("inst_b"))
    learner_a, learner_b = _user("learner_a"), _user("learner_b")
    Membership.objects.create(classroom=room_a, user=learner_a)
    Membership.objects.create(classroom=room_b, user=learner_b)
    job_a, _conversation_a, _document_a = _work(learner_a)
    job_b, conversation_b, document_b = _work(learner_b)
    return World(
        room_a=room_a,
        room_b=room_b,
        instructor_a=User.objects.get(username="inst_a"),
        instructor_b=User.objects.get(username="inst_b"),
        learner_a=learner_a,
        learner_b=learner_b,
        admin=_user("admin", is_staff=True, is_superuser=True),
        job_a=job_a,
        job_b=job_b,
        conversation_b=conversation_b,
        document_b=document_b,
    )


# --- sign-up and join codes -----------------------------------------------------------


def _signup(client: Client, code: str, username: str = "newbie") -> Any:
    return client.post(
        "/accounts/signup/",
        {"join_code": code, "username": username, "email": "", "password1": PASSWORD, "password2": PASSWORD},
    )


@pytest.mark.django_db
def test_signing_up_with_the_join_code_makes_a_signed_in_learner_of_the_class(class_mode: None) -> None:
    room = services.classroom_create(name="A반", instructor=_user("inst"))
    client = Client()
    assert client.get("/accounts/signup/").status_code == 200
    response = _signup(client, f" {room.join_code.lower()} ")  # spaces and case do not matter
    assert response.status_code == 302
    user = User.objects.get(username="newbie")
    assert Membership.objects.get(user=user).classroom == room
    assert Membership.objects.get(user=user).role == "learner"
    assert client.get("/labs/").wsgi_request.user == user


@pytest.mark.django_db
def test_a_wrong_code_is_an_error_on_the_code_field_and_creates_nothing(class_mode: None) -> None:
    services.classroom_create(name="A반", instructor=_user("inst"))
    users = User.objects.count()
    response = _signup(Client(), "NOPE1234")
    assert response.status_code == 200
    form = response.context["form"]
    assert list(form.errors) == ["join_code"] and "가입 코드를 쓰는 수업이 없습니다" in form.errors["join_code"][0]
    assert User.objects.count() == users and Membership.objects.count() == 1


@pytest.mark.django_db
def test_a_closed_an_expired_and_a_replaced_code_each_say_why(class_mode: None) -> None:
    room = services.classroom_create(name="A반", instructor=_user("inst"))
    services.classroom_join_set(classroom=room, open_=False)
    assert "가입을 받지 않습니다" in _signup(Client(), room.join_code).context["form"].errors["join_code"][0]
    old = room.join_code
    services.classroom_join_code_regenerate(classroom=room, expires_at=timezone.now() - timedelta(minutes=1))
    assert room.join_open and room.join_code != old
    assert "기한이 지났습니다" in _signup(Client(), room.join_code).context["form"].errors["join_code"][0]
    assert "수업이 없습니다" in _signup(Client(), old).context["form"].errors["join_code"][0]
    assert not User.objects.filter(username="newbie").exists()
    services.classroom_join_code_regenerate(classroom=room, expires_at=timezone.now() + timedelta(days=1))
    assert _signup(Client(), room.join_code).status_code == 302


@pytest.mark.django_db
def test_the_instructor_turns_the_code_off_and_makes_a_new_one_from_the_class_page(class_mode: None) -> None:
    room = services.classroom_create(name="A반", instructor=_user("inst"))
    client = Client()
    client.force_login(User.objects.get(username="inst"))
    url = f"/classes/{room.pk}/join-code/"
    assert client.post(url, {"action": "close"}).status_code == 302
    room.refresh_from_db()
    assert not room.join_open
    assert 'data-open="false"' in client.get(f"/classes/{room.pk}/").content.decode()
    old = room.join_code
    assert client.post(url, {"action": "regenerate", "expires_in_days": "7"}).status_code == 302
    room.refresh_from_db()
    assert room.join_open and room.join_code != old and room.join_code_expires_at is not None
    assert client.post(url, {"action": "regenerate", "expires_in_days": "0"}).status_code == 400


@pytest.mark.django_db
def test_a_signed_in_user_joins_another_class_with_its_code(class_mode: None, world: World) -> None:
    client = world.client("learner_a")
    response = client.post("/classes/join/", {"join_code": "WRONG"})
    assert response.status_code == 400 and "join_code" in response.context["join_form"].errors
    assert client.post("/classes/join/", {"join_code": world.room_b.join_code}).status_code == 302
    assert Membership.objects.filter(user=world.learner_a, classroom=world.room_b, role="learner").exists()
    assert "B반" in client.get("/classes/").content.decode()


def test_sign_up_does_not_exist_in_local_mode(client: Client, db: None) -> None:
    assert client.get("/accounts/signup/").status_code == 404
    page = client.get("/").content.decode()
    assert 'href="/classes/"' not in page  # local mode: no class links, no sign-in


@pytest.mark.django_db
def test_class_mode_nav_offers_classes_and_sign_out_and_sign_out_works(class_mode: None, world: World) -> None:
    client = world.client("learner_a")
    page = client.get("/labs/").content.decode()
    assert 'href="/classes/"' in page and 'action="/accounts/logout/"' in page
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/labs/").status_code == 302


# --- temporary passwords ----------------------------------------------------------------


@pytest.mark.django_db
def test_the_instructor_sets_a_temporary_password_that_must_be_changed_at_sign_in(
    class_mode: None, world: World
) -> None:
    instructor = world.client("instructor_a")
    response = instructor.post(f"/classes/{world.room_a.pk}/learners/{world.learner_a.pk}/password/", {})
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    password = response.context["password"]
    assert password in response.content.decode()
    learner = Client()
    signed_in = learner.post("/accounts/login/", {"username": "learner_a", "password": password})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/accounts/password_change/"
    for page in ("/", "/labs/", "/chat/", "/bench/"):  # every page leads to the change until it is done
        assert learner.get(page)["Location"] == "/accounts/password_change/", page
    assert learner.get("/accounts/password_change/").status_code == 200
    changed = learner.post(
        "/accounts/password_change/",
        {"old_password": password, "new_password1": "another-long-phrase", "new_password2": "another-long-phrase"},
    )
    assert changed.status_code == 302 and not TemporaryPassword.objects.filter(user=world.learner_a).exists()
    assert learner.get("/labs/").status_code == 200  # free again in the same session
    again = Client().post("/accounts/login/", {"username": "learner_a", "password": "another-long-phrase"})
    assert again.status_code == 302 and again["Location"] == "/"


@pytest.mark.django_db
def test_a_chosen_temporary_password_is_checked_and_instructors_cannot_be_reset(class_mode: None, world: World) -> None:
    instructor = world.client("instructor_a")
    url = f"/classes/{world.room_a.pk}/learners/{world.learner_a.pk}/password/"
    weak = instructor.post(url, {"password": "1234"})
    assert weak.status_code == 400 and "password" in weak.context["form"].errors
    chosen = instructor.post(url, {"password": "a-good-temporary-one"})
    assert chosen.context["password"] == "a-good-temporary-one"  # noqa: S105
    # A learner of another class, or one of this class who teaches elsewhere, is out of reach.
    assert instructor.post(f"/classes/{world.room_a.pk}/learners/{world.learner_b.pk}/password/").status_code == 404
    Membership.objects.create(classroom=world.room_a, user=world.instructor_b)
    url_b = f"/classes/{world.room_a.pk}/learners/{world.instructor_b.pk}/password/"
    assert instructor.post(url_b, {}).status_code == 302
    assert Client().login(request=HttpRequest(), username="inst_b", password=PASSWORD)  # axes needs the request
    page = instructor.get(f"/classes/{world.room_a.pk}/").content.decode()
    assert url in page and url_b not in page


# --- classes -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_admins_and_instructors_create_classes_and_each_gets_a_code(class_mode: None, world: World) -> None:
    assert world.client("learner_a").post("/classes/new/", {"name": "몰래"}).status_code == 403
    assert not Classroom.objects.filter(name="몰래").exists()
    for persona in ("instructor_a", "admin"):
        response = world.client(persona).post("/classes/new/", {"name": f"{persona}의 새 반"})
        room = Classroom.objects.get(name=f"{persona}의 새 반")
        assert response["Location"] == f"/classes/{room.pk}/"
        assert len(room.join_code) == 8 and room.join_open
        assert Membership.objects.get(classroom=room).role == "instructor"
    assert world.client("instructor_a").post("/classes/new/", {"name": "  "}).status_code == 200
    listing = world.client("admin").get("/classes/").content.decode()
    assert "A반" in listing and "B반" in listing  # an admin sees every class
    mine = world.client("instructor_a").get("/classes/").content.decode()
    assert "A반" in mine and "B반" not in mine


# --- rosters ---------------------------------------------------------------------------------


def _upload(client: Client, room: Classroom, text: str | bytes) -> Any:
    data = text.encode() if isinstance(text, str) else text
    return client.post(f"/classes/{room.pk}/roster/", {"roster": SimpleUploadedFile("roster.csv", data)})


@pytest.mark.django_db
def test_a_roster_preview_lists_each_rows_errors_and_confirm_creates_only_the_good_rows(
    class_mode: None, world: World
) -> None:
    client = world.client("instructor_a")
    _user("taken")
    roster = (
        "\ufeffUsername,Email,Role,Password\n"
        "kim,kim@example.org,,\n"
        "lee,,instructor,a-chosen-passphrase\n"
        "kim,kim2@example.org,learner,\n"  # duplicate in the file
        "learner_a,,learner,\n"  # already in the class
        "taken,,,\n"  # someone else's account
        ",nobody@example.org,,\n"  # missing username
        "park,park@example.org,teacher,\n"  # bad role
        "choi,not-an-email,,\n"
        "jung,,,short\n"  # a weak password
        "han,han@example.org\n"  # too few columns
        "bad name!,,,\n"
    )
    users = User.objects.count()
    preview = _upload(client, world.room_a, roster)
    assert preview.status_code == 200 and User.objects.count() == users  # nothing yet
    rows = {row.line: row for row in preview.context["rows"]}
    assert rows[2].ok and rows[3].ok
    assert "중복" in rows[4].errors[0] and "2행" in rows[4].errors[0]
    assert "이미 이 수업에 있습니다" in rows[5].errors[0]
    assert "다른 계정" in rows[6].errors[0]
    assert "비어 있습니다" in rows[7].errors[0]
    assert "role" in rows[8].errors[0] and "teacher" in rows[8].errors[0]
    assert "이메일" in rows[9].errors[0]
    assert "비밀번호" in rows[10].errors[0]
    assert "열이 4개" in rows[11].errors[0]
    assert "username" in rows[12].errors[0]
    assert preview.context["good"] == 2 and preview.context["bad"] == 9
    page = preview.content.decode()
    assert page.count('data-ok="false"') == 9 and "a-chosen-passphrase" not in page

    signed = {"roster": preview.context["signed"]}
    done = client.post(f"/classes/{world.room_a.pk}/roster/confirm/", signed)
    assert done.status_code == 200 and done["Cache-Control"] == "no-store"
    assert User.objects.count() == users + 2
    created = {c.user.username: c for c in done.context["created"]}
    assert set(created) == {"kim", "lee"}
    assert created["kim"].password and created["kim"].password in done.content.decode()
    assert created["lee"].password == ""  # the file chose it; not shown again
    assert Client().login(request=HttpRequest(), username="kim", password=created["kim"].password)
    assert Client().login(request=HttpRequest(), username="lee", password="a-chosen-passphrase")  # noqa: S106
    assert Membership.objects.get(user__username="lee").role == "instructor"
    assert TemporaryPassword.objects.filter(user__username__in=["kim", "lee"]).count() == 2
    assert not User.objects.filter(username__in=["park", "choi", "jung", "han"]).exists()
    # The passwords were shown once: confirming again finds nothing to import.
    again = client.post(f"/classes/{world.room_a.pk}/roster/confirm/", signed)
    assert again.status_code == 302 and User.objects.count() == users + 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'username,email\n"kim,kim@example.org\n', "CSV 형식"),
        (b"name,mail\nkim,kim@example.org\n", "username,email"),
        (b"username,email\n", "한 명도"),
        (b"", "빈 파일"),  # Django's own check
        (b" \n\n", "비어 있습니다"),
        ("username,email\nkim,kim@example.org\n".encode("utf-16"), "UTF-8"),
    ],
)
def test_an_unreadable_roster_is_refused_whole(class_mode: None, world: World, data: bytes, message: str) -> None:
    users = User.objects.count()
    response = _upload(world.client("instructor_a"), world.room_a, data)
    assert response.status_code == 400 and message in response.context["form"].errors["roster"][0]
    confirm = world.client("instructor_a").post(f"/classes/{world.room_a.pk}/roster/confirm/")
    assert confirm.status_code == 302 and User.objects.count() == users


# --- assignments ----------------------------------------------------------------------------


def _when(days: float) -> str:
    return timezone.localtime(timezone.now() + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M")


@pytest.mark.django_db
def test_assignments_are_created_checked_field_by_field_changed_and_removed(class_mode: None, world: World) -> None:
    client = world.client("instructor_a")
    url = f"/classes/{world.room_a.pk}/assignments/new/"
    good = {"lab": "1", "opens_at": _when(-1), "due_at": _when(6), "late_rule": "refuse"}
    assert client.post(url, good).status_code == 302
    assignment = Assignment.objects.get(classroom=world.room_a)
    assert assignment.lab == 1 and assignment.late_rule == "refuse"
    backwards = client.post(url, good | {"lab": "2", "due_at": _when(-2)})
    assert backwards.status_code == 400 and list(backwards.context["form"].errors) == ["due_at"]
    unknown = client.post(url, good | {"lab": "9"})
    assert unknown.status_code == 400 and list(unknown.context["form"].errors) == ["lab"]
    twice = client.post(url, good)
    assert twice.status_code == 400 and "이미 실습 1" in twice.context["form"].errors["lab"][0]
    assert Assignment.objects.count() == 1
    edit = f"/classes/{world.room_a.pk}/assignments/{assignment.pk}/"
    assert client.get(edit).status_code == 200
    assert client.post(edit, good | {"late_rule": "accept", "due_at": _when(10)}).status_code == 302
    assignment.refresh_from_db()
    assert assignment.late_rule == "accept" and assignment.due_at > timezone.now() + timedelta(days=9)
    assert world.client("instructor_b").post(edit, good).status_code == 404
    assert client.post(f"{edit}delete/").status_code == 302 and not Assignment.objects.exists()


# --- results ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_gradebook_shows_status_key_numbers_checks_and_late_marks(class_mode: None, world: World) -> None:
    now = timezone.now()
    Assignment.objects.create(classroom=world.room_a, lab=1, opens_at=now - timedelta(days=3), due_at=now)
    Assignment.objects.create(
        classroom=world.room_a, lab=4, opens_at=now - timedelta(days=3), due_at=now - timedelta(days=1)
    )
    LabSubmission.objects.create(
        user=world.learner_a, lab=1, job=world.job_a, reflection="프리필이 24배 빠릅니다",
        checks=[{"name": "a", "passed": True, "message": ""}, {"name": "b", "passed": False, "message": ""}],
        key_numbers={"prefill tok/s": 600.0}, passed=False, submitted_at=now, late=True,
    )  # fmt: skip
    response = world.client("instructor_a").get(f"/classes/{world.room_a.pk}/results/")
    assert response.status_code == 200
    book = response.context["book"]
    assert [lab.number for lab in book.labs] == [1, 4] and len(book.rows) == 1
    lab1, lab4 = book.rows[0].cells
    assert lab1.state.status == "submitted" and lab1.late and (lab1.checks_passed, lab1.checks_total) == (1, 2)
    assert lab4.state.status == "passed" and lab4.overdue and lab4.key_numbers["ms/token (500)"] == 1.7
    page = response.content.decode()
    assert "제출함" in page and "확인 1/2" in page and 'data-late="true"' in page and "프리필 속도 (tok/s): 600" in page
    assert 'id="class-speeds-data"' in page and 'id="class-ttft-data"' in page and "plotly-cartesian-" in page
    assert "learner_b" not in page


@pytest.mark.django_db
def test_the_learner_page_shows_their_labs_jobs_reflections_and_answers(class_mode: None, world: World) -> None:
    LabSubmission.objects.create(
        user=world.learner_a, lab=1, job=world.job_a, reflection="나의 생각", checks=[], key_numbers={},
        submitted_at=timezone.now(),
    )  # fmt: skip
    client = world.client("instructor_a")
    page = client.get(f"/classes/{world.room_a.pk}/learners/{world.learner_a.pk}/").content.decode()
    assert "나의 생각" in page and "learner_a의 질문" in page and "learner_a에게 준 답" in page and "123.4" in page
    assert f'data-job="{world.job_a.pk}"' in page and "learner_b" not in page
    job_page = client.get(f"/classes/{world.room_a.pk}/learners/{world.learner_a.pk}/jobs/{world.job_a.pk}/")
    text = job_page.content.decode()
    assert job_page.status_code == 200 and 'id="job-chart-data"' in text and "프리필 속도 (tok/s): <b>600</b>" in text
    assert text.count('data-passed="true"') == 5 and "bench_cancel" not in text and "/cancel/" not in text


@pytest.mark.django_db
def test_class_charts_group_speeds_by_engine_and_trace_ttft_per_learner(class_mode: None, world: World) -> None:
    second = _user("learner_c")
    Membership.objects.create(classroom=world.room_a, user=second)
    _job(second, "speed", GOOD[1] | {"prefill_speed": 900.0}, engine="http://engine-b:8000")
    _job(second, "speed", GOOD[1] | {"prefill_speed": 10.0}, engine="http://engine-b:8000").delete()
    BenchJob.objects.create(owner=second, kind="speed", engine_url="x", status="running", results={})
    data = world.client("instructor_a").get(f"/classes/{world.room_a.pk}/charts.json").json()
    assert data["speeds"] == {
        "http://engine-a:8000": [["learner_a", 600.0, 25.0]],
        "http://engine-b:8000": [["learner_c", 900.0, 25.0]],
    }
    assert data["ttft_vs_context"] == {"learner_a": [[480, 210.0], [1900, 590.0]]}
    figure = world.client("instructor_a").get(f"/classes/{world.room_a.pk}/results/").context["charts"][0]["figure"]
    assert {trace["name"] for trace in figure["data"]} == {"http://engine-a:8000", "http://engine-b:8000"}


def test_csv_cells_that_could_start_a_formula_are_quoted() -> None:
    assert [csv_safe(v) for v in ("=1+1", "+x", "-x", "@SUM(A1)", "\tx", "\rx", "plain", -3.5, None, True)] == [
        "'=1+1", "'+x", "'-x", "'@SUM(A1)", "'\tx", "'\rx", "plain", -3.5, "", "yes",
    ]  # fmt: skip


@pytest.mark.django_db
def test_the_csv_export_has_every_learner_and_lab_and_neutralises_formulas(class_mode: None, world: World) -> None:
    sneaky = _user("@evil", email='=HYPERLINK("http://x")@x.org')
    Membership.objects.create(classroom=world.room_a, user=sneaky)
    _job(sneaky, "prefix", GOOD[5] | {"cache_reset": "=cmd|' /C calc'!A0"})
    response = world.client("instructor_a").get(f"/classes/{world.room_a.pk}/results.csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8-sig"))))
    header, lines = rows[0], {row[0]: dict(zip(rows[0], row, strict=True)) for row in rows[1:]}
    assert header[:3] == ["학습자", "이메일", "실습 1: 상태"] and "실습 6: 줄어든 시간 (%)" in header
    assert set(lines) == {"learner_a", "'@evil"}
    assert lines["'@evil"]["이메일"].startswith("'=HYPERLINK")
    assert lines["'@evil"]["실습 5: 캐시 초기화"] == "'=cmd|' /C calc'!A0"
    assert lines["learner_a"]["실습 1: 프리필 속도 (tok/s)"] == "600" and lines["learner_a"]["실습 1: 확인"] == "5/5"
    assert not any(cell.startswith(("=", "+", "@")) for row in rows for cell in row)


@pytest.mark.django_db
def test_the_gradebook_and_csv_cost_the_same_queries_for_5_or_40_learners(
    class_mode: None, django_assert_max_num_queries: Any
) -> None:
    room = services.classroom_create(name="큰 반", instructor=_user("inst"))
    now = timezone.now()
    for number in (1, 4):
        Assignment.objects.create(classroom=room, lab=number, opens_at=now, due_at=now + timedelta(days=1))
    client = Client()
    client.force_login(User.objects.get(username="inst"))

    def grow(total: int) -> None:
        for i in range(Membership.objects.filter(classroom=room, role="learner").count(), total):
            learner = User.objects.create(username=f"m{i:02d}")
            Membership.objects.create(classroom=room, user=learner)
            _job(learner, "speed", GOOD[1])
            _job(learner, "retrieval", RETRIEVAL)
            LabSubmission.objects.create(
                user=learner, lab=1, reflection="r", checks=[], key_numbers={}, submitted_at=now
            )

    counts = {}
    for total in (5, 40):
        grow(total)
        with CaptureQueriesContext(connection) as page:
            assert client.get(f"/classes/{room.pk}/results/").status_code == 200
        with CaptureQueriesContext(connection) as export:
            assert client.get(f"/classes/{room.pk}/results.csv").status_code == 200
        counts[total] = (len(page), len(export))
    assert counts[5] == counts[40], counts
    with django_assert_max_num_queries(counts[5][0]):
        response = client.get(f"/classes/{room.pk}/results/")
    assert len(response.context["book"].rows) == 40
    with django_assert_max_num_queries(counts[5][1]):
        assert client.get(f"/classes/{room.pk}/results.csv").content.decode().count("\n") == 41


# --- who sees what ----------------------------------------------------------------------------

PERSONAS = ("instructor_a", "admin", "instructor_b", "learner_a", "learner_b", "anonymous")
SEES_CLASS_A = {"instructor_a", "admin"}


def _class_a_urls(w: World) -> list[str]:
    base = f"/classes/{w.room_a.pk}"
    return [
        f"{base}/",
        f"{base}/results/",
        f"{base}/results.csv",
        f"{base}/charts.json",
        f"{base}/roster/",
        f"{base}/assignments/new/",
        f"{base}/learners/{w.learner_a.pk}/",
        f"{base}/learners/{w.learner_a.pk}/jobs/{w.job_a.pk}/",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
def test_class_pages_charts_and_export_exist_only_for_its_instructor_and_admins(
    class_mode: None, world: World, persona: str
) -> None:
    client = world.client(persona)
    for url in _class_a_urls(world):
        response = client.get(url)
        if persona == "anonymous":
            assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
        else:
            assert response.status_code == (200 if persona in SEES_CLASS_A else 404), (persona, url)
    posts = [
        f"/classes/{world.room_a.pk}/join-code/",
        f"/classes/{world.room_a.pk}/roster/confirm/",
        f"/classes/{world.room_a.pk}/learners/{world.learner_a.pk}/password/",
    ]
    for url in posts:
        if persona not in SEES_CLASS_A:
            expected = 302 if persona == "anonymous" else 404
            assert client.post(url, {"action": "close"}).status_code == expected, url
    world.room_a.refresh_from_db()
    assert world.room_a.join_open


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["instructor_a", "admin"])
def test_a_learner_of_another_class_is_not_found_through_this_class(
    class_mode: None, world: World, persona: str
) -> None:
    client = world.client(persona)
    base = f"/classes/{world.room_a.pk}/learners"
    assert client.get(f"{base}/{world.learner_b.pk}/").status_code == 404
    assert client.get(f"{base}/{world.learner_b.pk}/jobs/{world.job_b.pk}/").status_code == 404
    assert client.get(f"{base}/{world.learner_a.pk}/jobs/{world.job_b.pk}/").status_code == 404
    assert client.get(f"{base}/{world.instructor_a.pk}/").status_code == 404  # instructors are not graded


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["learner_a", "instructor_b", "instructor_a"])
def test_nobody_reaches_another_persons_runs_answers_or_documents_directly(
    class_mode: None, world: World, persona: str
) -> None:
    client = world.client(persona)
    assert client.get(f"/bench/{world.job_b.pk}/").status_code == 404
    assert client.get(f"/bench/{world.job_b.pk}/export.csv").status_code == 404
    assert client.get(f"/chat/{world.conversation_b.pk}/").status_code == 404
    assert client.get(f"/documents/{world.document_b.pk}/preview/").status_code == 404
    assert "learner_b의 질문" not in client.get("/chat/history/").content.decode()


@pytest.mark.django_db
def test_a_learner_sees_their_classes_assignments_but_no_class_page(class_mode: None, world: World) -> None:
    now = timezone.now()
    Assignment.objects.create(classroom=world.room_a, lab=2, opens_at=now, due_at=now + timedelta(days=2))
    page = world.client("learner_a").get("/classes/").content.decode()
    assert "A반" in page and "/labs/2/" in page and "B반" not in page and world.room_a.join_code not in page
    assert 'id="new-class"' not in page


# --- CSRF -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_form_refuses_a_post_without_the_csrf_token(class_mode: None, world: World) -> None:
    anonymous = Client(enforce_csrf_checks=True)
    assert _signup(anonymous, world.room_a.join_code).status_code == 403
    instructor = Client(enforce_csrf_checks=True)
    instructor.force_login(world.instructor_a)
    base = f"/classes/{world.room_a.pk}"
    good = {"lab": "1", "opens_at": _when(-1), "due_at": _when(6), "late_rule": "accept"}
    assert instructor.post("/classes/new/", {"name": "CSRF"}).status_code == 403
    assert instructor.post(f"{base}/roster/confirm/").status_code == 403
    assert instructor.post(f"{base}/assignments/new/", good).status_code == 403
    assert instructor.post(f"{base}/join-code/", {"action": "close"}).status_code == 403
    assert instructor.post(f"{base}/learners/{world.learner_a.pk}/password/").status_code == 403
    assert not Classroom.objects.filter(name="CSRF").exists() and not Assignment.objects.exists()
    assert not User.objects.filter(username="newbie").exists()


@pytest.mark.django_db
def test_the_class_pages_speak_english_when_it_is_chosen(class_mode: None, world: World) -> None:
    client = world.client("instructor_a")
    with translation.override("ko"):  # the requests switch this thread's language; put it back after
        client.post("/i18n/setlang/", {"language": "en", "next": "/"})
        assert "Gradebook" in client.get(f"/classes/{world.room_a.pk}/results/").content.decode()
        page = client.get(f"/classes/{world.room_a.pk}/").content.decode()
        assert "Join code" in page and "Assign a lab" in page and "가입 코드" not in page
        error = _signup(Client(HTTP_COOKIE="django_language=en"), "NOPE").context["form"].errors["join_code"][0]
        assert error.startswith("No class uses this join code")


@pytest.mark.django_db
def test_the_admin_lists_classes_with_their_join_settings_assignments_and_hand_ins(world: World) -> None:
    User.objects.create_superuser("root-admin", "root@example.com", "a-long-admin-phrase")
    admin = Client()
    admin.force_login(User.objects.get(username="root-admin"))
    listing = admin.get("/admin/labapp/classroom/")
    assert listing.status_code == 200 and world.room_a.name in listing.content.decode()
    change = admin.get(f"/admin/labapp/classroom/{world.room_a.pk}/change/")
    assert change.status_code == 200 and "join_code_expires_at" in change.content.decode()
    assert admin.get("/admin/labapp/labsubmission/").status_code == 200


# --- the gradebook as an instructor reads it ------------------------------------------------------


def _csv(client: Client, room: Classroom) -> tuple[list[str], dict[str, dict[str, str]]]:
    rows = list(csv.reader(io.StringIO(client.get(f"/classes/{room.pk}/results.csv").content.decode("utf-8-sig"))))
    return rows[0], {row[0]: dict(zip(rows[0], row, strict=True)) for row in rows[1:]}


def _handed_in(world: World, reflection: str) -> None:
    _job(world.learner_a, "prefix", GOOD[5] | {"cache_reset": "ok", "warm_speedup": 10.129372394048358})
    LabSubmission.objects.create(
        user=world.learner_a,
        lab=1,
        job=world.job_a,
        reflection=reflection,
        key_numbers={"prefill tok/s": 600.123456},
        submitted_at=timezone.now(),
    )


@pytest.mark.django_db
def test_the_csv_speaks_the_readers_language_with_the_pages_words_rounding_and_reflections(
    class_mode: None, world: World
) -> None:
    reflection = "프리필은 디코드보다 토큰당 훨씬 빠릅니다"
    _handed_in(world, reflection)
    Membership.objects.create(classroom=world.room_a, user=_user("idle"))
    client = world.client("instructor_a")
    header, lines = _csv(client, world.room_a)
    assert lines["idle"]["실습 1: 상태"] == "시작 전" and lines["idle"]["실습 1: 확인"] == ""  # as the page: none
    mine = lines["learner_a"]
    assert mine["실습 5: 캐시 초기화"] == "비움" and mine["실습 5: 캐시 적중 시 빨라진 배수"] == "10.13"
    assert mine["실습 1: 상태"] == "제출함" and mine["실습 1: 제출한 생각"] == reflection
    assert mine["실습 1: 프리필 속도 (tok/s)"] == "600.12"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", mine["실습 1: 제출 시각 (Asia/Seoul)"])
    assert not [h for h in header if re.search(r"[A-Za-z]{3,}", re.sub(r"Asia/Seoul|tok/s|TTFT|TPOT", "", h))]
    client.cookies["django_language"] = "en"
    header, lines = _csv(client, world.room_a)
    assert header[:3] == ["Learner", "E-mail", "Lab 1: Status"]
    assert lines["learner_a"]["Lab 5: cache reset"] == "emptied" and lines["learner_a"]["Lab 1: Status"] == "Handed in"
    shown = [cell for row in [header, *map(list, (r.values() for r in lines.values()))] for cell in row]
    assert [cell for cell in shown if cell != reflection and re.search("[\uac00-\ud7a3]", cell)] == []


@pytest.mark.django_db
def test_the_gradebook_shows_each_hand_ins_reflection(class_mode: None, world: World) -> None:
    _handed_in(world, "청크가 클수록 TTFT가 <b>늘었습니다</b>")
    page = world.client("instructor_a").get(f"/classes/{world.room_a.pk}/results/").content.decode()
    row = page.split(f'data-learner="{world.learner_a.pk}"')[1].split("</tr>")[0]
    shown = row.split('<details class="reflection" data-lab="1">')[1].split("</details>")[0]
    assert "청크가 클수록 TTFT가 &lt;b&gt;늘었습니다&lt;/b&gt;" in shown  # the learner's text, escaped
    assert row.count('class="reflection"') == 1  # only the lab handed in


@pytest.mark.django_db
def test_an_empty_class_chart_says_so_once(class_mode: None, world: World) -> None:
    room = services.classroom_create(name="빈 반", instructor=world.instructor_a)
    Membership.objects.create(classroom=room, user=_user("idle"))
    page = world.client("instructor_a").get(f"/classes/{room.pk}/results/").content.decode()
    assert page.count("끝난 실행이 없") == 1 and 'id="no-charts"' in page
    Membership.objects.create(classroom=room, user=world.learner_a)  # a speed run, a retrieval run
    BenchJob.objects.filter(owner=world.learner_a, kind="retrieval").delete()
    page = world.client("instructor_a").get(f"/classes/{room.pk}/results/").content.decode()
    assert page.count("끝난 실행이 없") == 1 and 'id="empty-charts"' in page and 'id="class-speeds-data"' in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "zone"), [("ko", "시간대 Asia/Seoul (UTC+09:00) 기준"), ("en", "In the Asia/Seoul")]
)
def test_a_new_assignment_has_dates_to_start_from_and_names_their_time_zone(
    class_mode: None, world: World, language: str, zone: str
) -> None:
    client = world.client("instructor_a")
    client.cookies["django_language"] = language
    for url in (f"/classes/{world.room_a.pk}/assignments/new/", f"/classes/{world.room_a.pk}/"):
        page = client.get(url).content.decode()
        form = page.split('id="assignment-form"')[1].split("</form>")[0]
        opens = re.search(r'name="opens_at" value="([^"]+)"', form)
        due = re.search(r'name="due_at" value="([^"]+)"', form)
        assert opens and due, form
        assert due.group(1).endswith("T23:59") and due.group(1) > opens.group(1)
        assert form.count(zone) == 2  # under each of the two fields


@pytest.mark.django_db
def test_a_field_or_column_naming_one_lab_reads_lab_not_labs_in_english(class_mode: None, world: World) -> None:
    """ "실습" is both the labs menu ("Labs") and one lab's field or column ("Lab"): a context tells them apart."""
    client = world.client("instructor_a")
    client.cookies["django_language"] = "en"
    page = client.get(f"/classes/{world.room_a.pk}/").content.decode()
    form = page.split('id="assignment-form"')[1].split("</form>")[0]
    assert re.search(r"<label[^>]*>Lab:</label>", form), form[:400]
    assert ">Labs</a>" in page  # the menu
    labs = client.get("/labs/").content.decode()
    assert "<th>Lab</th>" in labs and "<h1>Labs</h1>" in labs  # one lab per row, under the page's title
