"""How soon a page's chart draws its first point, with an empty and a warm browser cache: a measurement.

    python manage.py chart_load --url http://127.0.0.1:8000 --times 5

Against a running web server that shares this process's database: the latest finished team
demo sweep, length sweep and lab run in the database are copied to a throwaway account
(``chart-load-*``, removed afterwards), and Chromium (Playwright, Debian's ``/usr/bin/chromium``)
opens each page that draws them (``/demo/?job=N``, ``/bench/N/``, ``/labs/N/``) ``--times``
times, each time in a fresh browser context: once cold (empty cache), then once warm (the
same context again). For each load it takes the time from navigation start to the first
plotly point or line in the page's SVG (a MutationObserver installed before the page's own
scripts) and the bytes over the wire (Resource Timing's ``transferSize``: a cached file
counts 0). It prints the medians with their 95 % intervals and warm ÷ the 1 s goal
(docs/benchmarks.md). Speeds vary from hour to hour on a shared machine: say what else ran.
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import Client

from bench import stats
from bench.kinds import retrieval, sweep
from bench.models import BenchJob
from labapp.ops.report import emit

GOAL_S = 1.0  # issue 27: a chart drawn within 1 s of a warm-cache load
POINT = ".plotly .scatterlayer .point, .plotly .scatterlayer .js-line, .plotly .barlayer .point"
WATCH = (  # before the page's own scripts: the moment the first point or line enters the SVG
    "(() => { const seen = () => document.querySelector(" + json.dumps(POINT) + ");"
    " const note = () => { if (window.__firstPoint === undefined && seen()) window.__firstPoint = performance.now(); };"
    " new MutationObserver(note).observe(document, { childList: true, subtree: true }); })();"
)
BYTES = """
() => [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")]
  .reduce((sum, entry) => sum + (entry.transferSize || 0), 0)
"""


@dataclass(frozen=True)
class Chart:
    """One page with a chart: its name in the report, which finished job it needs, its address."""

    name: str
    kind: str
    lab: bool | None  # True: a lab run; False: not a lab run; None: either
    path: str  # with {job} and {lab}


CHARTS = (
    Chart("demo", retrieval.KIND.name, None, "/demo/?job={job}"),
    Chart("sweep", sweep.KIND.name, None, "/bench/{job}/"),
    Chart("lab", "", True, "/labs/{lab}/"),
)


def _source(chart: Chart, chosen: int | None) -> BenchJob | None:
    """The finished job ``chosen`` (an id), else the latest finished job the chart can draw."""
    rows = BenchJob.objects.filter(status=BenchJob.Status.DONE).exclude(results={})
    rows = rows.filter(kind=chart.kind) if chart.kind else rows
    rows = rows.filter(lab__isnull=not chart.lab) if chart.lab is not None else rows
    if chosen is not None:
        found = rows.filter(pk=chosen).first()
        if found is None:
            raise CommandError(f"--{chart.name}-job {chosen}: no finished job of that id that the {chart.name} draws")
        return found
    return rows.order_by("-pk").first()


def copied(owner: User, chosen: dict[str, int | None]) -> dict[str, str]:
    """chart name → the page drawing the owner's copy of its job (``chosen`` ids, else the latest finished
    one; absent: no such job)."""
    pages = {}
    for chart in CHARTS:
        source = _source(chart, chosen.get(chart.name))
        if source is None:
            continue
        job = BenchJob.objects.create(
            owner=owner, kind=source.kind, lab=source.lab, status=BenchJob.Status.DONE, config=source.config,
            results=source.results, lab_summary=source.lab_summary, engine_url=source.engine_url,
            started_at=source.started_at, finished_at=source.finished_at,
        )  # fmt: skip
        pages[chart.name] = chart.path.format(job=job.pk, lab=source.lab)
    return pages


def session_cookie(user: User, url: str) -> dict[str, Any]:
    """A signed-in session of ``user`` as a browser cookie for ``url`` (the server reads the same sessions)."""
    client = Client()
    client.force_login(user)
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": url,
    }


def _load(page: Any, address: str, timeout_ms: float) -> tuple[float, int]:
    """(seconds to the first point, bytes over the wire) of one load of ``address``."""
    response = page.goto(address, wait_until="load")
    if response is None or response.status != 200:
        raise CommandError(f"{address} answered {response.status if response else 'nothing'}")
    page.wait_for_function("window.__firstPoint !== undefined", timeout=timeout_ms)
    return page.evaluate("window.__firstPoint") / 1000, int(page.evaluate(BYTES))


def measured(browser: Any, cookie: dict[str, Any], address: str, times: int, timeout_ms: float) -> dict[str, Any]:
    """``times`` fresh contexts, each loading ``address`` cold and then warm."""
    loads: dict[str, list[tuple[float, int]]] = {"cold": [], "warm": []}
    for _ in range(times):
        context = browser.new_context(viewport={"width": 1920, "height": 1080})
        try:
            context.add_cookies([cookie])
            context.add_init_script(WATCH)
            page = context.new_page()
            for state in ("cold", "warm"):
                loads[state].append(_load(page, address, timeout_ms))
        finally:
            context.close()
    return {state: _summary(pairs) for state, pairs in loads.items()}


def _summary(pairs: list[tuple[float, int]]) -> dict[str, Any]:
    seconds = [s for s, _bytes in pairs]
    return {
        "first_point_s": round(statistics.median(seconds), 3),
        "first_point_ci_s": stats.median_ci(seconds),
        "bytes": round(statistics.median([b for _s, b in pairs])),
        "loads": len(pairs),
    }


def _span(row: dict[str, Any]) -> str:
    ci = row["first_point_ci_s"]
    interval = f" [{ci[0]:.2f}–{ci[1]:.2f}]" if ci else ""
    return f"{row['first_point_s']:.2f} s{interval}, {row['bytes']:,} B"


class Command(BaseCommand):
    help = "Seconds to a chart's first drawn point (cold and warm cache) on the demo, a sweep and a lab page."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", required=True, help="the running web server, e.g. http://127.0.0.1:8000")
        parser.add_argument("--times", type=int, default=5, help="fresh browser contexts per page")
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a chart's first point")
        for chart in CHARTS:
            parser.add_argument(
                f"--{chart.name}-job", type=int, default=None, help="the job to copy (default: the latest)"
            )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["times"] < 1:
            raise CommandError("--times must be 1 or more")
        url = options["url"].rstrip("/")
        owner = User.objects.create(username=f"chart-load-{uuid.uuid4().hex[:6]}")
        try:
            pages = copied(owner, {c.name: options[f"{c.name}_job"] for c in CHARTS})
            if not pages:
                raise CommandError("no finished demo sweep, length sweep or lab run in the database: run one first")
            rows = self.measure_all(url, pages, owner, options)
        finally:
            owner.delete()  # its copied jobs and its session go too
        missing = [c.name for c in CHARTS if c.name not in pages]
        report = {"url": url, "goal_s": GOAL_S, "pages": rows, "missing": missing}

        def text_lines() -> Iterator[str]:
            yield f"first drawn point at 1920×1080, median of {options['times']} fresh browser contexts ({url}):"
            for name, row in rows.items():
                yield (
                    f"{name} {row['path']}: cold {_span(row['cold'])}; warm {_span(row['warm'])}; "
                    f"warm ÷ {GOAL_S:g} s goal {row['warm_to_goal']:.2f}"
                )
            for name in missing:
                yield f"{name}: no finished job of its kind in the database, not measured"

        emit(self.stdout, report, json_wanted=options["json"], lines=text_lines)

    def measure_all(self, url: str, pages: dict[str, str], owner: User, options: dict[str, Any]) -> dict[str, Any]:
        from playwright.sync_api import Error, sync_playwright

        cookie = session_cookie(owner, url)
        rows = {}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            try:
                for name, path in pages.items():
                    try:
                        row = measured(browser, cookie, url + path, options["times"], 1000 * options["timeout"])
                    except Error as exc:  # the server is down, or the page drew no point in time
                        why = str(exc).splitlines()[0]
                        raise CommandError(f"{name} {url + path}: no chart point measured ({why})") from exc
                    rows[name] = {"path": path, **row, "warm_to_goal": row["warm"]["first_point_s"] / GOAL_S}
            finally:
                browser.close()
        return rows
