"""Job settings, workloads, labs 4-6, charts, comparisons and exports, against the scripted server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from bench import charts, configs, exports, kinds, services, workloads
from bench.kinds import rag_work, retrieval, session, short
from bench.models import BenchJob
from bench.reporting import ProgressReporter
from labapp.ops import scripted
from tests import aio

# --- settings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "raw", "field", "words"),
    [
        ("load", {"concurrencies": "1, 0, 4"}, "concurrencies", "1 이상"),
        ("load", {"concurrencies": "-2"}, "concurrencies", "1 이상"),
        ("load", {"concurrencies": "2, 2"}, "concurrencies", "두 번"),
        ("load", {"rates": "0"}, "rates", "이상"),
        ("load", {"workload": "telepathy"}, "workload", "telepathy"),
        ("load", {"workload": "custom"}, "custom_file", "JSONL"),
        ("load", {"output_tokens": "1.5"}, "output_tokens", "정수"),
        ("load", {"mode": "random"}, "mode", "random"),
        ("retrieval", {"chunk_sizes": "300"}, "chunk_sizes", "300"),
        ("retrieval", {"top_ks": "11"}, "top_ks", "10 이하"),
        ("short", {"caps": "16, 200", "normal_tokens": "100"}, "caps", "작아야"),
        ("nonsense", {}, "kind", "nonsense"),
    ],
)
def test_a_bad_setting_names_its_field(kind: str, raw: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(configs.ConfigError) as caught:
        kinds.config_for(kind, raw)
    assert caught.value.field == field and words in caught.value.message


def test_a_request_longer_than_the_engine_allows_is_refused_before_it_runs() -> None:
    with pytest.raises(configs.ConfigError) as caught:
        kinds.config_for("load", {"input_tokens": "4000", "output_tokens": "5000"}, max_model_len=8192)
    assert caught.value.field == "output_tokens" and "8192" in caught.value.message
    assert kinds.config_for("load", {"input_tokens": "4000", "output_tokens": "4000"}, max_model_len=8192)
    with pytest.raises(configs.ConfigError) as sweep:
        kinds.config_for("sweep", {"input_lengths": "100, 9000"}, max_model_len=8192)
    assert sweep.value.field == "input_lengths"


def test_a_good_load_config_reads_every_field() -> None:
    config = kinds.config_for(
        "load", {"mode": "rate", "rates": "4, 0.5", "burstiness": "0.5", "workload": "shared_prefix", "prefixes": "3"}
    )
    assert config.levels == (0.5, 4.0) and config.burstiness == 0.5 and config.prefixes == 3
    assert config.shape(0.5, 0).request_rate == 0.5 and config.shape(0.5, 0).concurrency is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "비어"),
        (b"\n  \n", "비어"),
        (b'{"prompt": "a"}\n{"prompt": "b", "max_tokens": 0}\n', "2번째 줄"),
        (b'{"prompt": "a"}\nnot json\n', "2번째 줄: JSON"),
        (b'["a"]\n', "1번째 줄"),
        (b'{"text": "a"}\n', '"prompt"'),
        (b'{"prompt": "a", "temperature": 1}\n', "temperature"),
        (b"\xff\xfe", "UTF-8"),
    ],
)
def test_a_bad_custom_workload_names_the_line(data: bytes, words: str) -> None:
    with pytest.raises(configs.ConfigError) as caught:
        configs.jsonl_parse(data)
    assert caught.value.field == "custom_file" and words in caught.value.message


def test_a_custom_workload_keeps_each_lines_output_length() -> None:
    prompts = configs.jsonl_parse('{"prompt": "첫째"}\n\n{"prompt": "둘째", "max_tokens": 7}\n'.encode())
    assert prompts == (configs.CustomPrompt("첫째", None), configs.CustomPrompt("둘째", 7))


@pytest.mark.django_db
def test_the_form_shows_the_error_at_its_field_and_creates_no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import views

    monkeypatch.setattr(views, "engine_max_model_len", lambda: 1024)
    client = Client()
    client.force_login(User.objects.create(username="form"))
    for data, field, words in (
        ({"kind": "load", "concurrencies": "0"}, "concurrencies", "1 이상"),
        ({"kind": "load", "output_tokens": "2000"}, "output_tokens", "1024"),
        ({"kind": "load", "workload": "unknown"}, "workload", "unknown"),
        (
            {"kind": "load", "workload": "custom", "custom_file": SimpleUploadedFile("w.jsonl", b"")},
            "custom_file",
            "빈 파일",
        ),
        (
            {
                "kind": "load",
                "workload": "custom",
                "custom_file": SimpleUploadedFile("w.jsonl", b'{"prompt": "a"}\n{x\n'),
            },
            "custom_file",
            "2번째 줄",
        ),
    ):
        page = client.post("/bench/", data).content.decode()
        assert f'data-error-for="{field}"' in page and words in page, (data, page[-3000:])
    assert BenchJob.objects.count() == 0
    monkeypatch.setattr(services, "job_create", lambda **kw: BenchJob.objects.create(**kw))
    upload = SimpleUploadedFile("w.jsonl", '{"prompt": "안녕", "max_tokens": 3}\n'.encode())
    client.post("/bench/", {"kind": "load", "workload": "custom", "concurrencies": "1,2", "custom_file": upload})
    job = BenchJob.objects.get()
    assert job.config["custom"] == [{"prompt": "안녕", "max_tokens": 3}] and job.config["concurrencies"] == "1,2"


# --- workloads and the load sweep ---------------------------------------------------------


def test_shared_prefix_prompts_share_their_opening_and_differ_after_it(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    import httpx

    _, url = scripted_engine

    async def build() -> list[tuple[int, str]]:
        async with httpx.AsyncClient(base_url=url) as http:
            return await workloads.shared_prefix_prompts(
                2, 3, prefix_tokens=40, suffix_tokens=10, seed=3, model="fake-model", client=http
            )

    pairs = aio.run(build())
    assert [p for p, _ in pairs] == [0, 1, 0, 1, 0, 1]
    openings = {p: {text.split("\n")[0] for q, text in pairs if q == p} for p in (0, 1)}
    assert all(len(found) == 1 for found in openings.values()) and openings[0] != openings[1]
    assert len({text for _, text in pairs}) == 6


def test_a_rate_sweep_labels_its_levels_and_a_custom_workload_sends_each_line(
    scripted_engine: tuple[scripted.Script, str],
) -> None:
    script, url = scripted_engine
    config = kinds.config_for("load", {"mode": "rate", "rates": "20, 40", "repeats": "1", "slo_ttft_ms": "60000"})
    results, cancelled = aio.run(
        kinds.measure("load", config, base_url=url, model="fake-model", reporter=ProgressReporter(aio.keep_going))
    )
    assert not cancelled and [c["request_rate"] for c in results["cells"]] == [20.0, 40.0]
    assert results["best_level"] == 40.0 and results["best_concurrency"] is None and results["model"] == "fake-model"
    assert all(r["t_scheduled"] is not None for c in results["cells"] for r in c["requests"])
    raw: dict[str, Any] = {"workload": "custom", "concurrencies": "1", "output_tokens": "3"}
    raw["custom"] = [{"prompt": "one", "max_tokens": None}, {"prompt": "two", "max_tokens": 2}]
    config = kinds.config_for("load", raw)
    assert config.total_requests == 2
    script.requests.clear()
    aio.run(kinds.measure("load", config, base_url=url, model="fake-model", reporter=ProgressReporter(aio.keep_going)))
    sent = [r for r in script.requests if "max_tokens" in r and not r.get("prompt", "").startswith("warm-up")]
    assert sorted(r["max_tokens"] for r in sent) == [2, 3]
    assert any(r["prompt"].endswith("\none") for r in sent) and any(r["prompt"].endswith("\ntwo") for r in sent)


# --- labs 4-6 with the retrieval step scripted -----------------------------------------


class _Question:
    def __init__(self, n: int) -> None:
        self.id, self.question, self.evidence, self.slug = f"q{n}", f"질문 {n}?", "프리필 단계 연산", "s"


def _scripted_rag(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    from rag import prompting

    calls: list[dict[str, Any]] = []

    def rag_prompts(
        questions: list[Any], *, top_k: int, chunk_size: int, brief: bool = False, example: str = ""
    ) -> list[Any]:
        calls.append({"top_k": top_k, "chunk_size": chunk_size, "brief": brief, "example": example})
        out = []
        for q in questions:
            chunks = [
                prompting.ContextChunk(
                    id=f"c{i}", text=f"자료{i} " * (chunk_size // 50), title="t", source="s", position=i, rank=i
                )
                for i in range(top_k)
            ]
            prompt = prompting.prompt_build(q.question, chunks, brief=brief, example=example)
            out.append(
                workloads.RagPrompt(
                    question_id=q.id, question=q.question, evidence=q.evidence, text=prompt.text,
                    stop=tuple(prompt.stop), retrieval_ms=12.5, context=tuple(prompt.chunks),
                    context_chars=len(prompt.context), evidence_retrieved=top_k > 1,
                )
            )  # fmt: skip
        return out

    monkeypatch.setattr(rag_work, "rag_prompts", rag_prompts)
    monkeypatch.setattr(rag_work, "rag_questions", lambda count, seed: [_Question(n) for n in range(count)])
    return calls


def test_the_retrieval_sweep_measures_every_top_k_and_chunk_size(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rag(monkeypatch)
    script, url = scripted_engine
    config = kinds.config_for("retrieval", {"questions": "2", "top_ks": "1, 3", "chunk_sizes": "200, 1000"})
    assert config.total_requests == 8
    results, _ = aio.run(
        kinds.measure("retrieval", config, base_url=url, model="fake-model", reporter=ProgressReporter(aio.keep_going))
    )
    cells = results["cells"]
    assert [(c["chunk_size"], c["top_k"]) for c in cells] == [(200, 1), (200, 3), (1000, 1), (1000, 3)]
    assert all(c["completed"] == 2 and c["median_retrieval_ms"] == 12.5 for c in cells)
    by = {(c["chunk_size"], c["top_k"]): c for c in cells}
    assert by[(1000, 3)]["median_context_tokens"] > by[(1000, 1)]["median_context_tokens"] > 0
    assert by[(200, 3)]["evidence_retrieved"] == 1.0 and by[(200, 1)]["evidence_retrieved"] == 0.0
    assert set(results["fits"]) == {"200", "1000"} and results["fits"]["1000"]["slope"] is not None
    assert len(cells[0]["answers"]) == 2 and "coverage" in cells[0]["answers"][0]
    # Round by round, the second round in reverse: a slow spell late in the run is not all on 1000 / top-k 3.
    sent = [r["prompt"].split("\n")[0] + "\n" for r in script.requests if "prompt" in r and "max_tokens" in r][-8:]
    shapes = [(200, 1), (200, 3), (1000, 1), (1000, 3)]
    assert sent == [workloads.nonce_line(0, size, k, i) for i, (size, k) in retrieval.rounds(shapes, 2)]
    assert retrieval.rounds(shapes, 2)[3:5] == [(0, (1000, 3)), (1, (1000, 3))]


def test_the_prefix_job_asks_each_context_four_ways_and_reports_the_reset(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rag(monkeypatch)
    script, url = scripted_engine
    config = kinds.config_for("prefix", {"contexts": "2", "top_k": "3", "chunk_size": "200"})
    results, _ = aio.run(
        kinds.measure("prefix", config, base_url=url, model="fake-model", reporter=ProgressReporter(aio.keep_going))
    )
    assert [c["cell"] for c in results["cells"]] == ["cold", "warm", "other_question", "reordered"]
    assert all(c["completed"] == 2 for c in results["cells"])
    assert results["cache_reset"] == "unsupported"  # the scripted server has no /reset_prefix_cache
    prompts = [r["prompt"] for r in script.requests if "prompt" in r and "max_tokens" in r][-8:]
    cold, warm, other, reordered = prompts[:4]
    assert cold == warm and other != cold and reordered != cold
    assert cold.split("\n")[0] == other.split("\n")[0] == reordered.split("\n")[0]  # one nonce per context
    assert prompts[4].split("\n")[0] != cold.split("\n")[0]
    assert results["cells"][0]["hit_rate"] is not None


def test_short_answers_vary_the_instruction_and_sweep_the_caps(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _scripted_rag(monkeypatch)
    script, url = scripted_engine
    config = kinds.config_for("short", {"questions": "1", "normal_tokens": "64", "caps": "8, 2, 4"})
    results, _ = aio.run(
        kinds.measure("short", config, base_url=url, model="fake-model", reporter=ProgressReporter(aio.keep_going))
    )
    assert {c["brief"] for c in calls} == {True, False}
    assert {c["example"] for c in calls} == {short.ANSWER_SHAPE}  # every variant shows the answer's shape
    cells = {c["cell"]: c for c in results["cells"]}
    assert list(cells) == ["normal", "brief", "cap_2", "cap_4", "cap_8"]
    assert cells["cap_2"]["max_tokens"] == 2 and cells["normal"]["max_tokens"] == 64
    assert not cells["cap_2"]["brief"] and "time_saved_pct" in cells["cap_2"]
    sent = [r for r in script.requests if "max_tokens" in r and not r.get("prompt", "").startswith("warm-up")]
    assert len(sent) == 5 and all(r.get("ignore_eos") in (None, False) and r.get("stop") for r in sent)
    assert {r.get("frequency_penalty") for r in sent} == {short.FREQUENCY_PENALTY}  # the same in every variant
    assert {"time_saved_pct", "enough_cap"} <= set(results) and cells["normal"]["answers"][0][
        "question"
    ] == "질문 0?" + short.ASK_WHY


def _short_run(script: scripted.Script, url: str, caps: str) -> dict[str, Any]:
    """Lab 6 over two questions on the scripted engine: twenty one-token pieces, cut at max_tokens."""
    script.pieces, script.cut_at_max_tokens = [f" 말{n}" for n in range(20)], True
    config = kinds.config_for("short", {"questions": "2", "normal_tokens": "64", "caps": caps})
    results, _ = aio.run(
        kinds.measure("short", config, base_url=url, model="fake-model", reporter=ProgressReporter(aio.keep_going))
    )
    return results


def test_lab6_credits_a_cap_only_with_the_answers_it_cut(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every variant of a question sends the same text (a cap exactly the normal prompt), the prefix cache
    emptied before each request; at temperature 0 only cap 8 changes an answer, caps 24 and 32 do nothing."""
    _scripted_rag(monkeypatch)
    script, url = scripted_engine
    results = _short_run(script, url, "8, 24, 32")
    cells = {c["cell"]: c for c in results["cells"]}
    assert cells["cap_8"]["changed"] == 2 and not cells["cap_8"]["no_effect"] and cells["cap_8"]["capped"] == 2
    assert cells["cap_8"]["decode_saved_ms"] is not None and cells["cap_8"]["median_output_tokens"] == 8
    for quiet in ("cap_24", "cap_32"):
        assert cells[quiet]["no_effect"] and cells[quiet]["changed"] == 0 and cells[quiet]["time_saved_pct"] is None
    assert results["brief_changed"] == 0 and results["cache_reset"] == "unsupported"  # no /reset_prefix_cache here
    sent = [r for r in script.requests if "max_tokens" in r and not r["prompt"].startswith("warm-up")]
    first, second = sent[:5], sent[5:]
    assert [r["max_tokens"] for r in first] == [64, 64, 8, 24, 32] and all(r["temperature"] == 0 for r in sent)
    assert first[0]["prompt"] == first[2]["prompt"] == first[3]["prompt"] == first[4]["prompt"]
    assert (
        first[1]["prompt"] != first[0]["prompt"]
        and first[1]["prompt"].split("\n")[0] == first[0]["prompt"].split("\n")[0]
    )
    assert second[0]["prompt"].split("\n")[0] != first[0]["prompt"].split("\n")[0]  # one first line per question
    caps = {c.name: c for c in short.checks(results)}["상한을 낮추면 출력 토큰과 디코드 시간이 줄어듦"]
    assert "상한 32: 효과 없음 (상한에 닿은 답 없음)" in caps.message and caps.message.startswith("보통 → 상한 8: ")


