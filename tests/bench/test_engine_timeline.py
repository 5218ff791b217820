"""The engine timeline: /metrics sampled while a cell runs, drawn under the requests, exported."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench import charts, exports, kinds, services
from bench.kinds.load import LoadConfig
from bench.models import BenchJob
from labapp.ops import scripted
from rag.vllm import server_metrics

TYPED = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 5.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 9.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 412.0
vllm:iteration_tokens_total_created{engine="0",model_name="m"} 1.7e9
"""


def test_the_prometheus_text_is_read_by_name_without_buckets() -> None:
    values = server_metrics.parse(TYPED)
    assert values["vllm:num_requests_running"] == 3.0
    assert values["vllm:num_preemptions_total"] == 2.0
    assert values["vllm:iteration_tokens_total_sum"] == 412.0 and values["vllm:iteration_tokens_total_count"] == 9
    assert not any(name.endswith(("_bucket", "_created")) for name in values)


def _samples(t: list[float], **columns: list[float]) -> dict[str, list[float]]:
    return {"t": t} | {k: columns.get(k, [0.0] * len(t)) for k in server_metrics.TIMELINE_SERIES}


def test_rates_between_samples_are_computed_by_hand_and_not_across_a_gap_between_cells() -> None:
    samples = _samples(
        [10.0, 10.2, 10.4, 15.0],
        generation_tokens=[100, 110, 130, 140],
        iteration_tokens_sum=[1000, 1100, 1120, 1200],
        iteration_tokens_count=[50, 54, 58, 60],
        prefix_cache_queries=[0, 100, 100, 300],
        prefix_cache_hits=[0, 25, 25, 300],
        preemptions=[1, 1, 3, 3],
    )
    rates = charts.engine_rates(samples, start=10.0)
    assert rates["t"] == [0.2, 0.4, 5.0]
    assert rates["tokens_per_s"] == [50.0, 100.0, None]  # 10 / 0.2 s, 20 / 0.2 s; 4.6 s apart: no rate
    assert rates["tokens_per_step"] == [25.0, 5.0, None]  # 100 tokens in 4 steps, 20 in 4
    assert rates["hit_pct"] == [25.0, None, None]  # no queries in the second interval
    assert rates["preempted"] == [0, 2, 0]


def test_timelines_of_several_blocks_join_in_time_order() -> None:
    a = _samples([2.0, 2.2], running=[1, 2])
    b = _samples([1.0, 1.2], running=[4, 3])
    joined = server_metrics.joined([a, b])
    assert joined["t"] == [1.0, 1.2, 2.0, 2.2] and joined["running"] == [4, 3, 1, 2]


@pytest.fixture
def engine_script() -> scripted.Script:
    return scripted.Script(delay_s=0.02, pieces=[])  # max_tokens tokens, 20 ms apart


def _figure(page: str, data_id: str) -> dict[str, object]:
    found = re.search(rf'<script id="{data_id}" type="application/json">(.*?)</script>', page, re.S)
    assert found, data_id
    figure: dict[str, object] = json.loads(found.group(1))
    return figure


@pytest.mark.django_db
def test_a_load_job_samples_the_engine_draws_it_under_the_requests_and_exports_it(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _script, url = scripted_engine
    small = LoadConfig(concurrencies=(2, 4), input_tokens=20, output_tokens=24, slo_ttft_ms=60_000)
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: small)
    owner = User.objects.create(username="timeline")
    job = BenchJob.objects.create(owner=owner, kind="load", config={"repeats": 1, "seed": 3}, engine_url=url)
    done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    for cell in done.results["cells"]:
        timeline = cell["server"]["timeline"]
        sends = [r["t_send"] for r in cell["requests"]]
        assert len(timeline["t"]) >= 3  # every 200 ms over a level of about a second
        assert timeline["t"][0] <= min(sends) and timeline["t"][-1] >= max(sends)  # the records' own clock
        assert max(timeline["running"]) >= 2 and timeline["generation_tokens"][-1] > timeline["generation_tokens"][0]
        assert cell["server"]["preemptions"] == 0

    client = Client()
    client.force_login(owner)
    page = client.get(f"/bench/{job.pk}/").content.decode()
    figure = _figure(page, "job-timeline-data")
    data = figure["data"]
    assert isinstance(data, list)
    names = [t["name"] for t in data]
    assert names[:4] == ["클라이언트 대기", "서버 대기", "프리필", "디코드"]
    assert {"실행 중인 요청", "대기 중인 요청", "KV 캐시 사용률", "생성 토큰/초", "엔진 스텝당 토큰"} <= set(names)
    layout = figure["layout"]
    assert isinstance(layout, dict)
    bottom = next(t for t in data if t["name"] == "엔진 스텝당 토큰")["xaxis"]
    axes = [k for k in layout if k.startswith("xaxis")]
    assert len(axes) == 5 and all(layout[a].get("matches") == bottom for a in axes if a != f"xaxis{bottom[1:]}")
    running = next(t for t in data if t["name"] == "실행 중인 요청")
    assert max(running["y"]) >= 2 and min(running["x"]) >= -0.5  # seconds from the first request
    assert "engine.csv" in page

    exported = json.loads(client.get(f"/bench/{job.pk}/export.json").content)
    engine = exported["engine_timeline"]
    assert set(engine) == set(exports.ENGINE_COLUMNS) and len(engine["t_s"]) >= 6
    assert engine["t_s"] == sorted(engine["t_s"]) and max(engine["running"]) >= 2
    response = client.get(f"/bench/{job.pk}/export.engine.csv")
    assert response.status_code == 200 and "engine.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == len(engine["t_s"]) and {r["cell"] for r in rows} == {"20/24 @2", "20/24 @4"}


