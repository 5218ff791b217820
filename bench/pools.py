"""Which engine runs which job next, and where the chat goes: engine pools with roles and a fair queue.

Every engine (``bench.engines.choices``: the configured one and the registered ones) is in a
pool with a role: *measure* (lab runs and benchmark jobs, one job at a time), *chat* (shared,
never measured on) or *both*. A job waits in the queue of its pool and hardware label
(``BenchJob.pool``, ``BenchJob.hardware``: those of the engine the learner picked) and runs on
the first free measuring engine there, so results stay comparable; a ``pinned`` job runs on
its own engine only. ``BenchJob.engine_url`` becomes the engine that measured it.

The queue is fair: a learner has at most one waiting run (``bench.services.job_submit``), and
waiting runs go round-robin across their owners, the owner served least recently first, not
first come first served (``fair_order``). Each waiting run's place says its position and when
it should start, from the queue's recent runs of the same settings (``places``).

Dispatch: every job has its own Celery task (``bench.tasks.job_run``, acknowledged late). A task
calls ``run_next`` for its job's queue, which takes a free engine's lock and runs the job at the
head of the fair order that may use it, whichever task it belongs to; the task of that job
finds it finished later and does nothing. A run's end sends the task of the queue's next run at
once (``bench.tasks.hand_on``); a task whose own job still waits asks again, rarely while a run of
its queue measures (that run's end will hand on), often while none does. So the order is the
queue's, not the broker's, an engine is handed on as it frees, and a job whose task was lost
still runs. The engine lock (``bench.engine_lock``) keeps
one job per engine; the conditional claim (``bench.jobrun.JobRun.claim``) keeps a job from
running twice.
"""

from __future__ import annotations

import heapq
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from bench import engines
from bench.engine_lock import EngineBusy, engine_lock
from bench.engines import Choice
from bench.jobrun import JobAlive, JobRun
from bench.models import DEFAULT_POOL, BenchJob, Engine
from bench.outages import Outages
from labapp.said import gettext as _  # the reason is saved and said again in each reader's language

Queue = tuple[str, str]  # (pool, hardware label)
RECENT_RUNS = 5  # a run's expected time is the median of this many finished runs like it
RUNS_LOOKED_AT = 100  # how far back finished runs are searched for ones like it


def _bare(url: str) -> str:
    return url.rstrip("/")


def queue_of(url: str) -> Queue:
    """The queue a job asked for on ``url`` waits in: that engine's pool and hardware (the default pool
    for an address no longer registered)."""
    found = engines.member(url)
    return (found.pool, found.hardware) if found is not None else (DEFAULT_POOL, "")


def measurers(queue: Queue, options: list[Choice] | None = None) -> list[Choice]:
    """The engines a job of ``queue`` may run on: measuring ones of that pool with that hardware label."""
    pool, hardware = queue
    every = engines.choices() if options is None else options
    return [c for c in every if c.measures and c.pool == pool and c.hardware == hardware]


def comparable_urls(url: str) -> list[str]:
    """``url`` and the engines whose runs compare with its own (the same pool and hardware), each
    spelled with and without a trailing slash, as a job's ``engine_url`` may be."""
    options = engines.choices()
    found = engines.member(url, options)
    same = [c.url for c in measurers((found.pool, found.hardware), options)] if found is not None else []
    return sorted({spelling for u in [url, *same] for spelling in (_bare(u), _bare(u) + "/")})


def measuring_urls() -> set[str]:
    """The engines a job is measuring on now (its row says running), without a trailing slash."""
    running = BenchJob.objects.filter(status=BenchJob.Status.RUNNING).values_list("engine_url", flat=True)
    return {_bare(url) for url in running}


def measuring_in(queue: Queue) -> bool:
    """Whether a run of ``queue`` is measuring now (its end will hand the queue on: ``bench.tasks.hand_on``)."""
    pool, hardware = queue
    return BenchJob.objects.filter(status=BenchJob.Status.RUNNING, pool=pool, hardware=hardware).exists()


# --- the fair order -----------------------------------------------------------------------------


def last_served(owner_ids: Iterable[int]) -> dict[int, datetime]:
    """When each owner's latest job started (owners never served are absent)."""
    rows = (
        BenchJob.objects.filter(owner_id__in=set(owner_ids), started_at__isnull=False)
        .values("owner_id")
        .annotate(last=Max("started_at"))
    )
    return {row["owner_id"]: row["last"] for row in rows}


def fair_order(jobs: Iterable[BenchJob], served: dict[int, datetime]) -> list[BenchJob]:
    """Waiting jobs round-robin across their owners: every owner's first waiting job before anyone's
    second, and among those the owner served least recently (never: first) goes first; ties and one
    owner's own jobs by age."""
    rounds: dict[int, int] = defaultdict(int)
    keyed = []
    for job in sorted(jobs, key=lambda j: j.pk):
        last = served.get(job.owner_id)
        keyed.append(((rounds[job.owner_id], last is not None, last.timestamp() if last else 0.0, job.pk), job))
        rounds[job.owner_id] += 1
    return [job for _key, job in sorted(keyed, key=lambda pair: pair[0])]