def test_lab6_says_no_effect_when_no_answer_reaches_a_cap(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rag(monkeypatch)
    script, url = scripted_engine
    results = _short_run(script, url, "24, 32, 48")
    assert all(c["no_effect"] and c["changed"] == 0 for c in results["cells"] if c["cell"].startswith("cap_"))
    caps = {c.name: c for c in short.checks(results)}["상한을 낮추면 출력 토큰과 디코드 시간이 줄어듦"]
    assert not caps.applies and caps.message.count("효과 없음 (상한에 닿은 답 없음)") == 3
    assert "no effect (no answer reached the cap)" in "\n".join(short.report_lines(results))


def test_a_cancel_between_requests_keeps_the_finished_cells(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rag(monkeypatch)
    _, url = scripted_engine

    async def stop_after_three(done: int, total: int, cell: str) -> bool:
        return done < 3

    config = kinds.config_for("short", {"questions": "2"})
    results, cancelled = aio.run(
        kinds.measure("short", config, base_url=url, model="fake-model", reporter=ProgressReporter(stop_after_three))
    )
    assert cancelled and sum(c["completed"] for c in results["cells"]) == 3


# --- charts, comparison, exports ---------------------------------------------------------


def _results(kind: str) -> dict[str, Any]:
    request = {"t_send": 10.0, "t_scheduled": 9.9, "client_queue_time": 0.1, "ttft": 0.2, "queue_time_server": 0.05,
               "decode_time": 0.5, "e2el": 0.7, "itl": [0.25, 0.25], "success": True, "prompt_tokens": 9,
               "output_tokens": 3, "generated_text": "abc", "error": None}  # fmt: skip
    base = {"completed": 1, "failed": 0, "median_ttft_ms": 200.0, "median_tpot_ms": 250.0, "median_decode_ms": 500.0,
            "median_output_tokens": 3, "requests": [request]}  # fmt: skip
    if kind == "load":
        cells = [base | {"level": n, "concurrency": n, "load_mode": "concurrency", "request_throughput": n,
                         "request_goodput": n, "p99_ttft_ms": 300.0, "p99_tpot_ms": 260.0,
                         "duration": 1.0} for n in (1, 2)]  # fmt: skip
        return {"cells": cells, "slo": {"ttft_ms": 1000, "tpot_ms": 100}}
    if kind == "retrieval":
        return {"cells": [base | {"chunk_size": 500, "top_k": k, "median_context_tokens": 100 * k} for k in (1, 3)]}
    if kind in ("prefix", "short"):
        return {"cells": [base | {"cell": "cold", "hit_rate": 0.0}, base | {"cell": "warm", "hit_rate": 0.9}]}
    return {"cells": [base | {"input_tokens": 100, "output_tokens": 3}], "fits": {}}


@pytest.mark.parametrize("kind", ["speed", "sweep", "load", "retrieval", "prefix", "short"])
def test_every_kind_has_a_chart_and_a_timeline_and_overlays_by_job(kind: str) -> None:
    one = charts.charts(kind, [("#1", _results(kind))])
    assert [c["id"] for c in one] == ["job-chart", "job-timeline"]
    assert one[0]["figure"]["data"] and all(t.get("y") is not None for t in one[0]["figure"]["data"])
    timeline = one[1]["figure"]["data"]
    assert [t["name"] for t in timeline] == ["클라이언트 대기", "서버 대기", "프리필", "디코드"]  # Korean first
    both = charts.charts(kind, [("#1", _results(kind)), ("#2", _results(kind))])
    groups = {t["legendgroup"] for t in both[0]["figure"]["data"]}  # each job's traces: one legend group
    assert len(both) == 1 and groups == {"#1", "#2"}


@pytest.mark.django_db
def test_the_compare_page_overlays_jobs_of_one_kind_and_the_json_export_has_vllm_keys() -> None:
    owner = User.objects.create(username="compare")
    client = Client()
    client.force_login(owner)
    made = [
        BenchJob.objects.create(owner=owner, kind="load", engine_url="x", status="done", results=_results("load"))
        for _ in range(2)
    ]
    other = BenchJob.objects.create(
        owner=owner, kind="prefix", engine_url="x", status="done", results=_results("prefix")
    )
    page = client.get("/bench/compare/", {"ids": [made[0].pk, made[1].pk]})
    assert page.status_code == 200
    figure = json.loads(
        page.content.decode().split('id="job-chart-data" type="application/json">')[1].split("</script>")[0]
    )
    assert {t["legendgroup"] for t in figure["data"]} == {f"#{made[0].pk}", f"#{made[1].pk}"}
    mixed = client.get("/bench/compare/", {"ids": [made[0].pk, other.pk]})
    assert mixed.status_code == 200 and 'id="kinds-differ"' in mixed.content.decode()  # says what can be compared
    assert client.get("/bench/compare/", {"ids": [made[0].pk]}).status_code == 400
    data = client.get(f"/bench/{made[0].pk}/export.json").json()
    first = data["benchmarks"][0]
    from tests.bench.test_runner import VLLM_BENCH_KEYS

    assert not [k for k in VLLM_BENCH_KEYS if k not in first]
    assert first["max_concurrency"] == 1 and first["completed"] == 1 and first["itls"] == [[0.25, 0.25]]
    assert abs(first["median_ttft_ms"] - 200.0) < 1e-6 and abs(first["median_tpot_ms"] - 250.0) < 1e-6
    rows = exports.csv_rows("load", made[0].results)
    assert [r["cell"] for r in rows] == ["None/None @1", "None/None @2"] or len(rows) == 2


def test_the_bench_command_takes_any_kinds_settings_and_refuses_bad_ones(
    scripted_engine: tuple[scripted.Script, str], settings: Any, tmp_path: Any
) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    _, url = scripted_engine
    settings.VLLM_BASE_URL, settings.VLLM_MODEL = url, ""
    out = StringIO()
    call_command(
        "bench", "load", repeats=1, set=["mode=rate", "rates=20,40", "input_tokens=8", "output_tokens=3"],
        json=tmp_path / "l.json", csv=tmp_path / "l.csv", stdout=out,
    )  # fmt: skip
    assert "@20 req/s" in out.getvalue() and "highest load meeting the SLO" in out.getvalue()
    data = json.loads((tmp_path / "l.json").read_text())
    assert [b["request_rate"] for b in data["benchmarks"]] == [20.0, 40.0] and data["kind"] == "load"
    assert len((tmp_path / "l.csv").read_text().strip().splitlines()) == 1 + 16
    with pytest.raises(CommandError, match="concurrencies"):
        call_command("bench", "load", set=["concurrencies=0"], stdout=out)
    with pytest.raises(CommandError, match="KEY=VALUE"):
        call_command("bench", "load", set=["concurrencies"], stdout=out)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(CommandError, match="2번째 줄"):
        call_command("bench", "load", set=["workload=custom"], custom=tmp_path / "bad.jsonl", stdout=out)


@pytest.mark.django_db
def test_the_chats_estimator_uses_the_learners_latest_speed_probe() -> None:
    from bench.selectors import learner_speeds

    learner = User.objects.create(username="speeds")
    assert learner_speeds(learner, "x") is None  # no Lab 1 run
    BenchJob.objects.create(owner=learner, kind="speed", engine_url="x", status="failed", results={"prefill_speed": 1})
    probe = BenchJob.objects.create(
        owner=learner, kind="speed", lab=1, engine_url="x", status="done",
        results={"prefill_speed": 612.0, "decode_speed": 24.5, "cells": [{}, {}, {}, {}]},
    )  # fmt: skip
    speeds = learner_speeds(learner, "x")
    assert speeds is not None and (speeds.prefill, speeds.decode) == (612.0, 24.5)
    assert learner_speeds(learner, "http://another-engine:8000") is None  # a probe counts on its own engine only
    assert f"#{probe.pk}" in speeds.basis


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["speed", "sweep", "load", "retrieval", "prefix", "short"])
def test_each_kinds_results_render_on_its_page(kind: str) -> None:
    owner = User.objects.create(username=f"render-{kind}")
    client = Client()
    client.force_login(owner)
    job = BenchJob.objects.create(owner=owner, kind=kind, engine_url="x", status="done", results=_results(kind))
    page = client.get(f"/bench/{job.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="job-chart-data"' in html and 'id="job-timeline-data"' in html and "export.csv" in html
    listing = client.get("/bench/").content.decode()
    assert f'name="ids" value="{job.pk}"' in listing


@pytest.mark.django_db
def test_finished_cells_are_on_the_row_while_the_job_still_runs(
    scripted_engine: tuple[scripted.Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted_rag(monkeypatch)
    _, url = scripted_engine
    owner = User.objects.create(username="partial-rows")
    config = {"questions": "1", "top_ks": "1, 2", "chunk_sizes": "200"}
    job = BenchJob.objects.create(owner=owner, kind="retrieval", config=config, engine_url=url)
    seen: list[int] = []
    real = session.Session.send

    async def send(self: Any, spec: Any, label: str) -> Any:
        row = await sync_to_async(BenchJob.objects.get)(pk=job.pk)
        seen.append(len(row.results.get("cells", [])))
        return await real(self, spec, label)

    monkeypatch.setattr(session.Session, "send", send)
    done = services.job_execute(job_id=job.pk)
    assert done.status == "done" and seen == [0, 1]  # the second cell started with the first on the row
    assert "partial" not in done.results and len(done.results["cells"]) == 2