@pytest.mark.django_db
def test_a_job_without_metrics_has_the_request_timeline_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    script = scripted.Script(delay_s=0.005, metrics=False)
    small = LoadConfig(concurrencies=(2,), input_tokens=20, output_tokens=4, slo_ttft_ms=60_000)
    monkeypatch.setattr(kinds, "config_for", lambda kind, raw, **options: small)
    owner = User.objects.create(username="no-metrics")
    with scripted.serve(script) as url:
        job = BenchJob.objects.create(owner=owner, kind="load", config={"repeats": 1, "seed": 3}, engine_url=url)
        done = services.job_execute(job_id=job.pk)
    assert done.status == BenchJob.Status.DONE, done.error
    figure = charts.timeline(done.results)
    assert figure is not None and len(figure["data"]) == 4
    client = Client()
    client.force_login(owner)
    assert "engine.csv" not in client.get(f"/bench/{job.pk}/").content.decode()
    assert json.loads(client.get(f"/bench/{job.pk}/export.json").content)["engine_timeline"]["t_s"] == []


def _results_with_engine() -> dict[str, object]:
    requests = [{"t_send": 100.0 + i, "ttft": 0.1, "decode_time": 0.5} for i in range(3)]
    samples = _samples(
        [99.9, 100.1, 100.3],
        running=[0, 2, 1],
        waiting=[0, 1, 0],
        kv_cache_usage=[0.0, 0.2, 0.1],
        prefix_cache_queries=[0, 100, 200],
        prefix_cache_hits=[0, 50, 150],
    )
    return {"cells": [{"cell": "a", "completed": 3, "requests": requests, "server": {"timeline": samples}}]}


def test_a_lab_page_shows_the_engine_panels_that_explain_its_lab() -> None:
    from labapp.labs.catalog import LABS

    assert LABS[3].engine_panels == ("requests", "cache")  # the queue and KV usage under load
    assert LABS[5].engine_panels == ("cache",)  # prefix-cache hits
    assert all(not LABS[n].engine_panels for n in (1, 2, 4, 6))
    lab5 = charts.timeline(_results_with_engine(), LABS[5].engine_panels)
    assert lab5 is not None
    names = [t["name"] for t in lab5["data"]]
    assert names == ["클라이언트 대기", "서버 대기", "프리필", "디코드", "KV 캐시 사용률", "프리픽스 캐시 적중률"]
    hits = next(t for t in lab5["data"] if t["name"] == "프리픽스 캐시 적중률")
    assert hits["y"] == [0.5, 1.0] and hits["x"] == [0.1, 0.3]  # fractions, on an axis from 0 to 1
    cache_axis = lab5["layout"]["yaxis" + hits["yaxis"][1:]]
    assert cache_axis["range"] == [0, 1.02] and cache_axis["tickvals"][-1] == 1
    assert len(charts.timeline(_results_with_engine(), ())["data"]) == 4  # type: ignore[index]
    full = charts.timeline(_results_with_engine())
    assert full is not None and len([k for k in full["layout"] if k.startswith("xaxis")]) == 5


def test_only_the_lines_the_lab_reads_reach_the_parser() -> None:
    # A page like vLLM's: hundreds of bucket lines the lab never reads, and a name it does not use.
    buckets = "".join(f'vllm:time_to_first_token_seconds_bucket{{le="{i}"}} {i}\n' for i in range(500))
    unused = 'vllm:cache_config_info{block_size="16"} 1.0\n'
    text = TYPED + buckets + unused + "vllm:time_to_first_token_seconds_sum 2.5\n"
    values = server_metrics.parse(text)
    assert set(values) <= server_metrics.WANTED and values["vllm:time_to_first_token_seconds_sum"] == 2.5
    assert "vllm:cache_config_info" not in values
    assert server_metrics.parse("") == {} and server_metrics.parse("# HELP only comments\n") == {}


def test_a_series_with_lone_points_is_drawn_with_markers() -> None:
    """Lab 5's prefix-cache hits come only at the samples where a prompt arrived: as a line alone it never drew."""
    from bench.charts import has_lone_points

    assert has_lone_points([None, 40.0, None, None, 80.0, None])
    assert has_lone_points([12.0, None, 3.0, 4.0])  # one lone point is enough
    assert not has_lone_points([1.0, 2.0, None, 3.0, 4.0]) and not has_lone_points([None, None])
    # On a figure: queries only at the second and fifth samples, so the hit % has two lone values.
    requests = [{"t_send": 100.0 + i, "ttft": 0.1, "decode_time": 0.5} for i in range(3)]
    samples = _samples(
        [99.9, 100.1, 100.3, 100.5, 100.7, 100.9],
        running=[0, 1, 1, 1, 1, 0],
        waiting=[0] * 6,
        kv_cache_usage=[0.0, 0.1, 0.1, 0.1, 0.2, 0.0],
        prefix_cache_queries=[0, 100, 100, 100, 200, 200],
        prefix_cache_hits=[0, 40, 40, 40, 120, 120],
    )
    results = {"cells": [{"cell": "a", "completed": 3, "requests": requests, "server": {"timeline": samples}}]}
    figure = charts.timeline(results)
    assert figure is not None
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["프리픽스 캐시 적중률"]["mode"] == "lines+markers"
    assert traces["KV 캐시 사용률"]["mode"] == "lines"
