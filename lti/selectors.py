"""Reads for the class page: the LMS course a class was made from, and its scores not sent yet."""

from __future__ import annotations

from typing import Any

from labapp.models import Classroom
from lti import grades
from lti.models import CourseClass


def course_of(classroom: Classroom) -> dict[str, Any] | None:
    """The class's LMS course (None for a class made here), with the count of scores the LMS has not taken."""
    course = CourseClass.objects.filter(classroom=classroom).select_related("context").first()
    if course is None:
        return None
    return {"course": course, "unsent": grades.unsent(classroom).count()}
