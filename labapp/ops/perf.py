"""``make perf``: the project's speed as ratios, on this machine, from one command.

Starts whatever of the stack is not already running (Redis, Chroma, the engine, the web
server; `make run` may be up in another terminal), builds the search index, runs each
benchmark command with ``--json``, prints one table and writes it to
``data/perf/perf-<time>.md``. These are measurements, not pass/fail checks.

    python -m labapp.ops.perf [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core.management import call_command

from labapp import addresses
from labapp.ops.report import markdown, save
from labapp.ops.stack import launch
from labapp.ops.stack.components import cpu_has_fast_bf16, engine_dtype, served_model
from rag import embeddings
from rag.chunking import CHUNK_SIZES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")

Row = tuple[str, str, str]  # what, figure, command


def _run(command: str, **options: Any) -> dict[str, Any] | list[Any]:
    out = StringIO()
    call_command(command, json=True, stdout=out, **options)
    data: dict[str, Any] | list[Any] = json.loads(out.getvalue())
    return data


def _command(name: str, options: dict[str, Any]) -> str:
    """The command line a row came from (a True option is a bare flag)."""
    flags = " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in options.items() if k not in ("web",)
    )
    return f"python manage.py {name} {flags}".strip()


def chat_rows(web: str, quick: bool) -> list[Row]:
    options: dict[str, Any] = {"runs": 6 if quick else 20, "top_k": 4, "max_tokens": 8}
    s = _run("chat_overhead", web=web, **options)
    assert isinstance(s, dict)
    command = _command("chat_overhead", options)
    rows = [
        (
            "chat TTFT vs direct vLLM (ratio), shared prefix cached",
            f"{s['ratio']:.3f} ({s['chat_ttft_ms']:.0f} vs {s['direct_ttft_ms']:.0f} ms)",
            command,
        ),
        ("  added by the chat, of which retrieval", f"{s['overhead_ms']:.0f} ms, {s['retrieval_ms']:.0f} ms", command),
        ("  added without retrieval", f"{s['overhead_without_retrieval_ms']:.1f} ms", command),
    ]
    if "chat_own_ms" in s:
        steps = ", ".join(f"{name} {ms:.1f}" for name, ms in s.get("steps_ms", {}).items())
        rows += [
            (
                "  added beyond retrieval and the websocket: the chat's own steps (server clock)",
                f"{s['chat_own_ms']:.1f} ms (from the TTFTs, engine spread included: "
                f"{s['overhead_beyond_retrieval_and_socket_ms']:.1f} ms); steps after arrival: {steps}",
                command,
            ),
            (
                "  retrieval inside the chat: embedding / the rest",
                f"{s['embed_ms']:.1f} ms / {s['search_ms']:.1f} ms",
                command,
            ),
        ]
    cold_options = options | {"runs": 4 if quick else 10, "cold": True}
    c = _run("chat_overhead", web=web, **cold_options)
    assert isinstance(c, dict)
    rows.append(
        (
            "chat TTFT vs direct vLLM (ratio), prefix cache emptied before each",
            f"{c['ratio']:.3f} ({c['chat_ttft_ms']:.0f} vs {c['direct_ttft_ms']:.0f} ms, "
            f"{c['prompt_tokens']} prompt tokens; added {c['overhead_ms']:.0f} ms)",
            _command("chat_overhead", cold_options),
        )
    )
    return rows


def fidelity_rows(quick: bool) -> list[Row]:
    options = {
        "num_prompts": 8 if quick else 16,
        "input_len": 256,
        "output_len": 32,
        "concurrency": 4,
        "rounds": 2 if quick else 4,
    }
    r = _run("bench_fidelity", **options)
    assert isinstance(r, dict)
    command = _command("bench_fidelity", options)
    rows = []
    for key, label in (
        ("median_ttft_ms", "median TTFT"),
        ("median_tpot_ms", "median TPOT"),
        ("output_throughput", "output throughput"),
    ):
        ours, theirs = r["ours"][key], r["vllm"][key]
        rows.append((f"our runner / vllm bench serve: {label}", f"{ours / theirs:.3f}", command))
    cpu_ours, cpu_theirs = r["ours"].get("client_cpu_s", 0.0), r["vllm"].get("client_cpu_s", 0.0)
    rows.append(("  client CPU during the run: ours / vLLM's", f"{cpu_ours:.2f} s / {cpu_theirs:.2f} s", command))
    return rows


def client_rows(quick: bool) -> list[Row]:
    options = {"levels": "1,2,4,8,16,32,64" if quick else "1,2,4,8,16,32,64,128,256", "requests_per_level": 32}
    r = _run("bench_client_overhead", **options)
    assert isinstance(r, dict)
    command = _command("bench_client_overhead", options)
    within = [row for row in r["levels"] if (row["first"]["client_queue_ms"]["p50"] or 0.0) <= 1.0]
    best = max(within, key=lambda row: row["concurrency"]) if within else None
    figure = (
        f"{best['concurrency']} concurrent streams, {best['requests_per_s']} req/s"
        if best
        else "client queue above 1 ms at every level"
    )
    return [("client capacity before client queueing > 1 ms (p50)", figure, command)]


def race_rows(quick: bool) -> list[Row]:
    """A row per concurrency level: our runner's added TTFT, vllm bench serve's, and the ratio."""
    options: dict[str, Any] = {"levels": "1,4,16,64,256", "requests": 64 if quick else 128, "rounds": 1 if quick else 4}
    r = _run("bench_client_race", **options)
    assert isinstance(r, dict)
    command = _command("bench_client_race", options)
    rows = []
    for row in r["levels"]:
        ours, theirs = row["ours"]["added_ttft_ms"]["p50"], row["vllm"]["added_ttft_ms"]["p50"]
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
        rows.append(
            (
                f"added TTFT at concurrency {row['concurrency']}: ours / vllm bench serve (scripted server)",
                f"{ratio} ({ours:.1f} vs {theirs:.1f} ms p50)",
                command,
            )
        )
    return rows


def retrieval_rows(quick: bool) -> list[Row]:
    options = {"sizes": "1000,10000" if quick else "1000,10000,100000", "questions": 20}
    rows = _run("bench_retrieval_scale", **options)
    assert isinstance(rows, list)
    command = _command("bench_retrieval_scale", options)
    found: list[Row] = []
    for row in rows:
        found.append(
            (
                f"retrieval at {row['chunks']} chunks (hybrid search, Korean questions as the chat asks them)",
                f"p50 {row['total_p50_ms']} ms, p95 {row['total_p95_ms']} ms"
                + (f" (embedding p50 {row['embed_p50_ms']} ms)" if "embed_p50_ms" in row else "")
                + (f"; a new process's first question {row['first_query_s']} s" if "first_query_s" in row else ""),
                command,
            )
        )
        if "embedded_total_p50_ms" in row:
            found.append(
                (
                    "  the same with each question embedded too (English questions; a multilingual model)",
                    f"p50 {row['embedded_total_p50_ms']} ms, p95 {row['embedded_total_p95_ms']} ms "
                    f"(embedding p50 {row['embedded_embed_p50_ms']} ms)",
                    command,
                )
            )
    return found


def recall_rows(quick: bool) -> list[Row]:
    """Recall on the Korean evaluation set with the question embedded on each backend, side by side."""
    options: dict[str, Any] = {"chunk_size": [500] if quick else list(CHUNK_SIZES), "backend": "both"}
    found = _run("eval_retrieval", **options)
    assert isinstance(found, list)
    by = {(r["backend"], r["chunk_size"], r["mode"]): r for r in found}
    command = "python manage.py eval_retrieval --backend both " + " ".join(
        f"--chunk-size {size}" for size in options["chunk_size"]
    )
    rows = []
    for size in options["chunk_size"]:
        for mode in ("hybrid", "dense"):
            figures = [
                f"{backend} {by[backend, size, mode]['at_1']:.2f} / {by[backend, size, mode]['at_5']:.2f}"
                for backend in ("onnx", "torch")
                if (backend, size, mode) in by
            ]
            rows.append((f"recall@1 / @5, {mode}, {size}-character chunks", ", ".join(figures), command))
    return rows


def tokenizer_rows(quick: bool) -> list[Row]:
    """Korean recall and lexical search time of each tokenizer at every chunk size (the lexical half alone,
    what a Korean question is searched by with the bundled model; ``--quick``: the same, it takes seconds)."""
    found = _run("compare_tokenizers")
    assert isinstance(found, list)
    return [
        (
            f"recall@1 / @5 and lexical search p50, {row['tokenizer']}, {row['chunk_size']}-character chunks",
            f"{row['at_1']:.2f} / {row['at_5']:.2f}, {row['search_p50_ms']:.2f} ms",
            "python manage.py compare_tokenizers",
        )
        for row in found
    ]


def _record_labs(labs: str, folder: Path) -> None:
    """One default run of each lab in ``labs`` on the engine, saved to ``folder`` (``lab_reliability --save``)."""
    call_command("lab_reliability", runs=1, labs=labs, save=folder, stdout=StringIO())


def _lab_results(quick: bool) -> tuple[Path | None, str]:
    """Where the gradebook's finished lab runs come from (None: the database's latest of each lab), and the
    command that made them for this table ('' if they were there before). On a machine where no lab has
    run yet, each lab runs once first (Labs 3, 5 and 6 alone with ``--quick``): a few minutes per lab."""
    # Imported here, after main's django.setup(): both import models.
    from labapp.labs.catalog import LABS
    from labapp.ops.measures.bench_gradebook import saved_results

    saved = Path(settings.DATA_DIR) / "perf" / "lab-results"
    wanted = [5, 3, 6] if quick else [5, 3, 6, 4, 1, 2]
    have = saved_results(saved)
    if set(have) >= set(wanted):
        return saved, ""
    if not have and set(saved_results(None)) >= set(LABS):
        return None, ""
    labs = ",".join(str(n) for n in wanted if n not in have)  # a --quick run's folder gets the other labs
    _record_labs(labs, saved)
    return saved, f"python manage.py lab_reliability --runs 1 --labs {labs} --save {saved}, then "


def gradebook_rows(quick: bool) -> list[Row]:
    options: dict[str, Any] = {"learners": 10 if quick else 30, "runs": 2}
    saved, recorded = _lab_results(quick)
    if saved is not None:
        options["results"] = saved
    r = _run("bench_gradebook", **options)
    assert isinstance(r, dict)
    figure = (
        f"{r['ratio']:.2f} ({r['gradebook_ms']} vs {r['lab_page_ms']} ms, first read {r['gradebook_first_ms']} ms; "
        f"{r['learners']} learners × {r['labs']} labs × {r['runs_per_lab']} runs)"
    )
    return [("gradebook / a lab page (time to render)", figure, recorded + _command("bench_gradebook", options))]


def decode_rows(quick: bool) -> list[Row]:
    r = _run("bench_decode_bound")
    assert isinstance(r, dict)
    return [
        (
            "measured TPOT / memory-bandwidth bound",
            f"{r['ratio']:.2f} ({r['measured_tpot_ms']:.1f} ms vs ≥ {r['bound_tpot_ms']:.1f} ms: "
            f"{r['weight_bytes'] / 1e9:.2f} GB at {r['read_bandwidth_gb_s']:.1f} GB/s)",
            "python manage.py bench_decode_bound",
        )
    ]


def router_rows(quick: bool) -> list[Row]:
    """vllm-router's cost to TTFT, when the chat goes through one (LAB_ROUTER); nothing otherwise."""
    if not settings.LAB_ROUTER:
        return []
    options = {"runs": 6 if quick else 10}
    r = _run("router_overhead", **options)
    assert isinstance(r, dict)
    figure = (
        f"{r['ratio']:.3f} ({r['routed_ttft_ms']:.0f} vs {r['direct_ttft_ms']:.0f} ms; "
        f"added {r['added_ms']:.1f} ms, median of the pairs)"
    )
    return [("TTFT through vllm-router / direct to its engine (ratio)", figure, _command("router_overhead", options))]


