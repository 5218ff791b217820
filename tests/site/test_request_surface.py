"""Every URL the site routes, every parameter any view reads, values Hypothesis makes: never a 5xx.

The surface is read, not listed by hand: the routes from the URLconf, the parameter names from
the code (``request.GET.get("…")`` and its kin) and from the templates' form fields. Ids in a path
are a real object's, or numbers past what a database column holds. Values are the awkward ones
up front ("²" passes ``str.isdigit()`` and fails ``int()``; 5 000 digits fail ``int()``; 2**63 fails
the database) and any text. A learner and an instructor each walk it, GET and POST.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLResolver, get_resolver
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from bench.models import BenchJob
from labapp.classes import services as class_services
from labapp.models import Membership
from rag.models import Conversation

ROOT = Path(__file__).resolve().parents[2]
_READ = re.compile(r"""\b(?:GET|POST)(?:\.get|\.getlist|\.pop)?[\[(]\s*["']([A-Za-z_][\w-]*)["']""")
_FIELD = re.compile(r"""\bname=["']([A-Za-z_][\w-]*)["']""")


def parameter_names() -> list[str]:
    """Every parameter name a view reads or a template's form sends."""
    found: set[str] = set()
    for path in [
        *ROOT.glob("labapp/**/*.py"),
        *ROOT.glob("bench/**/*.py"),
        *ROOT.glob("rag/**/*.py"),
        *ROOT.glob("lti/**/*.py"),
    ]:
        found |= set(_READ.findall(path.read_text(encoding="utf-8")))
    for path in ROOT.glob("templates/**/*.html"):
        found |= set(_FIELD.findall(path.read_text(encoding="utf-8")))
    return sorted(found - {"csrfmiddlewaretoken"})


def routes(patterns: list[Any] | None = None, prefix: str = "") -> Iterator[str]:
    """Each route of the URLconf as written (a path() route or a regex), resolvers walked through."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern)


def concrete(route: str, number: int) -> str:
    """A path that reaches ``route``'s view, with ``number`` wherever it takes a number."""
    path = re.sub(r"\(\?P<fmt>[^)]*\)", "json", route)  # the export's format
    path = re.sub(r"\(\?P<app_label>[^)]*\)", "labapp", path)
    path = re.sub(r"\(\?P<\w+>\[0-9\]\+\)", str(number), path)
    path = re.sub(r"\(\?P<\w+>\.\*\)", "x", path)
    path = re.sub(r"<slug:\w+>", "prefill-decode", path)
    path = re.sub(r"<uuid:\w+>", "00000000-0000-4000-8000-000000000001", path)  # an LMS registration's (none)
    path = re.sub(r"<(?:int|path|str):\w+>|<\w+>", str(number), path)
    return "/" + path.replace("^", "").replace("$", "").replace("\\", "")


NAMES = parameter_names()
# Django's admin is walked at its door only: for anyone not staff, each of its ~60 routes is the same
# redirect to the admin's sign-in, and staff are the site's trusted operators.
ADMIN_DOORS = {"admin/", "admin/login/"}
ROUTES = sorted(r for r in set(routes()) if not r.startswith("admin/") or r in ADMIN_DOORS)
AWKWARD = ["²", "٣", "9" * 5000, "-1", "1e400", "nan", "0", str(2**63), str(10**20), "", " 7 ", "\x00", "[]"]
values = st.sampled_from(AWKWARD) | st.text(max_size=12) | st.integers().map(str)
SURFACE = hypothesis.settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@pytest.fixture
def people(learner_work: tuple[User, BenchJob], settings: Any) -> dict[str, Any]:
    """A class with a learner (with a job and a document: ``learner_work``) and its instructor, and one
    of each object a path can name."""
    settings.LAB_MODE = "class"
    learner, job = learner_work
    instructor = User.objects.create_user("surface-instructor")
    room = class_services.classroom_create(name="표면반", instructor=instructor)
    Membership.objects.create(classroom=room, user=learner)
    Conversation.objects.create(owner=learner, title="대화")
    return {"learner": learner, "instructor": instructor, "id": min(job.pk, room.pk)}


def test_the_walk_reads_the_surface_it_claims() -> None:
    assert {"ids", "job", "page", "kind", "top_k_max", "prediction", "reflection"} <= set(NAMES)
    assert "/bench/1/export.json" in {concrete(r, 1) for r in ROUTES}
    assert len(ROUTES) > 30 and not [r for r in ROUTES if "<" in concrete(r, 1) or "(" in concrete(r, 1)]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("who", ["learner", "instructor"])
@SURFACE
# Every name at once with each number a naive parser gets wrong, by GET and by POST, on the real ids.
@example(params=dict.fromkeys(NAMES, "²"), number=-1, post=False)
@example(params=dict.fromkeys(NAMES, "²"), number=-1, post=True)
@example(params=dict.fromkeys(NAMES, "9" * 5000), number=-1, post=False)
@example(params=dict.fromkeys(NAMES, "9" * 5000), number=-1, post=True)
@example(params=dict.fromkeys(NAMES, str(2**63)), number=-1, post=False)
@example(params=dict.fromkeys(NAMES, str(2**63)), number=-1, post=True)
@given(
    params=st.dictionaries(st.sampled_from(NAMES), values, max_size=5),
    number=st.sampled_from([0, 1, 2**31, 10**18]) | st.just(-1),
    post=st.booleans(),
)
def test_any_parameter_on_any_url_gets_an_answer_not_a_server_error(
    people: dict[str, Any], route: str, who: str, params: dict[str, str], number: int, post: bool
) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(people[who])
    path = concrete(route, people["id"] if number < 0 else number)
    response = client.post(path, params) if post else client.get(path, params)
    assert response.status_code < 500, (path, params, response.status_code)