def fair_queue(queue: Queue) -> list[BenchJob]:
    """The queue's waiting jobs in the order they will run."""
    pool, hardware = queue
    waiting = list(BenchJob.objects.filter(status=BenchJob.Status.QUEUED, pool=pool, hardware=hardware))
    return fair_order(waiting, last_served(j.owner_id for j in waiting))


def plan(waiting: list[BenchJob], engine_urls: list[str], busy: set[str]) -> list[tuple[BenchJob, str]]:
    """(job, engine) for each waiting job that could start now, in the fair order: each takes the first
    free engine it may use (a pinned job, its own), skipping ``busy`` ones and those taken before it."""
    taken = set(busy)
    steps = []
    for job in waiting:
        options = [_bare(job.engine_url)] if job.pinned else engine_urls
        url = next((u for u in options if u not in taken), None)
        if url is not None:
            taken.add(url)
            steps.append((job, url))
    return steps


# --- dispatch ---------------------------------------------------------------------------------


def strand(queue: Queue) -> int:
    """Waiting jobs of a queue without any measuring engine fail at once, saying why; how many."""
    pool, hardware = queue
    error = BenchJob.error_fields(
        _(
            "풀 '%(pool)s'에 하드웨어가 '%(hardware)s'인 측정 엔진이 없어 실행할 수 없습니다. "
            "엔진 페이지에서 다른 엔진을 고르고 다시 실행하세요."
        )
        % {"pool": pool, "hardware": hardware or "—"}
    )
    return BenchJob.fail_waiting(queue, error, pinned=False)


def run_next(queue: Queue) -> BenchJob | None:
    """Run the first job of the queue's fair order that has a free engine, on that engine, to its end;
    the job as it ended, or None when none could start (every engine it may use is busy, or nothing waits).

    Free: no running row on it, its health check answered (``bench.outages``: one that does not is
    passed over, and the queue's runs wait for it), and its engine lock taken here (another worker
    may be about to start on it). A job another delivery claimed first is skipped and the queue read again.
    """
    engine_urls = [_bare(c.url) for c in measurers(queue)]
    if not engine_urls:
        strand(queue)
    busy = measuring_urls()
    if not fair_queue(queue):
        return None
    outages = Outages()
    try:
        down = {url for url in engine_urls if url not in busy and not outages.up(url)}
        if down and outages.give_up(queue, engine_urls):
            return None
    finally:
        outages.close()
    busy |= down
    for _attempt in range(len(engine_urls) + 8):
        steps = plan(fair_queue(queue), engine_urls, busy)
        if not steps:
            return None
        job, url = steps[0]
        try:
            with engine_lock(url) as lease:
                run = JobRun(job.pk, lease=lease, engine_url=None if job.pinned else url)
                try:
                    claimed = run.claim()
                except JobAlive:
                    claimed = False
                if claimed:
                    run.carry()
                    return BenchJob.objects.get(pk=job.pk)
        except EngineBusy:
            busy.add(url)  # another worker is starting a job on it
    return None


# --- places and expected times --------------------------------------------------------------


def settings_shape(config: dict[str, Any]) -> str:
    """A job's settings without its seed: runs with the same shape take about as long."""
    return json.dumps({k: v for k, v in (config or {}).items() if k != "seed"}, sort_keys=True, default=str)


