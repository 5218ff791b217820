"""The performance commands: decode vs the memory-bandwidth bound, retrieval latency at scale."""

from __future__ import annotations

import json
import struct
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from labapp.ops import scripted
from labapp.ops.measures import bench_decode_bound


def _safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    header = {name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for name, shape in tensors.items()}
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.fixture
def engine_script() -> scripted.Script:
    return scripted.Script(delay_s=0.002, pieces=["a"] * 12)


@pytest.fixture
def fake(scripted_engine: tuple[scripted.Script, str]) -> str:
    return scripted_engine[1]


def test_parameters_are_counted_from_the_safetensors_headers(tmp_path: Path) -> None:
    _safetensors(tmp_path / "model-1.safetensors", {"embed": [1000, 64], "norm": [64]})
    _safetensors(tmp_path / "model-2.safetensors", {"proj": [64, 64, 2]})
    assert bench_decode_bound.weight_count(tmp_path) == 64000 + 64 + 8192


def test_read_bandwidth_is_a_positive_rate() -> None:
    assert bench_decode_bound.read_bandwidth(mib_per_reader=8, readers=2, rounds=2) > 1e8  # above 100 MB/s


def test_the_decode_bound_command_prints_the_ratio(fake: str, settings: Any, tmp_path: Path) -> None:
    settings.VLLM_BASE_URL, settings.VLLM_MODEL = fake, ""
    _safetensors(tmp_path / "model.safetensors", {"w": [1000, 1000]})
    out = StringIO()
    call_command(
        "bench_decode_bound", model_dir=tmp_path, dtype="float32", output_tokens=8, repeats=2, json=True, stdout=out
    )
    report = json.loads(out.getvalue())
    assert report["parameters"] == 1_000_000 and report["weight_bytes"] == 4_000_000
    assert report["bound_tpot_ms"] > 0 and report["measured_tpot_ms"] > 0
    assert report["ratio"] == pytest.approx(report["measured_tpot_ms"] / report["bound_tpot_ms"])


def test_the_router_overhead_command_pairs_each_direct_request_with_a_routed_one() -> None:
    def engine() -> scripted.Script:
        return scripted.Script(ttft_s=0.02, delay_s=0.002, pieces=["a"] * 8)  # TTFTs well above 0.1 ms rounding

    with scripted.serve(engine()) as direct, scripted.serve(engine()) as standing_in_for_the_router:
        out = StringIO()
        call_command(
            "router_overhead", engine=direct, router=standing_in_for_the_router, runs=3, pause=0, json=True, stdout=out
        )
    report = json.loads(out.getvalue())
    assert report["runs"] == 3 and len(report["direct_all_ms"]) == len(report["routed_all_ms"]) == 3
    assert report["direct_ttft_ms"] >= 20 and report["routed_ttft_ms"] >= 20 and report["cached_tokens"] == 16
    assert report["ratio"] == pytest.approx(report["routed_ttft_ms"] / report["direct_ttft_ms"], rel=0.01)


@pytest.mark.integration
@pytest.mark.django_db
def test_retrieval_latency_is_measured_on_a_synthetic_collection(chroma_server: str) -> None:
    call_command("load_chapter", verbosity=0)
    out = StringIO()
    call_command("bench_retrieval_scale", sizes="300", questions=3, json=True, stdout=out)
    (row,) = json.loads(out.getvalue())
    assert row["chunks"] == 300 and row["total_p50_ms"] > 0 and row["search_p95_ms"] >= row["search_p50_ms"]
    # Korean questions are searched by BM25 alone (no embedding); the second pass embeds each one.
    assert row["embed_p50_ms"] == 0.0 and row["embedded_embed_p50_ms"] > 0
    again = StringIO()
    call_command("bench_retrieval_scale", sizes="300", questions=2, json=True, stdout=again)
    assert json.loads(again.getvalue())[0]["fill_s"] == 0.0  # the collection is kept for the next run


