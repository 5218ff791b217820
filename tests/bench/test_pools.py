"""Engine pools and the fair queue (bench.pools): round-robin order, one waiting run per learner, places
and expected starts, the engine a job gets by pool and hardware, where the chat goes.

The engine lock is a stand-in here (no Redis); the same dispatch with real Redis, a real worker and
two scripted engines is in test_pools_integration.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from celery.exceptions import Retry
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from bench import engines, kinds, pools, services, tasks
from bench.engine_lock import EngineBusy
from bench.kinds.speed import SpeedConfig
from bench.models import BenchJob, Engine
from labapp.ops import scripted

SMALL = SpeedConfig(repeats=1, shapes=((20, 4), (60, 4), (20, 8)), check=(40, 6), seed=5)
GPU = ("gpu", "H200")


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks.job_run, "delay", lambda job_id: None)  # the rows are what these tests read


@dataclass
class Locks:
    """The engine lock without Redis: taking an engine in ``held`` raises EngineBusy; ``asked``: every take."""

    held: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)


@pytest.fixture
def locks(monkeypatch: pytest.MonkeyPatch) -> Locks:
    found = Locks()

    @contextmanager
    def engine_lock(url: str, **_: Any) -> Iterator[None]:
        found.asked.append(url)
        if url in found.held:
            raise EngineBusy(url)
        found.held.add(url)
        try:
            yield None
        finally:
            found.held.discard(url)

    monkeypatch.setattr(pools, "engine_lock", engine_lock)
    return found


def learners(*names: str) -> list[User]:
    return [User.objects.create(username=name) for name in names]


def waiting(owner: User, queue: tuple[str, str] = ("default", ""), **fields: Any) -> BenchJob:
    pool, hardware = queue
    fields = {"kind": "speed", "config": {"repeats": 1, "seed": 1}, "engine_url": "http://e", **fields}
    return BenchJob.objects.create(owner=owner, pool=pool, hardware=hardware, pinned=False, **fields)


def served(job: BenchJob, at: Any) -> None:
    BenchJob.objects.filter(pk=job.pk).update(status="done", started_at=at, finished_at=at + timedelta(seconds=60))


# --- the fair order --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_three_learners_are_served_round_robin_not_first_come() -> None:
    ana, ben, cho = learners("ana", "ben", "cho")
    # Ana sends three jobs before Ben sends two and Cho one (the command line lets one person queue several).
    for owner, count in ((ana, 3), (ben, 2), (cho, 1)):
        for _ in range(count):
            waiting(owner)
    first_come = [j.owner.username for j in BenchJob.objects.order_by("pk")]
    assert first_come == ["ana", "ana", "ana", "ben", "ben", "cho"]
    queue = pools.fair_queue(("default", ""))
    assert [j.owner.username for j in queue] == ["ana", "ben", "cho", "ana", "ben", "ana"]
    assert [services.queue_position(j) for j in queue] == [1, 2, 3, 4, 5, 6]
    # One engine: each time, the head runs (and is served now); the order is asked again after each.
    now, ran = timezone.now(), []
    for minute in range(6):
        head = pools.fair_queue(("default", ""))[0]
        served(head, now + timedelta(minutes=minute))
        ran.append(head.owner.username)
    assert ran == ["ana", "ben", "cho", "ana", "ben", "ana"]


@pytest.mark.django_db
def test_the_owner_served_least_recently_goes_first_and_a_newcomer_before_everyone() -> None:
    ana, ben, cho = learners("ana", "ben", "cho")
    now = timezone.now()
    served(waiting(ben), now - timedelta(minutes=1))  # Ben ran a minute ago, Ana ten minutes ago, Cho never
    served(waiting(ana), now - timedelta(minutes=10))
    for owner in (ben, ana, cho):  # Ben was first to send again, Cho last
        waiting(owner)
    assert [j.owner.username for j in pools.fair_queue(("default", ""))] == ["cho", "ana", "ben"]
    other = waiting(ben, GPU)  # another pool's queue is its own
    assert [j.pk for j in pools.fair_queue(GPU)] == [other.pk]


# --- one waiting run per learner -----------------------------------------------------------------


@pytest.mark.django_db
def test_a_second_run_while_one_waits_is_refused_naming_it_and_cancelling_frees_the_place() -> None:
    ana, ben = learners("ana", "ben")
    first = services.job_submit(owner=ana, kind="speed", config={"repeats": 1})
    with pytest.raises(services.RunWaiting) as refused:
        services.job_submit(owner=ana, kind="speed", config={"repeats": 1})
    assert f"#{first.pk}" in str(refused.value) and "기다리는 실행" in str(refused.value)
    assert isinstance(refused.value, services.JobsBusy)  # every page that says "busy" says this too
    ben_job = services.job_submit(owner=ben, kind="speed", config={"repeats": 1})  # others are not held up
    assert services.queue_position(ben_job) == 2
    services.job_cancel(job=first)
    assert services.queue_position(BenchJob.objects.get(pk=ben_job.pk)) == 1  # the place is freed
    again = services.job_submit(owner=ana, kind="speed", config={"repeats": 1})
    BenchJob.objects.filter(pk=again.pk).update(status="running")  # once it runs, the next may wait
    assert services.job_submit(owner=ana, kind="speed", config={"repeats": 1}).status == "queued"


@pytest.mark.django_db
def test_the_bench_page_says_why_a_second_run_is_refused_and_shows_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import views

    monkeypatch.setattr(views, "engine_max_model_len", lambda: 8192)
    (ana,) = learners("ana")
    client = Client()
    client.force_login(ana)
    assert client.post("/bench/", {"kind": "speed", "repeats": "1"}).status_code == 302
    page = client.post("/bench/", {"kind": "speed", "repeats": "1"}).content.decode()
    job = BenchJob.objects.get()
    assert f"#{job.pk}" in page and "한 사람은 한 번에 실행 하나만" in page and BenchJob.objects.count() == 1
    assert f'data-job="{job.pk}" data-position="1"' in page and "곧 시작" in page  # the engine is free
    assert "측정 엔진(하드웨어 표시 없음) 중 먼저 비는 곳" in page and "하드웨어 —" not in page


@pytest.mark.django_db
def test_the_pin_choice_shows_only_when_another_measuring_engine_could_take_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench import views

    monkeypatch.setattr(views, "engine_max_model_len", lambda: 8192)
    (ana,) = learners("ana")
    client = Client()
    client.force_login(ana)
    assert 'id="pin-field"' not in client.get("/bench/").content.decode()  # the one engine: nothing to choose
    Engine.objects.create(name="twin", base_url="http://twin", role="measure")
    page = client.get("/bench/").content.decode()
    assert 'id="pin-field"' in page and "에서만 실행" in page and "하드웨어 표시가 없는" in page
    assert "엔진 엔진" not in page and "—인" not in page


# --- places and expected starts --------------------------------------------------------------------


@pytest.mark.django_db
def test_the_expected_start_comes_from_the_queues_recent_runs_of_the_same_settings(settings: Any) -> None:
    ana, ben, cho, dan = learners("ana", "ben", "cho", "dan")
    now = timezone.now()
    for seconds, seed in ((60, 1), (120, 2), (90, 3)):  # the same settings, other seeds: median 90 s
        done = waiting(dan, config={"repeats": 1, "seed": seed}, status="done")
        BenchJob.objects.filter(pk=done.pk).update(
            started_at=now - timedelta(hours=2), finished_at=now - timedelta(hours=2) + timedelta(seconds=seconds)
        )
    other_settings = waiting(dan, config={"repeats": 3, "seed": 4}, status="done")  # not like them: not counted
    BenchJob.objects.filter(pk=other_settings.pk).update(started_at=now, finished_at=now + timedelta(hours=1))
    # Running: one request of four done in 30 s, so 90 s left at its own pace.
    waiting(dan, status="running", started_at=now - timedelta(seconds=30), done_requests=1, total_requests=4)
    a, b = waiting(ana), waiting(ben)
    c = waiting(cho, config={"repeats": 5, "seed": 9})  # settings never run here: unknown from it on
    found = pools.places(("default", ""))
    assert found[a.pk].position == 1 and found[a.pk].starts_in_s == pytest.approx(90, abs=2)
    assert found[b.pk].position == 2 and found[b.pk].starts_in_s == pytest.approx(180, abs=2)
    assert found[b.pk].starts_in_min == 3
    assert found[c.pk].position == 3 and found[c.pk].starts_in_s == pytest.approx(270, abs=2)
    d = waiting(dan)  # Dan was served last: behind the others, and after Cho's unknown run
    assert pools.place(d) == pools.Place(4, None)
    client = Client()
    client.force_login(dan)
    page = client.get(f"/bench/{d.pk}/").content.decode()
    # Dan's own settings have finished runs: the page names what is missing, the time of Cho's run ahead.
    assert "아직 알 수 없음 (앞선 실행이 얼마나 걸릴지" in page and "이 설정으로" not in page
    # A second measuring engine of the queue: two start at once, and Dan's no longer waits for Cho's.
    Engine.objects.create(name="twin", base_url="http://twin", role="measure")
    found = pools.places(("default", ""))
    assert found[a.pk].starts_in_s == 0 and found[b.pk].starts_in_s == pytest.approx(90, abs=2)
    assert found[c.pk].starts_in_s == pytest.approx(90, abs=2) and found[d.pk].starts_in_s == pytest.approx(180, abs=2)
    client.force_login(ana)
    assert "곧 시작" in client.get(f"/bench/{a.pk}/").content.decode()
    client.force_login(ben)
    assert "약 2분 뒤 시작" in client.get(f"/bench/{b.pk}/").content.decode()


@pytest.mark.django_db
def test_a_running_run_that_began_with_its_quick_requests_is_expected_to_take_as_long_as_runs_like_it() -> None:
    ana, dan = learners("ana", "dan")
    now = timezone.now()
    for seconds, seed in ((280, 2), (300, 3), (320, 4)):  # Lab 1 runs like Dan's took about 300 s
        done = waiting(dan, config={"repeats": 1, "seed": seed}, status="done")
        BenchJob.objects.filter(pk=done.pk).update(
            started_at=now - timedelta(hours=1), finished_at=now - timedelta(hours=1) + timedelta(seconds=seconds)
        )
    # One request of four in 30 s: its pace says 90 s more, but its first requests were the quick ones.
    waiting(dan, status="running", started_at=now - timedelta(seconds=30), done_requests=1, total_requests=4)
    a = waiting(ana)
    assert pools.places(("default", ""))[a.pk].starts_in_s == pytest.approx(270, abs=2)
    # Past the usual time and still going: its own pace says how much is left, not "now".
    BenchJob.objects.filter(status="running").update(started_at=now - timedelta(seconds=400), done_requests=3)
    assert pools.places(("default", ""))[a.pk].starts_in_s == pytest.approx(400 / 3, abs=2)


@pytest.mark.django_db
def test_an_expected_start_under_a_minute_is_said_in_seconds_over_one_in_minutes() -> None:
    ana, ben, dan = learners("ana", "ben", "dan")
    now = timezone.now()
    # Running: one request of four done in 8 s, so 24 s left at its own pace; no finished run like it.
    waiting(dan, status="running", started_at=now - timedelta(seconds=8), done_requests=1, total_requests=4)
    a, b = waiting(ana), waiting(ben)
    found = pools.place(a)
    assert found is not None and found.position == 1 and found.starts_in_s == pytest.approx(24, abs=1)
    assert pools.place(b) == pools.Place(2, None)  # Ana's run has no finished run like it to last as long as
    client = Client()
    client.force_login(ana)
    page = client.get(f"/bench/{a.pk}/").content.decode()
    assert "대기열 1번째" in page and ("약 24초 뒤 시작" in page or "약 23초 뒤 시작" in page)
    client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    page = client.get(f"/bench/{a.pk}/").content.decode()
    assert "number 1 in the queue" in page and "Starts in about 2" in page and " s</span>" in page
    client.force_login(ben)
    client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert (
        "Expected start: not known yet (nothing yet to tell how long the runs ahead"
        in client.get(f"/bench/{b.pk}/").content.decode()
    )


# --- which engine a job gets ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_waits_in_its_picks_pool_and_hardware_and_gets_a_free_measuring_engine_there() -> None:
    made = {
        name: Engine.objects.create(name=name, base_url=f"http://{name}", pool=pool, hardware=hardware, role=role)
        for name, pool, hardware, role in (
            ("e1", "gpu", "H200", "measure"),
            ("e2", "gpu", "H200", "both"),
            ("e3", "gpu", "A100", "measure"),  # other hardware: results would not compare
            ("e4", "other", "H200", "measure"),  # another pool
            ("e5", "gpu", "H200", "chat"),  # never measured on
        )
    }
    assert [c.name for c in pools.measurers(GPU)] == ["e1", "e2"]
    (ana, ben, cho) = learners("ana", "ben", "cho")
    job = services.job_submit(owner=ana, kind="speed", config={"repeats": 1}, engine_url=made["e5"].base_url)
    assert (job.pool, job.hardware, job.pinned) == ("gpu", "H200", False)
    pinned = services.job_submit(owner=ben, kind="speed", config={"repeats": 1}, engine_url="http://e1", pinned=True)
    third = services.job_submit(owner=cho, kind="speed", config={"repeats": 1}, engine_url="http://e2")
    queue = pools.fair_queue(GPU)
    plan = pools.plan(queue, ["http://e1", "http://e2"], busy=set())
    assert [(j.pk, url) for j, url in plan] == [(job.pk, "http://e1"), (third.pk, "http://e2")]
    assert pinned.pinned and pinned.engine_url == "http://e1"  # Ben's, pinned to e1, waits for it
    plan = pools.plan(queue, ["http://e1", "http://e2"], busy={"http://e1"})  # e1 is measuring
    assert [(j.pk, url) for j, url in plan] == [(job.pk, "http://e2")]


@pytest.mark.django_db
def test_the_head_job_runs_on_the_free_engine_skipping_a_locked_one_and_records_it(
    locks: Locks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    locked, free = scripted.Script(delay_s=0.001), scripted.Script(delay_s=0.001)
    with scripted.serve(locked) as locked_url, scripted.serve(free) as free_url:
        for name, url in (("a-locked", locked_url), ("b-free", free_url)):
            Engine.objects.create(name=name, base_url=url, pool="gpu", hardware="H200", role="measure")
        ana, ben = learners("ana", "ben")
        served(waiting(ana, GPU), timezone.now())  # Ana was served just now: Ben's job is the head
        mine = waiting(ana, GPU)
        bens = waiting(ben, GPU)
        locks.held.add(locked_url)  # another worker is starting a job on it
        with pytest.raises(Retry):  # Ana's task runs Ben's job (the head), then asks again for her own
            tasks.job_run(mine.pk)
        bens.refresh_from_db()
        assert bens.status == "done" and bens.engine_url == free_url, bens.error
        assert locks.asked == [locked_url, free_url] and free.requests and not locked.requests
        assert BenchJob.objects.get(pk=mine.pk).status == "queued"
        assert tasks.job_run(bens.pk) == "done"  # Ben's own task finds it finished: it does not run twice
        assert BenchJob.objects.get(pk=bens.pk).attempts == 1
        assert tasks.job_run(mine.pk) == "done"
        assert BenchJob.objects.get(pk=mine.pk).engine_url == free_url
    client = Client()
    client.force_login(ben)
    page = client.get(f"/bench/{bens.pk}/").content.decode()
    assert "측정한 엔진" in page and "b-free" in page


@pytest.mark.django_db
def test_a_runs_end_sends_the_next_runs_task_at_once_and_waiting_tasks_ask_rarely_while_a_run_measures(
    locks: Locks, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """bench.tasks.hand_on: the engine is handed on as it frees, so a waiting task's own asks are a fallback:
    every BENCH_WAITING_ASK_S while a run of its queue measures, every WAIT_S while none does."""
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    sent: list[int] = []
    monkeypatch.setattr(tasks.job_run, "delay", sent.append)
    asks: list[float] = []

    def retry(**options: Any) -> Retry:
        asks.append(options["countdown"])
        return Retry()

    monkeypatch.setattr(tasks.job_run, "retry", retry)
    settings.BENCH_WAITING_ASK_S = 600
    with scripted.serve(scripted.Script(delay_s=0.001)) as url:
        Engine.objects.create(name="solo", base_url=url, pool="gpu", hardware="H200", role="measure")
        ana, ben, cho = learners("ana", "ben", "cho")
        anas, bens, chos = waiting(ana, GPU), waiting(ben, GPU), waiting(cho, GPU)
        assert tasks.job_run(anas.pk) == "done"  # Ana's own run, the head; then Ben's task is sent
        assert sent == [bens.pk] and not asks
        BenchJob.objects.filter(pk=bens.pk).update(status="running", engine_url=url, started_at=timezone.now())
        with pytest.raises(Retry):  # Cho's task: Ben's run measures, its end will hand on
            tasks.job_run(chos.pk)
        assert asks == [600] and sent == [bens.pk]
        BenchJob.objects.filter(pk=bens.pk).update(status="done", finished_at=timezone.now())
        locks.held.add(url)  # free by its rows, but another worker is taking it: nothing measures yet
        with pytest.raises(Retry):
            tasks.job_run(chos.pk)
        assert asks == [600, tasks.WAIT_S] and sent == [bens.pk]
        locks.held.clear()
        assert tasks.job_run(chos.pk) == "done"
        assert sent == [bens.pk]  # nothing waits after Cho's: nothing is sent


@pytest.mark.django_db
def test_a_running_row_keeps_its_engine_busy_and_a_queue_without_measuring_engines_fails_its_jobs(
    locks: Locks,
) -> None:
    Engine.objects.create(name="solo", base_url="http://solo", pool="gpu", hardware="H200", role="measure")
    ana, ben = learners("ana", "ben")
    waiting(ana, GPU, status="running", engine_url="http://solo", started_at=timezone.now())
    waiting(ben, GPU)
    assert pools.run_next(GPU) is None and not locks.asked  # busy by its row: the lock is not even asked
    lonely = waiting(ana, ("nowhere", "TPU"))
    assert pools.run_next(("nowhere", "TPU")) is None
    lonely.refresh_from_db()
    assert lonely.status == "failed" and "nowhere" in lonely.error and "측정 엔진이 없어" in lonely.error
    client = Client()
    client.force_login(ana)
    page = client.get(f"/bench/{lonely.pk}/").content.decode()
    assert "엔진:" in page and "측정한 엔진" not in page  # it never started: nothing measured it


# --- the chat ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_chat_goes_to_a_chatting_engine_that_is_not_measuring_and_shares_the_only_one() -> None:
    (ana,) = learners("ana")
    configured = engines.choices()[0]
    assert pools.chat_engine(None).url == configured.url  # the laptop: one engine for everything
    waiting(ana, status="running", engine_url=configured.url, started_at=timezone.now())
    assert pools.chat_engine(configured.url).url == configured.url  # shared; the job's disturbed check says so
    Engine.objects.create(name="talk", base_url="http://talk", role="chat")
    assert pools.chat_engine(configured.url).url == "http://talk"  # no job ever measures there
    Engine.objects.create(name="gpu", base_url="http://gpu", role="measure")
    assert pools.chat_engine("http://gpu").url == "http://talk"  # the pick measures only: its pool's chat engine
    Engine.objects.all().delete()
    Engine.objects.create(name="both", base_url="http://both", role="both")
    assert pools.chat_engine(configured.url).url == "http://both"  # the pick is measuring: the other one
    waiting(ana, status="running", engine_url="http://both", started_at=timezone.now())
    assert pools.chat_engine(configured.url).url == configured.url  # both measure: the pick, shared


@pytest.mark.django_db
def test_an_instructor_registers_an_engine_in_a_pool_with_a_role_and_the_page_shows_both() -> None:
    admin = User.objects.create(username="admin-p", is_staff=True)
    client = Client()
    client.force_login(admin)
    client.post("/engines/add/", {"name": "h200-a", "base_url": "http://h200-a:8000", "hardware": "H200",
                                  "pool": " gpu ", "role": "measure"})  # fmt: skip
    client.post("/engines/add/", {"name": "plain", "base_url": "http://plain:8000"})
    refused = client.post("/engines/add/", {"name": "odd", "base_url": "http://odd:8000", "role": "boss"}, follow=True)
    assert "역할은" in refused.content.decode() and not Engine.objects.filter(name="odd").exists()
    rows = {e.name: (e.pool, e.role) for e in Engine.objects.all()}
    assert rows == {"h200-a": ("gpu", "measure"), "plain": ("default", "both")}
    page = client.get("/engines/").content.decode()
    assert 'data-pool="gpu"' in page and 'data-role="measure"' in page and "측정과 채팅" in page


@pytest.mark.django_db
def test_the_chat_socket_asks_away_from_the_learners_pick_while_a_job_measures_on_it() -> None:
    from bench import selectors

    (ana,) = learners("ana")
    picked = Engine.objects.create(name="picked", base_url="http://picked", role="both")
    client = Client()
    client.force_login(ana)
    client.post("/engines/pick/", {"engine": str(picked.pk)})
    key = client.session.session_key
    assert selectors.chat_engine(key).url == "http://picked"
    waiting(ana, status="running", engine_url="http://picked", started_at=timezone.now())
    away = selectors.chat_engine(key)  # what labapp.asgi passes to the chat consumer
    assert (away.url, away.name) == ("", "기본 엔진")  # the configured engine of the pool, which is free
