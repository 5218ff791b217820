"""A load run's sanity checks (bench.sanity) on hand-made records and on the scripted server."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import kinds, runner, sanity, services
from bench.kinds import load
from bench.kinds.load import LoadConfig
from bench.models import BenchJob
from labapp.ops import scripted
from rag.vllm.records import RequestRecord


def _done(t_send: float, t_end: float, ttft: float = 0.1) -> RequestRecord:
    chunks = [t_send + ttft, t_end]
    return RequestRecord(t_send=t_send, text_chunk_at=chunks, t_end=t_end, success=True, output_tokens=2)


def _timeline(t: list[float], running: list[float], waiting: list[float]) -> dict[str, list[float]]:
    return {"t": t, "running": running, "waiting": waiting}


def test_littles_law_by_hand_holds_at_the_concurrency_asked_and_the_engines_count() -> None:
    # Two streams, four 1 s requests back to back: 2 req/s × 1 s = 2 in flight.
    records = [_done(0, 1), _done(0, 1), _done(1, 2), _done(1, 2)]
    at = [0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 5.0]  # 0.0: at the first send, 5.0: after the level; neither counts
    timeline = _timeline(at, [0, 2, 2, 2, 2, 2, 2, 0], [0] * 8)
    check = sanity.little(records, duration=2.0, target=2, timeline=timeline)
    assert check["throughput"] == 2.0 and check["mean_w_s"] == 1.0 and check["lambda_w"] == 2.0
    assert check["engine_in_flight"] == 2.0
    assert check["error_vs_target_pct"] == 0.0 and check["error_vs_engine_pct"] == 0.0
    assert check["ok"] is check["target_ok"] is check["engine_ok"] is True


def test_littles_law_fails_when_the_client_kept_fewer_in_flight_than_asked() -> None:
    records = [_done(0, 1), _done(0, 1), _done(1, 2), _done(1, 2)]
    check = sanity.little(records, duration=2.0, target=4, timeline=None)
    assert check["error_vs_target_pct"] == -50.0 and check["ok"] is False
    assert check["engine_in_flight"] is None and check["error_vs_engine_pct"] is None
    few = sanity.little(records, duration=2.0, target=2, timeline=_timeline([0.5, 1.0, 1.5], [9] * 3, [0] * 3))
    assert few["engine_in_flight"] is None and few["ok"] is True  # three samples are too few to judge by


def test_littles_law_fails_when_the_engine_held_more_than_the_client_sent() -> None:
    records = [_done(0, 1), _done(0, 1), _done(1, 2), _done(1, 2)]
    timeline = _timeline([0.3, 0.6, 0.9, 1.2, 1.5], [2] * 5, [1] * 5)  # another program's request waited all along
    check = sanity.little(records, duration=2.0, target=None, timeline=timeline)
    assert check["error_vs_engine_pct"] == pytest.approx(-33.33, abs=0.01) and check["ok"] is False
    assert check["engine_ok"] is False and check["target_ok"] is None


def test_a_queue_growing_through_a_level_is_saturation_a_steady_one_is_not() -> None:
    # Sent every 0.1 s, each waits 0.2 s longer than the one before: TTFT and in-flight both rise.
    growing = [_done(0.1 * i, 0.1 * i + 0.3 + 0.2 * i, ttft=0.05 + 0.2 * i) for i in range(8)]
    verdict = sanity.rising(growing)
    assert verdict["saturated"] is True
    assert verdict["ttft_second_half_ms"] > verdict["ttft_first_half_ms"] * 1.5
    assert verdict["in_flight_second_half"] > verdict["in_flight_first_half"]
    steady = [_done(0.5 * i, 0.5 * i + 0.3, ttft=0.05) for i in range(8)]
    assert sanity.rising(steady)["saturated"] is False
    assert sanity.rising(steady[:3])["saturated"] is None  # too few to tell


def test_in_flight_when_sent_counts_the_others_still_running() -> None:
    records = [_done(0, 1), _done(0.5, 2), _done(0.9, 1.2), _done(1.5, 3)]
    assert sanity.in_flight_when_sent(records) == [0, 1, 2, 1]


def test_a_ramp_rises_as_vllm_bench_serve_computes_it() -> None:
    linear, exponential = ("linear", 1.0, 9.0), ("exponential", 1.0, 16.0)
    assert [runner.ramp_rate(linear, i, 5) for i in range(5)] == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert [runner.ramp_rate(exponential, i, 5) for i in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    offsets = runner.arrival_offsets(200, runner.LoadShape(ramp=("linear", 1.0, 20.0), seed=4))
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert offsets[0] == 0.0 and sum(gaps[:50]) / 50 > 4 * sum(gaps[-50:]) / 50  # later requests come faster
    with pytest.raises(ValueError):
        runner.LoadShape(ramp=("sideways", 1.0, 2.0))


def test_a_ramps_knee_is_the_rate_at_which_ttft_doubled() -> None:
    records = [_done(float(i), i + 0.5, ttft=0.1 if i < 12 else 0.5) for i in range(20)]
    rates = [1.0 + i for i in range(20)]
    assert sanity.ramp_knee(records, rates) == 15.0  # the third slow one makes the rolling median slow
    assert sanity.ramp_knee(records[:12], rates[:12]) is None  # no slow request


def test_a_ramp_that_does_not_rise_is_refused_at_its_field() -> None:
    from bench import configs

    with pytest.raises(configs.ConfigError) as refused:
        load.parse({"mode": "ramp", "ramp_start_rps": "8", "ramp_end_rps": "2"})
    assert refused.value.field == "ramp_end_rps"


def _measured(
    monkeypatch: pytest.MonkeyPatch, config: LoadConfig, username: str, *, max_streams: int = 0
) -> tuple[BenchJob, str]:
    """A load job with ``config`` on a scripted server in its own process; the job and its page as its owner."""
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: config)
    owner = User.objects.create(username=username)
    with scripted.spawn(ttft_ms=20, itl_ms=20, max_streams=max_streams) as url:
        job = BenchJob.objects.create(owner=owner, kind="load", config={"repeats": 1}, engine_url=url)
        done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    client = Client()
    client.force_login(owner)
    return done, client.get(f"/bench/{job.pk}/").content.decode()


@pytest.mark.django_db
def test_a_rate_sweep_past_the_scripted_servers_capacity_warns_and_stops_there(monkeypatch: pytest.MonkeyPatch) -> None:
    # One request at a time, 10 tokens 20 ms apart: about 5 req/s at most.
    small = LoadConfig(
        mode="rate", rates=(1.0, 30.0, 60.0), repeats=2, burstiness=100.0, input_tokens=20, output_tokens=10,
        slo_ttft_ms=60_000, slo_tpot_ms=60_000, at_saturation="stop",
    )  # fmt: skip
    done, page = _measured(monkeypatch, small, "saturating", max_streams=1)
    cells = done.results["cells"]
    assert [c["request_rate"] for c in cells] == [1.0, 30.0]  # stopped at the first saturated level
    assert cells[0]["sanity"]["rising"]["saturated"] is False and cells[1]["sanity"]["rising"]["saturated"] is True
    assert done.results["stopped_at_saturation"] == 30.0 and done.results["sanity"]["saturated_level"] == 30.0
    assert cells[1]["sanity"]["achieved_share"] < 0.5  # it sent 30 req/s and finished about 5
    # The engine counted the queue the client built: λ·W agrees with its running + waiting.
    saturated = cells[1]["sanity"]["little"]
    assert saturated["engine_in_flight"] > 2 and abs(saturated["error_vs_engine_pct"]) < 35
    assert 'id="saturation-warning"' in page and "30 req/s" in page and 'id="preemption-ok"' in page


@pytest.mark.django_db
def test_a_concurrency_sweep_shows_littles_law_and_the_max_valid_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scripted server in its own process, as an engine is: in this one it would share the GIL with
    # the client and hold each request a while before the client's send reaches it (which the engine
    # check then rightly reports as requests neither side counted).
    small = LoadConfig(
        concurrencies=(1, 4), repeats=3, input_tokens=20, output_tokens=12, slo_ttft_ms=60_000, slo_tpot_ms=60_000
    )
    done, page = _measured(monkeypatch, small, "little")
    for cell in done.results["cells"]:
        little = cell["sanity"]["little"]
        assert little["target"] == cell["concurrency"] and little["ok"] is True, little
        assert abs(little["error_vs_target_pct"]) < 20
        # The engine's own count, for comparison (on two shared cores the client's extra time shows here).
        assert little["engine_in_flight"] is not None and little["engine_in_flight"] <= cell["concurrency"]
        low, high = cell["ci_ttft_ms"]  # each level's median with its 95 % interval
        assert low <= cell["median_ttft_ms"] <= high
    assert done.results["sanity"]["little_broken_levels"] == [] and done.results["best_concurrency"] == 4
    assert 'id="little-ok"' in page and 'id="max-valid"' in page and 'id="sanity-table"' in page


@pytest.mark.django_db
def test_a_ramp_run_is_one_cell_charted_against_time_with_its_knee(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import charts

    small = LoadConfig(
        mode="ramp", ramp_strategy="exponential", ramp_start_rps=1.0, ramp_end_rps=40.0, ramp_requests=30,
        burstiness=100.0, input_tokens=20, output_tokens=10, slo_ttft_ms=60_000, slo_tpot_ms=60_000,
    )  # fmt: skip
    done, page = _measured(monkeypatch, small, "ramp", max_streams=1)
    (cell,) = done.results["cells"]
    assert cell["completed"] == 30 and cell["ramp"] == {"strategy": "exponential", "start_rps": 1.0, "end_rps": 40.0}
    assert cell["target_rates"][0] == 1.0 and cell["target_rates"][-1] == 40.0
    knee = cell["sanity"]["knee_rps"]
    assert knee is not None and 4 < knee < 40  # past the server's ~5 req/s, TTFT doubled
    figure = charts.charts("load", [("#1", done.results)])[0]["figure"]
    names = [t["name"] for t in figure["data"]]
    assert names == ["정한 요청률", "보낸 요청률 (1초 창)", "TTFT (ms)", "TPOT (ms)"]
    assert 'id="ramp-knee"' in page and "램프 1 → 40 req/s" in page