@pytest.mark.django_db
def test_make_perf_turns_each_commands_json_into_table_rows(
    monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Path
) -> None:
    from labapp.ops import perf

    settings.DATA_DIR = tmp_path

    canned: dict[str, Any] = {
        "chat_overhead": {"ratio": 1.21, "chat_ttft_ms": 370.0, "direct_ttft_ms": 305.0, "overhead_ms": 70.0,
                          "retrieval_ms": 49.0, "overhead_without_retrieval_ms": 17.0, "prompt_tokens": 612,
                          "chat_own_ms": 2.6, "overhead_beyond_retrieval_and_socket_ms": 4.1, "embed_ms": 12.0,
                          "search_ms": 5.5, "steps_ms": {"checked": 2.1, "sent": 20.0}},
        "bench_fidelity": {"ours": {"median_ttft_ms": 396.0, "median_tpot_ms": 28.5, "output_throughput": 101.0,
                                    "client_cpu_s": 1.5},
                           "vllm": {"median_ttft_ms": 393.5, "median_tpot_ms": 31.5, "output_throughput": 94.3,
                                    "client_cpu_s": 2.25}},
        "bench_client_overhead": {"levels": [
            {"concurrency": 1, "first": {"client_queue_ms": {"p50": 0.15}}, "requests_per_s": 7.9},
            {"concurrency": 8, "first": {"client_queue_ms": {"p50": 2.4}}, "requests_per_s": 57.7}]},
        "bench_retrieval_scale": [{"chunks": 1000, "total_p50_ms": 6.0, "total_p95_ms": 9.0, "embed_p50_ms": 0.0,
                                   "first_query_s": 0.21, "embedded_total_p50_ms": 40.0,
                                   "embedded_total_p95_ms": 60.0, "embedded_embed_p50_ms": 12.5}],
        "eval_retrieval": [
            {"backend": b, "chunk_size": 500, "mode": m, "at_1": 0.62, "at_5": 0.88}
            for b in ("onnx", "torch") for m in ("dense", "lexical", "hybrid")],
        "bench_client_race": {"levels": [
            {"concurrency": 1, "ratio": 0.9, "ours": {"added_ttft_ms": {"p50": 1.8}},
             "vllm": {"added_ttft_ms": {"p50": 2.0}}},
            {"concurrency": 256, "ratio": None, "ours": {"added_ttft_ms": {"p50": 9.0}},
             "vllm": {"added_ttft_ms": {"p50": 0.0}}}]},
        "bench_decode_bound": {"ratio": 1.4, "measured_tpot_ms": 28.0, "bound_tpot_ms": 20.0,
                               "weight_bytes": 1.07e9, "read_bandwidth_gb_s": 53.6},
        "bench_gradebook": {"ratio": 1.52, "gradebook_ms": 469, "lab_page_ms": 308, "gradebook_first_ms": 1200,
                            "learners": 30, "labs": 6, "runs_per_lab": 2},
    }  # fmt: skip
    monkeypatch.setattr(perf, "_run", lambda command, **options: canned[command])
    recorded: list[tuple[str, Path]] = []  # no lab has run here: make perf runs each once for the gradebook
    monkeypatch.setattr(perf, "_record_labs", lambda labs, folder: recorded.append((labs, folder)))
    rows = perf.chat_rows("http://x", quick=True) + perf.fidelity_rows(quick=True) + perf.client_rows(quick=True)
    rows += perf.retrieval_rows(quick=True) + perf.decode_rows(quick=True) + perf.gradebook_rows(quick=True)
    rows += perf.race_rows(quick=True) + perf.recall_rows(quick=True)
    text = {what: figure for what, figure, _ in rows}
    assert text["chat TTFT vs direct vLLM (ratio), shared prefix cached"].startswith("1.210")
    assert "612 prompt tokens" in text["chat TTFT vs direct vLLM (ratio), prefix cache emptied before each"]
    assert any(command.endswith("--cold") for _, _, command in rows)
    assert text["our runner / vllm bench serve: median TTFT"] == "1.006"
    assert text["  client CPU during the run: ours / vLLM's"] == "1.50 s / 2.25 s"
    assert text["client capacity before client queueing > 1 ms (p50)"].startswith("1 concurrent")
    korean = text["retrieval at 1000 chunks (hybrid search, Korean questions as the chat asks them)"]
    assert korean.startswith("p50 6.0 ms, p95 9.0 ms") and "first question 0.21 s" in korean
    embedded = text["  the same with each question embedded too (English questions; a multilingual model)"]
    assert embedded == "p50 40.0 ms, p95 60.0 ms (embedding p50 12.5 ms)"
    assert text["  added beyond retrieval and the websocket: the chat's own steps (server clock)"].startswith("2.6 ms")
    assert text["recall@1 / @5, hybrid, 500-character chunks"] == "onnx 0.62 / 0.88, torch 0.62 / 0.88"
    assert text["measured TPOT / memory-bandwidth bound"].startswith("1.40")
    assert text["gradebook / a lab page (time to render)"].startswith("1.52 (469 vs 308 ms")
    assert [labs for labs, _ in recorded] == ["5,3,6"]
    (gradebook,) = [command for what, _, command in rows if what.startswith("gradebook")]
    assert gradebook.startswith("python manage.py lab_reliability --runs 1 --labs 5,3,6 --save ")
    assert f"then python manage.py bench_gradebook --learners 10 --runs 2 --results {recorded[0][1]}" in gradebook
    # A full run after a --quick one records only the labs the folder lacks, then uses all six.
    for number in (5, 3, 6):
        (recorded[0][1] / f"lab{number}-run1.json").parent.mkdir(parents=True, exist_ok=True)
        (recorded[0][1] / f"lab{number}-run1.json").write_text(json.dumps({"results": {}}))
    perf.gradebook_rows(quick=False)
    assert [labs for labs, _ in recorded] == ["5,3,6", "4,1,2"]
    race = "added TTFT at concurrency %d: ours / vllm bench serve (scripted server)"
    assert text[race % 1] == "0.90 (1.8 vs 2.0 ms p50)" and text[race % 256].startswith("—")
    assert all(command.startswith("python manage.py") for _, _, command in rows)
    with pytest.raises(SystemExit):
        perf.main(["--only", "nonsense"])