class Durations:
    """The median time of the queue's recent finished runs of each kind and settings shape (None: none yet)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.found: dict[tuple[str, str], float | None] = {}

    def of(self, job: BenchJob) -> float | None:
        key = (job.kind, settings_shape(job.config))
        if key not in self.found:
            pool, hardware = self.queue
            done = (
                BenchJob.objects.filter(
                    status=BenchJob.Status.DONE,
                    pool=pool,
                    hardware=hardware,
                    kind=job.kind,
                    started_at__isnull=False,
                    finished_at__isnull=False,
                )
                .order_by("-finished_at")
                .values("config", "started_at", "finished_at")[:RUNS_LOOKED_AT]
            )
            like = [r for r in done if settings_shape(r["config"]) == key[1]][:RECENT_RUNS]
            seconds = [
                (r["finished_at"] - r["started_at"]).total_seconds()
                for r in like
                if r["finished_at"] and r["started_at"]
            ]
            self.found[key] = statistics.median(seconds) if seconds else None
        return self.found[key]

    def left(self, job: BenchJob, now: datetime) -> float:
        """Seconds a running job has left (inf: unknown): the longer of two guesses.

        Finished runs like it, less the time it has run, come first: a run's requests are not equal work
        (a lab warms the engine, then measures longer prompts), so counting requests alone told a learner
        behind Lab 1 about a fifth of the real wait. Its own pace counts when it runs slower than those
        runs did, or when no run like it has finished yet.
        """
        elapsed = (now - job.started_at).total_seconds() if job.started_at else 0.0
        pace = math.inf
        if 0 < job.done_requests <= job.total_requests:
            pace = elapsed * (job.total_requests - job.done_requests) / job.done_requests
        usual = self.of(job)
        if usual is None:
            return pace
        return max(usual - elapsed, 0.0 if math.isinf(pace) else pace)


@dataclass(frozen=True)
class Place:
    """A waiting job's place: ``position`` 1 starts next; ``starts_in_s`` None when unknown."""

    position: int
    starts_in_s: float | None
    engine_down_s: float | None = None  # every engine of its queue has been down this long: it waits for one

    @property
    def gives_up_in_s(self) -> int | None:
        """Whole seconds before the run fails for want of an engine (``bench.outages``), while they are down."""
        if self.engine_down_s is None:
            return None
        return max(0, round(settings.BENCH_ENGINE_DOWN_WAIT_S - self.engine_down_s))

    @property
    def starts_in_sec(self) -> int | None:
        """Whole seconds, as a page says them under a minute (0: now, the engine is free)."""
        return None if self.starts_in_s is None else round(self.starts_in_s)

    @property
    def starts_in_min(self) -> int | None:
        """Whole minutes, as a page says them from a minute on."""
        return None if self.starts_in_s is None else round(self.starts_in_s / 60)


def places(queue: Queue) -> dict[int, Place]:
    """Every waiting job of the queue (by id): its position in the fair order and when it should start.

    The start is simulated: each engine frees when its running job ends (at that job's pace),
    then takes the next waiting job, which lasts as long as the queue's recent finished runs of
    its kind and settings. Unknown once any of those is (no finished run like it yet).
    """
    pool, hardware = queue
    urls = [_bare(c.url) for c in measurers(queue)]
    count = max(1, len(urls))
    durations, now = Durations(queue), timezone.now()
    outages = Outages()
    try:
        down_s = outages.all_down_for(urls)
    finally:
        outages.close()
    running = BenchJob.objects.filter(status=BenchJob.Status.RUNNING, pool=pool, hardware=hardware)
    free_at = sorted(durations.left(job, now) for job in running)[:count]
    free_at += [0.0] * (count - len(free_at))
    heapq.heapify(free_at)
    found = {}
    for position, job in enumerate(fair_queue(queue), start=1):
        starts = heapq.heappop(free_at)
        found[job.pk] = Place(position, None if math.isinf(starts) else starts, down_s)
        usual = durations.of(job)
        heapq.heappush(free_at, math.inf if usual is None else starts + usual)
    return found


def place(job: BenchJob) -> Place | None:
    """The job's place while it waits (None once it runs or ended)."""
    if job.status != BenchJob.Status.QUEUED:
        return None
    return places((job.pool, job.hardware)).get(job.pk)


def board() -> list[tuple[BenchJob, Place | None]]:
    """Every active job, queue by queue: the running ones (place None), then the waiting ones in the fair order."""
    active = list(BenchJob.objects.filter(status__in=[BenchJob.Status.QUEUED, BenchJob.Status.RUNNING]).order_by("pk"))
    queues = sorted({(job.pool, job.hardware) for job in active})
    rows: list[tuple[BenchJob, Place | None]] = []
    for queue in queues:
        rows += [(job, None) for job in active if (job.pool, job.hardware) == queue and job.status == "running"]
        found = places(queue)
        waiting = [job for job in active if job.pk in found]
        rows += [(job, found[job.pk]) for job in sorted(waiting, key=lambda j: found[j.pk].position)]
    return rows


# --- the chat ----------------------------------------------------------------------------------


def chat_engine(preferred_url: str | None = None, options: list[Choice] | None = None) -> Choice:
    """Where a chat answer goes: an engine of the preferred engine's pool that chats and is not measuring,
    chat-only ones first (no job ever measures there), the preferred one first among equals.

    When each is measuring, or the pool has one engine (the laptop), the chat shares one with the
    job: the preferred one if it chats, as before pools; the job's disturbed check reports it.
    """
    every = engines.choices() if options is None else options
    preferred = engines.member(preferred_url, every) if preferred_url else None
    preferred = preferred or every[0]  # the configured engine
    talkers = [c for c in every if c.pool == preferred.pool and c.chats]
    if not talkers:
        return every[0]
    if len(talkers) == 1:
        return talkers[0]  # nothing to choose: no need to ask who is measuring
    measuring = measuring_urls()
    rank = sorted(talkers, key=lambda c: (c.role != Engine.Role.CHAT, c.url != preferred.url))
    free = [c for c in rank if _bare(c.url) not in measuring]
    if free:
        return free[0]
    return preferred if preferred in talkers else rank[0]
