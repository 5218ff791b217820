"""Every route that names an object by its id refuses a person the object is not theirs to reach.

The walk of ``test_request_surface`` gives every route of the URLconf; each one whose path holds an
id is filled with the ids of rows that belong to a learner of one class and their instructor (the
rows of ``test_address_secrets``), and is asked by GET and by POST as a stranger: a learner of no
class, and an instructor of another class. Each answers 404 (405 where the method is not the
route's: nothing read), never the row, and after the walk every planted row is as it was (a POST
changed nothing). A new route with an id is walked without being listed here; one that reaches
rows past the access layer (``labapp/access.py``) fails.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from bench.models import BenchJob, Engine
from labapp.classes import services as class_services
from labapp.models import Assignment, Classroom, LabSubmission
from rag.models import Answer, Conversation, Document
from tests.site.test_address_secrets import body, paths, rows  # noqa: F401 - the planted rows
from tests.site.test_request_surface import ADMIN_DOORS, routes

# A lab's number (``/labs/<int:number>/``) names a page everybody has, not a row: not an id.
ID_ROUTES = sorted(
    r
    for r in set(routes())
    if re.search(r"<int:(?!number>)|\(\?P<\w+>\[0-9\]", r) and not r.startswith("admin/") and r not in ADMIN_DOORS
)
REFUSED = {404, 405}


def state() -> list[Any]:
    """What a stranger's POST could have changed: every planted row, field by field."""
    models = (BenchJob, Engine, Classroom, Assignment, LabSubmission, Conversation, Answer, Document, User)
    return [list(model.objects.order_by("pk").values()) for model in models]


def strangers() -> dict[str, User]:
    learner = User.objects.create_user("stranger-learner")
    teacher = User.objects.create_user("stranger-teacher")
    class_services.classroom_create(name="다른 반", instructor=teacher)
    return {"learner": learner, "instructor": teacher}


def test_a_stranger_reaches_no_object_by_its_id_on_any_route(rows: dict[str, Any]) -> None:  # noqa: F811
    assert len(ID_ROUTES) >= 15  # jobs, exports, compare, classes, learners, assignments, chat, documents, engines
    clients = {}
    for who, person in strangers().items():
        clients[who] = Client(raise_request_exception=False)
        clients[who].force_login(person)
    before, reached = state(), []
    for who, client in clients.items():
        for route in ID_ROUTES:
            for path in paths(route, rows["ids"], rows["jobs"]):
                for method in ("get", "post"):
                    response = getattr(client, method)(path)
                    if response.status_code not in REFUSED:
                        reached.append((who, method, path, response.status_code))
    assert not reached, "\n".join(map(str, reached))
    assert state() == before


def test_the_owner_and_their_instructor_do_reach_them(rows: dict[str, Any]) -> None:  # noqa: F811
    """The walk's paths are real: the same job, conversation and document pages open for their owner,
    and the learner's page for their instructor."""
    owner, teacher = Client(), Client()
    owner.force_login(rows["learner"])
    teacher.force_login(rows["instructor"])
    ids = rows["ids"]
    for path in (f"/bench/{rows['jobs'][0]}/", f"/chat/{ids['conversation_id']}/"):
        assert owner.get(path).status_code == 200, path
    assert "메모" in body(owner.get(f"/documents/{ids['document_id']}/preview/"))
    classroom, learner = ids["classroom_id"], ids["user_id"]
    assert teacher.get(f"/classes/{classroom}/learners/{learner}/").status_code == 200
