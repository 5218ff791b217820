"""How long a class's gradebook takes against an ordinary lab page: a measurement, not a test.

    python manage.py bench_gradebook --learners 30 --runs 2 --results DIR

Makes a throwaway class (``bench-gradebook-*`` accounts, removed afterwards) whose learners
each have ``--runs`` finished runs of every lab, their results taken from saved ones:
``--results DIR`` reads the ``labN-run*.json`` files that ``lab_reliability --save DIR``
writes; without it, the latest finished lab run of each lab in the database is copied.
Then it times, through Django's test client, the gradebook page (``/classes/<id>/results/``)
on its first read (the runs' outcomes are computed and kept) and its later reads, and a
learner's lab page, and prints the medians and the ratio.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import Client, override_settings

from bench.models import BenchJob
from labapp.classes.services import classroom_create
from labapp.labs.catalog import LABS
from labapp.models import Classroom, Membership
from labapp.ops.report import emit


def saved_results(folder: Path | None) -> dict[int, dict[str, Any]]:
    """A finished run's results per lab: from ``lab_reliability --save`` files, else the database."""

    found: dict[int, dict[str, Any]] = {}
    for number in LABS:
        if folder is not None:
            files = sorted(folder.glob(f"lab{number}-run*.json"))
            if files:
                found[number] = json.loads(files[0].read_text())["results"]
            continue
        job = BenchJob.objects.filter(lab=number, status=BenchJob.Status.DONE).order_by("-pk").first()
        if job is not None:
            found[number] = job.results
    return found


def _timed(client: Any, url: str, times: int) -> tuple[float, list[float]]:
    """The first read's milliseconds, and the later reads'."""
    seen = []
    for _ in range(times + 1):
        started = time.perf_counter()
        response = client.get(url)
        seen.append(1000 * (time.perf_counter() - started))
        if response.status_code != 200:
            raise CommandError(f"{url} answered {response.status_code}")
    return seen[0], seen[1:]


class Command(BaseCommand):
    help = "The gradebook's time against a lab page's, on a throwaway class with saved results."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--learners", type=int, default=30)
        parser.add_argument("--runs", type=int, default=2, help="finished runs per learner and lab")
        parser.add_argument("--results", type=Path, default=None, help="a lab_reliability --save folder")
        parser.add_argument("--times", type=int, default=5, help="reads of each page after the first")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:

        results = saved_results(options["results"])
        if not results:
            raise CommandError("no saved results: pass --results DIR (lab_reliability --save) or run a lab first")
        tag = f"bench-gradebook-{uuid.uuid4().hex[:6]}"
        teacher = User.objects.create(username=f"{tag}-teacher")
        hosts = override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"])  # the test client's name
        try:
            hosts.enable()
            room = classroom_create(name=tag, instructor=teacher)
            learners = [User.objects.create(username=f"{tag}-{i}") for i in range(options["learners"])]
            Membership.objects.bulk_create([Membership(classroom=room, user=u) for u in learners])
            BenchJob.objects.bulk_create(
                BenchJob(owner=u, kind=LABS[n].job_kind, lab=n, status="done", results=r, config={"seed": 1})
                for u in learners
                for n, r in results.items()
                for _ in range(options["runs"])
            )
            instructor, learner = Client(), Client()
            instructor.force_login(teacher)
            learner.force_login(learners[0])
            first, later = _timed(instructor, f"/classes/{room.pk}/results/", options["times"])
            lab = max(results, key=lambda n: len(json.dumps(results[n])))  # the lab with the largest results
            _lab_first, lab_later = _timed(learner, f"/labs/{lab}/", options["times"])
        finally:
            hosts.disable()
            User.objects.filter(username__startswith=tag).delete()  # their memberships and runs go too
            Classroom.objects.filter(name=tag).delete()
        row = {
            "learners": options["learners"],
            "labs": len(results),
            "runs_per_lab": options["runs"],
            "gradebook_first_ms": round(first),
            "gradebook_ms": round(statistics.median(later)),
            "lab_page": lab,
            "lab_page_ms": round(statistics.median(lab_later)),
        }
        row["ratio"] = round(row["gradebook_ms"] / row["lab_page_ms"], 2) if row["lab_page_ms"] else None

        def text_lines() -> Iterator[str]:
            yield (
                f"{row['learners']} learners × {row['labs']} labs × {row['runs_per_lab']} runs: gradebook "
                f"{row['gradebook_ms']} ms (first read {row['gradebook_first_ms']} ms), lab {lab} page "
                f"{row['lab_page_ms']} ms, ratio {row['ratio']}"
            )

        emit(self.stdout, row, json_wanted=options["json"], lines=text_lines)
