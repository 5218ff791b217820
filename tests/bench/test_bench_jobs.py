"""Benchmark jobs against the scripted server: the speed probe, the job row's life, the pages."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from bench import kinds, services
from bench.kinds import sweep
from bench.kinds.cells import cell_summary, line_fit
from bench.kinds.load import LoadConfig
from bench.kinds.speed import SpeedConfig
from bench.models import BenchJob
from bench.reporting import ProgressReporter, Reporter
from labapp.ops import scripted
from tests import aio

SMALL = SpeedConfig(repeats=1, shapes=((20, 4), (60, 4), (20, 8)), check=(40, 6), seed=5)


def test_the_speed_probe_measures_every_shape_with_exact_prompts_and_checks_the_estimate(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    script, url = scripted_engine
    seen: list[tuple[int, int, str]] = []

    async def progress(done: int, total: int, cell: str) -> bool:
        seen.append((done, total, cell))
        return True

    result, _ = aio.run(
        kinds.measure("speed", SMALL, base_url=url, model="fake-model", reporter=ProgressReporter(progress))
    )
    assert [(c["input_tokens"], c["output_tokens"]) for c in result["cells"]] == [(20, 4), (60, 4), (20, 8), (40, 6)]
    assert all(c["completed"] == 1 and c["failed"] == 0 for c in result["cells"])
    # the fake counts a token per 3 bytes: each prompt is the shortest with at least that many
    warm, *measured = script.requests
    assert warm["prompt"].startswith("warm-up") and warm["max_tokens"] == 4  # sent first, not measured
    prompts = [r["prompt"] for r in measured]
    assert [len(p.encode()) // 3 + 1 for p in prompts] == [20, 60, 20, 40]
    assert len({p.split()[0] for p in prompts}) == 4  # every prompt opens differently: no cache reuse
    assert all(r["ignore_eos"] and r["max_tokens"] in (4, 8, 6) for r in measured)
    assert result["prefill_speed"] > 0 and result["decode_speed"] > 0
    assert result["check"]["input_tokens"] == 40 and result["check"]["estimate_s"] > 0
    assert seen[-1][0] == seen[-1][1] == SMALL.total_requests


def test_a_cancelled_probe_returns_what_it_measured(scripted_engine: tuple[scripted.Script, str]) -> None:
    _, url = scripted_engine

    async def progress(done: int, total: int, cell: str) -> bool:
        return done < 2

    result, cancelled = aio.run(
        kinds.measure("speed", SMALL, base_url=url, model="fake-model", reporter=ProgressReporter(progress))
    )
    assert cancelled and len(result["cells"]) == 2


@pytest.mark.django_db
def test_a_job_runs_to_done_and_a_dead_engine_fails_it_with_the_reason(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = scripted_engine
    owner = User.objects.create(username="runner")
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    job = BenchJob.objects.create(owner=owner, kind="speed", config={"repeats": 1, "seed": 5}, engine_url=url)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE and done.done_requests == SMALL.total_requests
    assert len(done.results["cells"]) == 4 and done.attempts == 1
    assert services.job_execute(job_id=job.pk).attempts == 1  # a redelivered finished job does nothing

    dead = BenchJob.objects.create(
        owner=owner, kind="speed", config={"repeats": 1, "seed": 6}, engine_url="http://127.0.0.1:9"
    )
    failed = services.job_execute(job_id=dead.pk)
    assert failed.status == BenchJob.Status.FAILED and "127.0.0.1:9" in failed.error


@pytest.mark.django_db
def test_a_cancel_request_stops_a_running_job_and_keeps_its_results(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = scripted_engine
    owner = User.objects.create(username="canceller")
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    job = BenchJob.objects.create(owner=owner, kind="speed", config={"repeats": 1, "seed": 7}, engine_url=url)
    real_measure = kinds.measure

    async def measure(kind: str, config: Any, *, reporter: Reporter, **kwargs: Any) -> tuple[dict[str, Any], bool]:
        class CancelAfterTwo:
            async def progress(self, done: int, total: int, cell: str) -> bool:
                if done == 2:
                    await sync_to_async(BenchJob.objects.filter(pk=job.pk).update)(cancel_requested=True)
                return bool(await reporter.progress(done, total, cell))

            async def partial(self, results: dict[str, Any]) -> None:
                await reporter.partial(results)

        return await real_measure(kind, config, reporter=CancelAfterTwo(), **kwargs)

    monkeypatch.setattr(kinds, "measure", measure)
    ended = services.job_execute(job_id=job.pk)
    assert ended.status == BenchJob.Status.CANCELLED and ended.done_requests == 2
    assert len(ended.results["cells"]) == 2


@pytest.mark.django_db
def test_the_pages_refuse_bad_input_hide_other_users_jobs_and_export() -> None:
    owner = User.objects.create(username="owner")
    client = Client()
    client.force_login(owner)
    page = client.post("/bench/", {"repeats": "0"})
    assert page.status_code == 200 and "repeats" in page.content.decode() and BenchJob.objects.count() == 0
    job = BenchJob.objects.create(
        owner=owner,
        kind="speed",
        engine_url="http://x",
        status=BenchJob.Status.DONE,
        results={
            "cells": [
                cell_summary([], input_tokens=20, output_tokens=4)
                | {"check": False, "completed": 1, "median_ttft_ms": 5.0, "median_decode_ms": 9.0}
            ]
        },
    )
    detail = client.get(f"/bench/{job.pk}/").content.decode()
    assert "job-chart-data" in detail and "vendor/plotly-cartesian/plotly-cartesian-4.1.1.min.js" in detail
    assert client.get(f"/bench/{job.pk}/export.json").json()["status"] == "done"
    assert client.get(f"/bench/{job.pk}/export.csv").content.decode().startswith("cell,index,success")
    assert client.get(f"/bench/{job.pk}/export.xml").status_code == 404
    stranger = Client()
    stranger.force_login(User.objects.create(username="stranger"))
    assert stranger.get(f"/bench/{job.pk}/").status_code == 404
    assert stranger.post(f"/bench/{job.pk}/cancel/").status_code == 404


@pytest.mark.django_db
def test_cancelling_a_queued_job_ends_it_at_once() -> None:
    owner = User.objects.create(username="queue")
    first = BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://e", status=BenchJob.Status.RUNNING)
    second = BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://e")
    assert services.queue_position(second) == 1 and services.queue_position(first) == 0  # 1: next when it frees
    assert services.job_cancel(job=second).status == BenchJob.Status.CANCELLED
    assert services.job_cancel(job=first).cancel_requested is True


def test_the_bench_command_prints_the_speeds_and_writes_json_and_csv(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Any
) -> None:
    import json
    from io import StringIO

    from django.core.management import call_command

    _, url = scripted_engine
    settings.VLLM_BASE_URL = url
    settings.VLLM_MODEL = ""
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: SMALL)
    out = StringIO()
    call_command("bench", "speed", repeats=1, json=tmp_path / "r.json", csv=tmp_path / "r.csv", stdout=out)
    assert "prefill" in out.getvalue() and "estimate on 40/6" in out.getvalue()
    assert len(json.loads((tmp_path / "r.json").read_text())["results"]["cells"]) == 4
    assert len((tmp_path / "r.csv").read_text().strip().splitlines()) == 1 + SMALL.total_requests
    assert json.loads((tmp_path / "r.json").read_text())["provenance"]["vllm_version"] == "fake"  # read at its start
    assert ",provenance_dtype," in (tmp_path / "r.csv").read_text().splitlines()[0]


def test_a_line_fit_matches_hand_computed_values() -> None:
    fit = line_fit([1, 2, 3], [2, 4, 6])
    assert fit == {"slope": 2.0, "intercept": 0.0, "r2": 1.0}
    noisy = line_fit([0, 1, 2, 3], [1, 3, 2, 4])
    assert noisy is not None
    assert noisy["slope"] == pytest.approx(0.8) and noisy["intercept"] == pytest.approx(1.3)
    assert noisy["r2"] == pytest.approx(0.64)
    assert line_fit([5], [1]) is None and line_fit([2, 2], [1, 3]) is None


def test_the_length_sweep_varies_one_length_at_a_time_and_fits_both_lines(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    _, url = scripted_engine
    config = sweep.SweepConfig(input_lengths=(20, 40, 80), fixed_output=4, output_lengths=(4, 8), fixed_input=20)

    async def progress(done: int, total: int, cell: str) -> bool:
        return True

    result, _ = aio.run(
        kinds.measure("sweep", config, base_url=url, model="fake-model", reporter=ProgressReporter(progress))
    )
    shapes = [(c["input_tokens"], c["output_tokens"], c["sweep"]) for c in result["cells"]]
    assert shapes == [(20, 4, "input"), (40, 4, "input"), (80, 4, "input"), (20, 4, "output"), (20, 8, "output")]
    fits = sweep.fits(result["cells"])
    assert set(fits["ttft_vs_input"]) == {"slope", "intercept", "r2"}
    assert fits["decode_vs_output"] is not None and set(fits["tpot_by_input"]) == {"20", "40", "80"}


def test_metrics_text_is_summed_over_labels_and_deltas_give_means_and_hit_rate() -> None:
    from rag.vllm import server_metrics

    text = (
        "# HELP vllm:prefix_cache_hits_total hits\n"
        'vllm:prefix_cache_hits_total{engine="0"} 30\n'
        'vllm:prefix_cache_hits_total{engine="1"} 10\n'
        'vllm:prefix_cache_queries_total{engine="0"} 100\n'
        'vllm:time_to_first_token_seconds_sum{engine="0"} 1.5\n'
        'vllm:time_to_first_token_seconds_count{engine="0"} 3\n'
    )
    after = server_metrics.parse(text)
    assert after["vllm:prefix_cache_hits_total"] == 40
    before = {"vllm:prefix_cache_hits_total": 20.0, "vllm:prefix_cache_queries_total": 60.0}
    d = server_metrics.delta(before, after)
    assert d["prefix_cache_hit_rate"] == 0.5
    assert d["time_to_first_token_mean_ms"] == 500.0 and d["time_to_first_token_count"] == 3
    assert d["request_decode_time_mean_ms"] is None


def test_each_cell_stores_the_servers_metrics_delta_and_peaks(scripted_engine: tuple[scripted.Script, str]) -> None:
    _, url = scripted_engine

    async def progress(done: int, total: int, cell: str) -> bool:
        return True

    result, _ = aio.run(
        kinds.measure("speed", SMALL, base_url=url, model="fake-model", reporter=ProgressReporter(progress))
    )
    server = result["cells"][0]["server"]
    assert server["time_to_first_token_count"] == 1 and server["time_to_first_token_mean_ms"] == pytest.approx(20)
    assert server["prefix_cache_hit_rate"] == pytest.approx(0.16) and server["samples"] >= 1


def test_a_server_without_metrics_still_runs_the_job(scripted_engine: tuple[scripted.Script, str]) -> None:
    script, url = scripted_engine
    script.metrics = False

    async def progress(done: int, total: int, cell: str) -> bool:
        return True

    result, _ = aio.run(
        kinds.measure("speed", SMALL, base_url=url, model="fake-model", reporter=ProgressReporter(progress))
    )
    assert len(result["cells"]) == 4 and "unavailable" in result["cells"][0]["server"]["error"]


@pytest.mark.django_db(transaction=True)
def test_progress_is_pushed_to_the_owners_job_socket_only(settings: Any) -> None:
    from channels.layers import channel_layers
    from channels.testing import WebsocketCommunicator

    from bench.jobrun import push
    from labapp.asgi import application

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    owner = User.objects.create(username="pusher")
    job = BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://e")

    def cookie(user: User) -> bytes:
        client = Client()
        client.force_login(user)
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    owner_cookie, stranger_cookie = cookie(owner), cookie(User.objects.create(username="other"))

    async def go() -> tuple[Any, Any]:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
        stranger = WebsocketCommunicator(
            application, f"/ws/bench/{job.pk}/", headers=[*headers, (b"cookie", stranger_cookie)]
        )
        refused = await stranger.connect()
        socket = WebsocketCommunicator(
            application, f"/ws/bench/{job.pk}/", headers=[*headers, (b"cookie", owner_cookie)]
        )
        assert (await socket.connect())[0]
        await push(job.pk, {"status": "running", "done": 3, "total": 8, "cell": "100 in / 50 out"})
        message = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return refused, message

    try:
        refused, message = aio.run(go())
    finally:
        channel_layers.backends.clear()
    assert refused == (False, 4404)
    assert message == {"status": "running", "done": 3, "total": 8, "cell": "100 in / 50 out"}


@pytest.mark.django_db
def test_a_load_sweep_measures_each_concurrency_with_goodput_and_finds_the_best_level(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script, url = scripted_engine
    script.delay_s = 0.01
    small = LoadConfig(concurrencies=(1, 2, 4), input_tokens=20, output_tokens=4, slo_ttft_ms=60_000)
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: small)
    owner = User.objects.create(username="loader")
    job = BenchJob.objects.create(owner=owner, kind="load", config={"repeats": 1, "seed": 3}, engine_url=url)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    levels = done.results["cells"]
    assert [c["concurrency"] for c in levels] == [1, 2, 4]
    assert [c["peak_in_flight"] for c in levels] == [1, 2, 4]
    assert all(c["completed"] == 8 and c["request_goodput"] == c["request_throughput"] for c in levels)
    assert done.results["best_concurrency"] == 4 and done.done_requests == 24
    client = Client()
    client.force_login(owner)
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert 'id="best-concurrency">4<' in page and "job-chart-data" in page
    assert client.get(f"/bench/{job.pk}/export.csv").content.decode().count("@4") == 8