def machine_line() -> str:
    """What every figure of the table ran on: cores, the CPU's bf16 support, the engine's dtype and model,
    the embedding backend and the date."""
    cpu = "avx512_bf16 or AMX" if cpu_has_fast_bf16() else "AVX2, no fast bf16"
    engine = (
        f"embedded {served_model()} in {engine_dtype(gpu=False)}"
        if settings.VLLM_EMBEDDED
        else addresses.shown(settings.VLLM_BASE_URL)  # a table that lands in the docs: no credentials
    )
    return (
        f"Measured {datetime.now():%Y-%m-%d} on {os.cpu_count()} cores ({cpu}); engine: {engine}; "
        f"embedding: {embeddings.model_label()}."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs and sizes (a few minutes)")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated: chat,router,fidelity,client,race,retrieval,recall,tokenizers,decode,gradebook",
    )
    args = parser.parse_args(argv)
    django.setup()

    log_dir = Path(settings.DATA_DIR) / "perf" / "logs"
    sections: dict[str, Callable[[], list[Row]]] = {
        "chat": lambda: chat_rows(f"http://127.0.0.1:{settings.WEB_PORT}", args.quick),
        "router": lambda: router_rows(args.quick),
        "fidelity": lambda: fidelity_rows(args.quick),
        "client": lambda: client_rows(args.quick),
        "race": lambda: race_rows(args.quick),
        "retrieval": lambda: retrieval_rows(args.quick),
        "recall": lambda: recall_rows(args.quick),
        "tokenizers": lambda: tokenizer_rows(args.quick),
        "decode": lambda: decode_rows(args.quick),
        "gradebook": lambda: gradebook_rows(args.quick),
    }
    wanted = [s for s in args.only.split(",") if s] or list(sections)
    unknown = sorted(set(wanted) - set(sections))
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    rows: list[Row] = []
    started = launch.start_missing(("redis", "chroma", "engine", "router", "web"), log_dir, tag="perf")
    try:
        call_command("migrate", verbosity=0)
        call_command("load_chapter", verbosity=0)
        call_command("build_index", wait=120, verbosity=0)
        for name in wanted:
            began = time.monotonic()
            print(f"[perf] {name} …", flush=True)
            try:
                rows += sections[name]()
            except Exception as exc:  # one benchmark failing does not lose the others
                rows.append((name, f"failed: {type(exc).__name__}: {exc}"[:300], "—"))
            print(f"[perf] {name} took {time.monotonic() - began:.0f} s", flush=True)
    finally:
        for service in reversed(started):
            service.stop()
    text = "\n".join([machine_line(), "", markdown(("what", "measured", "command"), rows, code_last=True)])
    print(text)
    out = save(Path(settings.DATA_DIR) / "perf" / f"perf-{datetime.now():%Y%m%d-%H%M%S}.md", text)
    print(f"[perf] written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
