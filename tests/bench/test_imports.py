"""Other tools' results read into the lab (``bench.imports``), each on a file its tool really wrote.

The fixtures under ``fixtures/imports/`` were made by running each tool against the scripted server
(``python -m labapp.ops.scripted``); their README names the command and the tool's version.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from bench import services
from bench.imports import NotImportable, registry
from bench.models import BenchJob

FIXTURES = Path(__file__).parent / "fixtures" / "imports"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def signed_in(username: str, *, language: str = "ko") -> tuple[User, Client]:
    user = User.objects.create(username=username)
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return user, client


def upload(client: Client, name: str, data: bytes, *more: tuple[str, bytes]) -> Any:
    """The import form posted with one file, or with several chosen together."""
    files = [SimpleUploadedFile(name, data), *(SimpleUploadedFile(n, d) for n, d in more)]
    return client.post("/bench/import/", {"result_file": files if more else files[0]})


# --- vllm bench serve -------------------------------------------------------------------------


def test_vllm_bench_serve_detailed_gives_every_request_and_says_what_the_file_lacks() -> None:
    (found,) = registry.read(fixture("vllm_bench_serve_detailed.json"))
    assert found.tool == "vllm_bench_serve"
    saved = json.loads(fixture("vllm_bench_serve_detailed.json"))
    assert len(found.samples) == saved["num_prompts"] == len(saved["ttfts"])
    first = found.samples[0]
    assert first.success is True and first.ttft == pytest.approx(saved["ttfts"][0])
    assert first.itl == pytest.approx(tuple(saved["itls"][0]))
    assert first.prompt_tokens == saved["input_lens"][0] and first.output_tokens == saved["output_lens"][0]
    # TPOT per docs/metrics.md from the request's own figures
    assert first.tpot == pytest.approx((saved["latencies"][0] - saved["ttfts"][0]) / (saved["output_lens"][0] - 1))
    assert found.source["model"] == saved["model_id"] and found.source["date"] == saved["date"]
    assert found.source["concurrency"] == saved["max_concurrency"] and found.source["rate"] == saved["request_rate"]
    # vllm bench serve writes neither its version nor the server's address: missing, not guessed
    assert found.source["version"] is None and found.source["endpoint"] is None
    assert {"source:version", "source:endpoint"} <= set(found.missing) and "request:all" not in found.missing
    assert found.run["median_ttft_ms"] == pytest.approx(saved["median_ttft_ms"])
    cell = found.cell()
    assert cell["median_ttft_ms"] == pytest.approx(saved["median_ttft_ms"])  # our median of its requests = its own
    assert cell["ci_ttft_ms"] is not None and cell["ttft_from"] == "requests"


def test_vllm_bench_serve_without_details_keeps_its_latencies_and_only_the_aggregates_of_the_rest() -> None:
    (found,) = registry.read(fixture("vllm_bench_serve.json"))
    saved = json.loads(fixture("vllm_bench_serve.json"))
    assert "ttfts" not in saved and "latencies" in saved  # what --save-result alone writes
    assert [s.e2el for s in found.samples] == pytest.approx(saved["latencies"])
    assert all(s.ttft is None and s.tpot is None for s in found.samples)
    assert {"request:ttft", "request:tpot", "request:itl", "request:prompt_tokens"} <= set(found.missing)
    cell = found.cell()
    assert cell["ttft_from"] == "run" and cell["median_ttft_ms"] == pytest.approx(saved["median_ttft_ms"])
    assert cell["ci_ttft_ms"] is None and cell["e2el_from"] == "requests" and cell["ci_e2el_ms"] is not None


# --- GuideLLM ---------------------------------------------------------------------------------


def test_a_guidellm_report_gives_each_benchmark_with_its_requests_timed_by_our_definitions() -> None:
    (found,) = registry.read(fixture("guidellm.json"))
    report = json.loads(fixture("guidellm.json"))
    benchmark = report["benchmarks"][0]
    first_request = benchmark["requests"]["successful"][0]
    timings = first_request["info"]["timings"]
    assert found.tool == "guidellm" and len(found.samples) == len(benchmark["requests"]["successful"]) == 8
    first = found.samples[0]
    assert first.ttft == pytest.approx(timings["first_token_iteration"] - timings["request_start"])
    assert first.ttft == pytest.approx(first_request["time_to_first_token_ms"] / 1000)  # the same, as GuideLLM says
    assert first.e2el == pytest.approx(timings["last_token_iteration"] - timings["request_start"])
    assert (
        first.e2el < first_request["request_latency"]
    )  # its latency runs to the response's end; ours to the last token
    assert first.e2el is not None and first.ttft is not None
    assert first.tpot == pytest.approx((first.e2el - first.ttft) / (first_request["output_tokens"] - 1))
    assert first.prompt_tokens == first_request["prompt_tokens"] and first.itl is None
    assert found.source["version"] == report["metadata"]["guidellm_version"] == "0.8.1"
    assert found.source["model"] == "gemma-3-270m" and found.source["concurrency"] == 2
    assert found.source["endpoint"].endswith("/v1/completions") and found.source["profile"] == "concurrent"
    assert "request:itl" in found.missing and "source:version" not in found.missing
    assert "source:rate" not in found.missing  # a concurrency run has no rate to miss
    assert found.run["median_ttft_ms"] == pytest.approx(
        benchmark["metrics"]["time_to_first_token_ms"]["successful"]["median"]
    )
    assert found.cell()["ci_tpot_ms"] is not None


# --- AIPerf -------------------------------------------------------------------------------------


def test_aiperf_records_give_every_request_with_the_servers_token_counts() -> None:
    (found,) = registry.read(fixture("aiperf_profile_export.jsonl"))
    records = [json.loads(line) for line in fixture("aiperf_profile_export.jsonl").splitlines() if line.strip()]
    metrics = records[0]["metrics"]
    first = found.samples[0]
    assert found.tool == "aiperf" and len(found.samples) == len(records) == 8
    assert first.ttft == pytest.approx(metrics["time_to_first_token"]["value"] / 1000)
    assert first.e2el == pytest.approx(metrics["request_latency"]["value"] / 1000)
    assert first.itl == pytest.approx(tuple(g / 1000 for g in metrics["inter_chunk_latency"]["value"]))
    # AIPerf's tokenizer counted 2 output tokens of the scripted server's 16 (usage): the server's count is used
    assert metrics["output_sequence_length"]["value"] != metrics["usage_completion_tokens"]["value"]
    assert first.output_tokens == metrics["usage_completion_tokens"]["value"]
    assert first.e2el is not None and first.ttft is not None and first.output_tokens is not None
    assert first.tpot == pytest.approx((first.e2el - first.ttft) / (first.output_tokens - 1))
    # the records say nothing of where they came from
    assert {"source:version", "source:model", "source:endpoint"} <= set(found.missing)


def test_aiperf_summary_gives_the_runs_source_and_aggregates_but_no_request() -> None:
    (found,) = registry.read(fixture("aiperf_profile_export_aiperf.json"))
    summary = json.loads(fixture("aiperf_profile_export_aiperf.json"))
    assert found.samples == () and "request:all" in found.missing
    assert found.source["version"] == summary["aiperf_version"] == "0.13.0"
    assert found.source["model"] == "gemma-3-270m" and found.source["concurrency"] == 2
    assert found.source["endpoint"] == "http://127.0.0.1:18431"
    assert found.run["median_ttft_ms"] == pytest.approx(summary["time_to_first_token"]["p50"])
    assert found.run["median_tpot_ms"] is None  # its inter_token_latency divides by its own token count
    cell = found.cell()
    assert cell["ttft_from"] == "run" and cell["ci_ttft_ms"] is None and cell["completed"] == 8


def test_a_file_no_tool_wrote_is_refused_with_the_tools_that_can_be_read() -> None:
    with pytest.raises(NotImportable) as refused:
        registry.read(b'{"hello": "world"}')
    assert all(tool in refused.value.message for tool in ("vllm bench serve", "GuideLLM", "AIPerf"))
    with pytest.raises(NotImportable, match="줄"):
        registry.read(b'{"model_id": "m", "num_prompts": 3,')


# --- the upload ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_uploaded_result_becomes_a_done_job_of_the_uploader_named_after_its_tool() -> None:
    learner, client = signed_in("importer")
    response = upload(client, "vllm.json", fixture("vllm_bench_serve_detailed.json"))
    job = BenchJob.objects.get(owner=learner)
    assert response.status_code == 302 and response["Location"] == f"/bench/{job.pk}/"
    assert job.kind == "imported" and job.status == "done" and not job.runnable
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert "가져온 결과 (vllm bench serve)" in page and 'id="imported-source"' in page
    assert 'id="job-imported"' in page and 'id="cancel-job"' not in page and 'id="job-progress"' not in page
    assert "도구 버전" in page.split('id="imported-missing"')[1]  # what the file lacks, said
    listed = client.get("/bench/").content.decode()
    assert "가져온 결과 (vllm bench serve)" in listed.split(f'data-job="{job.pk}"')[1].split("</tr>")[0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("guidellm.json", "가져온 결과 (GuideLLM 0.8.1, concurrent@2)"),
        ("aiperf_profile_export_aiperf.json", "가져온 결과 (AIPerf 0.13.0)"),
        ("aiperf_profile_export.jsonl", "가져온 결과 (AIPerf)"),
    ],
)
def test_each_tools_file_uploads_into_a_job_named_after_the_tool_and_its_version(name: str, label: str) -> None:
    learner, client = signed_in("importer_" + name.split(".")[0])
    response = upload(client, name, fixture(name))
    job = BenchJob.objects.get(owner=learner)
    assert response.status_code == 302 and job.kind_shown == label
    assert label in client.get(f"/bench/{job.pk}/").content.decode()


@pytest.mark.django_db
def test_the_imported_run_reads_in_english() -> None:
    learner, client = signed_in("importer_en", language="en")
    upload(client, "vllm.json", fixture("vllm_bench_serve_detailed.json"))
    job = BenchJob.objects.get(owner=learner)
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert "Imported (vllm bench serve)" in page and "Tool version" in page
    assert not re.findall(r"[\uac00-\ud7a3]+", page.split("<main")[1].split("</main>")[0])
    form = client.get("/bench/import/").content.decode()
    assert not re.findall(r"[\uac00-\ud7a3]+", form.split("<main")[1].split("</main>")[0])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("notes.json", b'{"hello": "world"}', "어느 도구의 결과인지 알 수 없습니다"),
        ("cut.json", b'{"model_id": "m", "num_prompts": 3, "ttfts": [0.1,', "JSON도 JSON Lines도 아닙니다"),
        ("binary.json", b"\xff\xfe\x00garbage", "UTF-8"),
        ("result.txt", b'{"hello": "world"}', "JSON 파일(.json 또는 .jsonl)만"),
    ],
)
def test_a_wrong_or_corrupt_file_is_refused_in_words_and_nothing_is_saved(name: str, data: bytes, words: str) -> None:
    learner, client = signed_in("careless")
    response = upload(client, name, data)
    assert response.status_code == 400 and words in response.content.decode()
    assert not BenchJob.objects.filter(owner=learner).exists()


@pytest.mark.django_db
def test_a_too_big_file_is_refused_before_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "MAX_BYTES", 1024 * 1024)
    learner, client = signed_in("hoarder")
    response = upload(client, "big.json", b'{"x": "' + b"a" * (1024 * 1024) + b'"}')
    assert response.status_code == 400 and "파일이 너무 큽니다 (최대 1 MB)" in response.content.decode()
    assert not BenchJob.objects.filter(owner=learner).exists()


@pytest.mark.django_db
def test_a_wrong_file_is_refused_in_english_too() -> None:
    _learner, client = signed_in("careless_en", language="en")
    page = upload(client, "notes.json", b'{"hello": "world"}').content.decode()
    assert "Cannot tell which tool wrote this file" in page


@pytest.mark.django_db
def test_another_learner_cannot_see_or_compare_an_imported_run() -> None:
    owner, owner_client = signed_in("owner")
    upload(owner_client, "vllm.json", fixture("vllm_bench_serve_detailed.json"))
    job = BenchJob.objects.get(owner=owner)
    mine = BenchJob.objects.create(owner=User.objects.create(username="other"), kind="speed", status="done")
    _other, client = signed_in("peeker")
    assert client.get(f"/bench/{job.pk}/").status_code == 404
    assert client.get("/bench/compare/", {"ids": [job.pk, mine.pk]}).status_code == 404
    assert f'data-job="{job.pk}"' not in client.get("/bench/").content.decode()


@pytest.mark.django_db
def test_an_imported_kind_is_never_offered_or_run() -> None:
    from bench import configs, kinds
    from bench.forms import JobForm

    assert "imported" not in dict(JobForm().fields["kind"].choices)  # type: ignore[attr-defined]
    with pytest.raises(configs.ConfigError):
        kinds.config_for("imported", {})
    with pytest.raises(configs.ConfigError):
        services.job_create(owner=User.objects.create(username="sneaky"), kind="imported", config={})


# --- the compare page ---------------------------------------------------------------------------


def _lab_run(owner: User, ttft_s: list[float]) -> BenchJob:
    requests = [{"success": True, "ttft": t, "tpot": 0.02, "e2el": t + 0.3} for t in ttft_s]
    results = {"cells": [{"cell": "c", "completed": len(requests), "requests": requests}], "model": "gemma"}
    return BenchJob.objects.create(
        owner=owner, kind="speed", status="done", engine_url="http://127.0.0.1:8200", results=results, lab=1
    )


@pytest.mark.django_db
def test_the_compare_page_puts_an_imported_run_beside_a_lab_run_with_its_source_and_noise_verdict() -> None:
    learner, client = signed_in("comparer")
    lab = _lab_run(learner, [0.05, 0.06, 0.055, 0.052, 0.058])
    upload(client, "vllm.json", fixture("vllm_bench_serve_detailed.json"))
    imported = BenchJob.objects.get(owner=learner, kind="imported")
    page = client.get("/bench/compare/", {"ids": [lab.pk, imported.pk]}).content.decode()
    row = page.split('id="common-metrics"')[1].split(f'data-job="{imported.pk}"')[1].split("</tr>")[0]
    assert "가져온 결과 (vllm bench serve)" in row and "vllm bench serve" in row and 'data-basis="requests"' in row
    verdict = page.split('id="noise-table"')[1].split("</table>")[0]
    assert 'data-verdict="inside"' in verdict or 'data-verdict="differs"' in verdict
    assert "이 실습실에서 잼" in page.split(f'data-job="{lab.pk}"')[1].split("</tr>")[0]


@pytest.mark.django_db
def test_an_imported_run_with_aggregates_only_gets_no_verdict_on_the_noise() -> None:
    learner, client = signed_in("comparer2")
    lab = _lab_run(learner, [0.05, 0.06, 0.055])
    upload(client, "vllm.json", fixture("vllm_bench_serve.json"))
    imported = BenchJob.objects.get(owner=learner, kind="imported")
    page = client.get("/bench/compare/", {"ids": [lab.pk, imported.pk]}).content.decode()
    verdict = page.split('id="noise-table"')[1].split("</table>")[0]
    ttft = verdict.split("<td")[1]
    assert 'data-verdict="aggregates"' in ttft and "요청별 값이 모자라 판단할 수 없음" in ttft
    row = page.split('id="common-metrics"')[1].split(f'data-job="{imported.pk}"')[1].split("</tr>")[0]
    assert 'data-basis="run"' in row and "도구가 보고한 값, 구간 없음" in row


@pytest.mark.django_db
def test_a_learner_keeps_a_bounded_number_of_imported_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "IMPORTED_MAX_PER_USER", 1)
    learner, client = signed_in("collector")
    assert upload(client, "a.json", fixture("vllm_bench_serve.json")).status_code == 302
    refused = upload(client, "b.json", fixture("vllm_bench_serve.json"))
    assert refused.status_code == 400 and "가져온 결과는 한 사람에 1개까지입니다" in refused.content.decode()
    assert BenchJob.objects.filter(owner=learner).count() == 1


@pytest.mark.django_db
def test_an_imported_run_carries_what_its_file_says_of_its_origin_into_the_provenance_diff() -> None:
    learner, client = signed_in("origin")
    lab = _lab_run(learner, [0.05, 0.06, 0.055, 0.052, 0.058])
    upload(client, "guidellm.json", fixture("guidellm.json"))
    imported = BenchJob.objects.get(owner=learner, kind="imported")
    said = imported.results["imported"]["source"]
    assert imported.provenance["model"] == said["model"] and imported.provenance["engine_url"] == said["endpoint"]
    assert imported.provenance["vllm_version"] is None  # the file does not say: unknown, never guessed
    page = client.get("/bench/compare/", {"ids": [lab.pk, imported.pk]}).content.decode()
    diff = page.split('id="provenance-diff"')[1].split("</table>")[0]
    assert said["endpoint"] in diff and "알 수 없음" in diff


# --- AIPerf's two files of one profile, together ------------------------------------------------

RECORDS, SUMMARY = "aiperf_profile_export.jsonl", "aiperf_profile_export_aiperf.json"
OTHER_SUMMARY = "aiperf_other_profile_export_aiperf.json"  # another profile, same settings, seed 2


@pytest.mark.parametrize("order", [(RECORDS, SUMMARY), (SUMMARY, RECORDS)])
def test_aiperfs_two_files_of_one_profile_read_as_one_run_with_requests_and_source(order: tuple[str, str]) -> None:
    (found,) = registry.read_together([(name, fixture(name)) for name in order])
    (records,) = registry.read(fixture(RECORDS))
    (summary,) = registry.read(fixture(SUMMARY))
    assert found.samples == records.samples and len(found.samples) == 8  # every request, from the JSON Lines
    assert found.source == summary.source and found.run == summary.run  # where it came from, from the JSON
    assert found.source["model"] == "gemma-3-270m" and found.source["concurrency"] == 2
    assert found.source["version"] == "0.13.0" and found.source["endpoint"] == "http://127.0.0.1:18431"
    assert found.missing == []  # what one file lacks the other has
    cell = found.cell()
    assert cell["ttft_from"] == cell["tpot_from"] == "requests" and cell["ci_tpot_ms"] is not None
    assert cell["median_ttft_ms"] == pytest.approx(summary.run["median_ttft_ms"])  # AIPerf's p50 of the same


@pytest.mark.django_db
def test_aiperfs_two_files_uploaded_together_become_one_job_with_requests_model_and_provenance() -> None:
    learner, client = signed_in("aiperf_pair")
    response = upload(
        client, "profile_export.jsonl", fixture(RECORDS), ("profile_export_aiperf.json", fixture(SUMMARY))
    )
    job = BenchJob.objects.get(owner=learner)
    assert response.status_code == 302 and response["Location"] == f"/bench/{job.pk}/"
    imported = job.results["imported"]
    assert imported["per_request"] and imported["missing"] == [] and job.total_requests == 8
    assert imported["file_name"] == "profile_export.jsonl, profile_export_aiperf.json"
    assert job.results["model"] == "gemma-3-270m" and job.provenance["model"] == "gemma-3-270m"
    assert job.provenance["engine_url"] == "http://127.0.0.1:18431"
    assert job.results["cells"][0]["ci_ttft_ms"] is not None and job.kind_shown == "가져온 결과 (AIPerf 0.13.0)"
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert 'id="imported-missing"' not in page and "profile_export.jsonl, profile_export_aiperf.json" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("files", "words"),
    [
        # two real profiles run with the same settings: as many requests, other latencies
        (
            (RECORDS, OTHER_SUMMARY),
            "두 파일이 같은 AIPerf 실행의 것이 아닙니다: 요청 수는 같지만 요청 지연의 합이 다릅니다",
        ),
        # the profile's first five records only
        (
            ("five.jsonl", SUMMARY),
            "profile_export.jsonl에는 지연이 적힌 요청이 5개, profile_export_aiperf.json에는 8개",
        ),
        ((SUMMARY, OTHER_SUMMARY), "profile_export_aiperf.json 하나와 profile_export.jsonl 하나를"),
        (
            (RECORDS, "guidellm.json"),
            "한 도구가 한 실행을 나눠 적은 파일들뿐입니다: AIPerf (profile_export_aiperf.json",
        ),
        ((RECORDS, "vllm_bench_serve.json"), "다른 결과는 하나씩 올리세요"),
        ((RECORDS, "notes.json"), "notes.json: 어느 도구의 결과인지 알 수 없습니다"),
    ],
)
def test_files_that_are_not_one_aiperf_profile_are_refused_together_and_nothing_is_saved(
    files: tuple[str, str], words: str
) -> None:
    made = {
        "five.jsonl": b"\n".join(fixture(RECORDS).splitlines()[:5]),
        "notes.json": b'{"hello": "world"}',
    }
    learner, client = signed_in("mixer")
    (first, *rest) = [(name, made[name] if name in made else fixture(name)) for name in files]
    response = upload(client, *first, *rest)
    assert response.status_code == 400 and words in response.content.decode()
    assert not BenchJob.objects.filter(owner=learner).exists()


@pytest.mark.django_db
def test_more_files_than_one_run_holds_are_refused_by_the_form() -> None:
    learner, client = signed_in("hoarder3")
    more = [(RECORDS, fixture(RECORDS)), (SUMMARY, fixture(SUMMARY))]
    response = upload(client, "a.json", fixture(SUMMARY), *more)
    assert response.status_code == 400 and "한 번에 파일을 2개까지 올릴 수 있습니다" in response.content.decode()
    assert not BenchJob.objects.filter(owner=learner).exists()


@pytest.mark.django_db
def test_a_mismatched_aiperf_pair_is_refused_in_english_too() -> None:
    _learner, client = signed_in("mixer_en", language="en")
    page = upload(client, RECORDS, fixture(RECORDS), (OTHER_SUMMARY, fixture(OTHER_SUMMARY))).content.decode()
    assert "The two files are not from the same AIPerf run" in page
    page = upload(client, RECORDS, fixture(RECORDS), ("guidellm.json", fixture("guidellm.json"))).content.decode()
    assert "Upload other results one at a time" in page


# --- a GuideLLM sweep -----------------------------------------------------------------------------

SWEEP = "guidellm_sweep.json"  # --profile kind=sweep,sweep_size=4, 6 requests per benchmark (fixtures README)


def test_a_guidellm_sweep_gives_one_run_per_benchmark_named_by_its_strategy() -> None:
    runs = registry.read(fixture(SWEEP))
    report = json.loads(fixture(SWEEP))
    assert [run.source["strategy"] for run in runs] == [
        "synchronous",
        "throughput@512",
        "constant@18.41",
        "constant@30.88",
    ]
    for run, benchmark in zip(runs, report["benchmarks"], strict=True):
        strategy = benchmark["config"]["strategy"]
        assert run.source["profile"] == strategy["type_"] and run.source["rate"] == strategy.get("rate")
        assert len(run.samples) == len(benchmark["requests"]["successful"]) == 6
        assert run.run["duration"] == pytest.approx(benchmark["duration"])
        assert run.cell()["ci_ttft_ms"] is not None  # each benchmark's own requests: each its own interval
    assert runs[0].source["concurrency"] == 1 and runs[1].source["concurrency"] == 512
    # a constant rate drove the last two: GuideLLM's max_concurrency is only their cap, not their concurrency
    assert runs[2].source["rate"] == pytest.approx(18.4105694837) and runs[2].source["concurrency"] is None
    assert runs[2].source["max_concurrency"] == 512 and "source:concurrency" not in runs[2].missing
    # the runs' requests are their own: each benchmark started after the one before
    assert len({run.source["date"] for run in runs}) == 4


@pytest.mark.django_db
def test_an_uploaded_sweep_lists_each_benchmark_as_a_run_ready_to_compare_beside_a_lab_run() -> None:
    learner, client = signed_in("sweeper")
    lab = _lab_run(learner, [0.05, 0.06, 0.055, 0.052, 0.058])
    response = upload(client, "sweep.json", fixture(SWEEP))
    made = list(BenchJob.objects.filter(owner=learner, kind="imported").order_by("pk"))
    assert response.status_code == 302 and len(made) == 4
    assert response["Location"] == "/bench/?" + "&".join(f"imported={job.pk}" for job in made)
    listed = client.get(response["Location"]).content.decode()
    notice = listed.split('id="just-imported"')[1].split("</section>")[0]
    for job, strategy in zip(made, ("synchronous", "throughput@512", "constant@18.41", "constant@30.88"), strict=True):
        assert job.kind_shown == f"가져온 결과 (GuideLLM 0.8.1, {strategy})"
        assert f"#{job.pk} {job.kind_shown}" in notice
        row = listed.split('id="my-jobs"')[1].split(f'data-job="{job.pk}"')[1].split("</tr>")[0]
        assert "checked" in row and job.kind_shown in row  # ticked for the compare button
    lab_row = listed.split('id="my-jobs"')[1].split(f'data-job="{lab.pk}"')[1].split("</tr>")[0]
    assert "checked" not in lab_row
    page = client.get("/bench/compare/", {"ids": [lab.pk, made[2].pk]}).content.decode()
    row = page.split('id="common-metrics"')[1].split(f'data-job="{made[2].pk}"')[1].split("</tr>")[0]
    assert "constant@18.41" in row and 'data-basis="requests"' in row
    verdict = page.split('id="noise-table"')[1].split("</table>")[0]
    assert 'data-verdict="inside"' in verdict or 'data-verdict="differs"' in verdict


@pytest.mark.django_db
def test_the_list_names_only_the_users_own_runs_as_just_imported() -> None:
    owner, owner_client = signed_in("sweep_owner")
    upload(owner_client, "sweep.json", fixture(SWEEP))
    theirs = BenchJob.objects.filter(owner=owner).values_list("pk", flat=True)
    other, client = signed_in("sweep_peeker")
    own_lab_run = _lab_run(other, [0.05])  # not an import: not listed as one either
    listed = client.get("/bench/", {"imported": [*theirs, own_lab_run.pk]}).content.decode()
    assert 'id="just-imported"' not in listed and "GuideLLM" not in listed


# --- deleting an imported run ---------------------------------------------------------------------


@pytest.mark.django_db
def test_the_owner_deletes_an_imported_run_from_its_page_and_a_lab_run_is_not_deletable() -> None:
    learner, client = signed_in("tidy")
    lab = _lab_run(learner, [0.05, 0.06])
    upload(client, "vllm.json", fixture("vllm_bench_serve_detailed.json"))
    job = BenchJob.objects.get(owner=learner, kind="imported")
    page = client.get(f"/bench/{job.pk}/").content.decode()
    assert f'action="/bench/{job.pk}/delete/"' in page and 'id="delete-job"' in page
    assert job.deletable and not lab.deletable  # the page's button follows the kind's rule
    assert client.get(f"/bench/{job.pk}/delete/").status_code == 405  # only by the form's POST
    assert client.post(f"/bench/{lab.pk}/delete/").status_code == 404
    response = client.post(f"/bench/{job.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == "/bench/"
    assert not BenchJob.objects.filter(pk=job.pk).exists() and BenchJob.objects.filter(pk=lab.pk).exists()
    assert client.get(f"/bench/{job.pk}/").status_code == 404


@pytest.mark.django_db
def test_another_person_cannot_delete_an_imported_run() -> None:
    owner, owner_client = signed_in("keeper")
    upload(owner_client, "vllm.json", fixture("vllm_bench_serve_detailed.json"))
    job = BenchJob.objects.get(owner=owner)
    _other, client = signed_in("vandal")
    assert client.post(f"/bench/{job.pk}/delete/").status_code == 404
    assert BenchJob.objects.filter(pk=job.pk).exists()
    with pytest.raises(ValueError):  # the service refuses a measured run whoever calls it
        services.job_delete(job=_lab_run(owner, [0.05]))


@pytest.mark.django_db
def test_a_deleted_import_frees_its_place_under_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "IMPORTED_MAX_PER_USER", 1)
    learner, client = signed_in("recycler")
    assert upload(client, "a.json", fixture("vllm_bench_serve.json")).status_code == 302
    assert upload(client, "b.json", fixture("vllm_bench_serve.json")).status_code == 400
    client.post(f"/bench/{BenchJob.objects.get(owner=learner).pk}/delete/")
    assert upload(client, "b.json", fixture("vllm_bench_serve.json")).status_code == 302


WARMUP_RECORDS, WARMUP_SUMMARY = "aiperf_warmup_profile_export.jsonl", "aiperf_warmup_profile_export_aiperf.json"


def test_aiperfs_warm_up_records_are_not_requests_of_the_run_alone_or_together() -> None:
    records = [json.loads(line) for line in fixture(WARMUP_RECORDS).splitlines() if line.strip()]
    phases = [record["metadata"]["benchmark_phase"] for record in records]
    assert phases.count("warmup") == 2 and phases.count("profiling") == 4  # as AIPerf 0.13.0 wrote them
    (alone,) = registry.read(fixture(WARMUP_RECORDS))
    assert len(alone.samples) == 4
    (found,) = registry.read_together(
        [(WARMUP_RECORDS, fixture(WARMUP_RECORDS)), (WARMUP_SUMMARY, fixture(WARMUP_SUMMARY))]
    )
    assert len(found.samples) == 4 == json.loads(fixture(WARMUP_SUMMARY))["request_latency"]["count"]


@pytest.mark.django_db
def test_an_uploaded_sweep_is_listed_in_english_too() -> None:
    _learner, client = signed_in("sweeper_en", language="en")
    listed = client.get(upload(client, "sweep.json", fixture(SWEEP))["Location"]).content.decode()
    notice = listed.split('id="just-imported"')[1].split("</section>")[0]
    assert "4 runs just imported" in notice and "Imported (GuideLLM 0.8.1, constant@30.88)" in notice
    assert not re.findall(r"[\uac00-\ud7a3]+", notice)
