"""Exports: ``vllm bench serve --save-result --save-detailed`` JSON (plus our keys) and CSV.

Both work on requests as ``RequestRecord.as_dict()`` gives them, which is also how
a job stores them, so a terminal run, a job's page and the command write the same files.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TextIO

from bench import provenance as provenance_fields
from bench import runner
from bench.kinds import registry
from bench.metrics import summarize
from labapp import addresses
from labapp.csvcells import csv_safe
from rag.vllm.records import RequestRecord

CSV_COLUMNS = [
    "cell",
    "index",
    "success",
    "error",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "client_queue_time_ms",
    "first_chunk_ms",
    "ttft_ms",
    "e2el_ms",
    "decode_time_ms",
    "tpot_ms",
    "server_queue_ms",
    "server_prefill_ms",
    "server_decode_ms",
    "finish_reason",
    "generated_text",
]
_MS = {
    "client_queue_time_ms": "client_queue_time",
    "first_chunk_ms": "first_chunk",
    "ttft_ms": "ttft",
    "e2el_ms": "e2el",
    "decode_time_ms": "decode_time",
    "tpot_ms": "tpot",
    "server_queue_ms": "queue_time_server",
    "server_prefill_ms": "prefill_time_server",
    "server_decode_ms": "decode_time_server",
}


def cell_name(kind: str, cell: dict[str, Any]) -> str:
    """How a cell is called in a CSV and in a vllm-bench-shaped run: as its kind names it."""
    job_kind = registry.find(kind)
    return job_kind.cell_name(cell) if job_kind is not None else str(cell.get("cell", ""))


def csv_row(request: dict[str, Any], *, index: int, cell: str = "") -> dict[str, Any]:
    row = {key: request.get(key) for key in ("success", "prompt_tokens", "output_tokens", "cached_tokens")}
    row |= {"cell": cell, "index": index, "error": request.get("error") or ""}
    row["finish_reason"] = request.get("finish_reason") or ""
    row["generated_text"] = request.get("generated_text") or ""
    row["success"] = "" if row["success"] is None else str(bool(row["success"]))  # True/False, as before
    for column, key in _MS.items():
        value = request.get(key)
        row[column] = None if value is None else round(value * 1000, 3)
    return row


def csv_rows(kind: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per request of a job's (or a command's) results, times in ms."""
    return [
        csv_row(request, index=index, cell=cell_name(kind, cell))
        for cell in results.get("cells", [])
        for index, request in enumerate(cell.get("requests", []))
    ]


def records_csv_rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    return [csv_row(r.as_dict(), index=i) for i, r in enumerate(records)]


def write_csv(out: TextIO, rows: Iterable[dict[str, Any]], *, provenance: dict[str, Any] | None = None) -> None:
    """The requests CSV (a job's export, the command's ``--csv``): a header, then each row, each with
    the run's provenance (``bench.provenance``: where its numbers came from) in the last columns.

    Errors, finish reasons and generated texts come from the engine and cell names from
    settings: every cell goes through ``csv_safe``, so none of them can be a formula.
    """
    _write(out, CSV_COLUMNS, rows, provenance)


def _write(out: TextIO, columns: list[str], rows: Iterable[dict[str, Any]], provenance: dict[str, Any] | None) -> None:
    origin = provenance_fields.csv_values(provenance)
    writer = csv.DictWriter(out, fieldnames=[*columns, *origin])
    writer.writeheader()
    writer.writerows({column: csv_safe(value) for column, value in (row | origin).items()} for row in rows)


ENGINE_COLUMNS = ["cell", "t_s", "running", "waiting", "kv_cache_usage", "prefix_cache_queries", "prefix_cache_hits",
                  "preemptions", "prompt_tokens", "generation_tokens", "iteration_tokens_sum",
                  "iteration_tokens_count"]  # fmt: skip


def engine_rows(kind: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine timeline (every /metrics sample of every cell) with seconds since the job's first
    request, as the job page draws it; counters as vLLM reports them (cumulative)."""
    from rag.vllm.server_metrics import TIMELINE_SERIES

    cells = results.get("cells", [])
    sends = [r.get("t_scheduled") or r["t_send"] for c in cells for r in c.get("requests", []) if r.get("t_send")]
    rows: list[dict[str, Any]] = []
    for cell in cells:
        timeline = (cell.get("server") or {}).get("timeline") or {}
        times = timeline.get("t") or []
        start = min(sends) if sends else (times[0] if times else 0.0)
        for i, at in enumerate(times):
            row = {"cell": cell_name(kind, cell), "t_s": round(at - start, 3)}
            rows.append(row | {key: timeline[key][i] for key in TIMELINE_SERIES if key in timeline})
    return sorted(rows, key=lambda row: row["t_s"])


def engine_timeline_json(kind: str, results: dict[str, Any]) -> dict[str, list[Any]]:
    """The engine timeline as columns (``ENGINE_COLUMNS``), for the JSON export."""
    rows = engine_rows(kind, results)
    return {column: [row.get(column) for row in rows] for column in ENGINE_COLUMNS}


def write_engine_csv(out: TextIO, rows: Iterable[dict[str, Any]], *, provenance: dict[str, Any] | None = None) -> None:
    """The engine timeline CSV, each row with the run's provenance in the last columns (as ``write_csv``)."""
    _write(out, ENGINE_COLUMNS, rows, provenance)


def bench_json(
    requests: list[dict[str, Any]],
    summary: dict[str, Any],
    *,
    model: str,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One run in the shape of vllm bench serve's saved result (with details), plus our keys."""
    data: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": "openai",
        "model_id": model,
        "num_prompts": len(requests),
        "request_rate": "inf" if math.isinf(request_rate) else request_rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        **summary,
        "input_lens": [r.get("prompt_tokens") or 0 for r in requests],
        "output_lens": [r.get("output_tokens") or 0 for r in requests],
        "ttfts": [r.get("ttft") or 0.0 for r in requests],
        "itls": [r.get("itl") or [] for r in requests],
        "latencies": [r.get("e2el") or 0.0 for r in requests],
        "generated_texts": [r.get("generated_text") or "" for r in requests],
        "errors": [r.get("error") or "" for r in requests],
        # ours
        "first_chunk_ttfts": [r.get("first_chunk") or 0.0 for r in requests],
        "cached_tokens": [r.get("cached_tokens") for r in requests],
        "client_queue_times": [r.get("client_queue_time") for r in requests],
        "server_queue_times": [r.get("queue_time_server") for r in requests],
        "server_prefill_times": [r.get("prefill_time_server") for r in requests],
        "server_decode_times": [r.get("decode_time_server") for r in requests],
        "finish_reasons": [r.get("finish_reason") for r in requests],
    }
    return data | (extra or {})


def result_json(
    result: runner.RunResult, summary: dict[str, Any], *, model: str, shape: runner.LoadShape
) -> dict[str, Any]:
    """A run as vllm bench serve's --save-result --save-detailed JSON, plus our own keys."""
    return bench_json(
        [r.as_dict() for r in result.records],
        summary,
        model=model,
        request_rate=shape.request_rate,
        burstiness=shape.burstiness,
        max_concurrency=shape.concurrency,
    )


def _record(request: dict[str, Any]) -> RequestRecord:
    """A stored request back as a record, enough for the aggregates (gaps rebuilt from ITL)."""
    record = RequestRecord(t_send=request.get("t_send") or 0.0, success=bool(request.get("success")))
    for key in (*RequestRecord.FROM_THE_ENGINE, "error", "t_scheduled", "t_end"):
        if request.get(key) is not None:
            setattr(record, key, request[key])
    if request.get("ttft") is not None:
        times = [record.t_send + request["ttft"]]
        for gap in request.get("itl") or []:
            times.append(times[-1] + gap)
        if not request.get("itl") and request.get("e2el") is not None and request["e2el"] != request["ttft"]:
            times.append(record.t_send + request["e2el"])
        record.text_chunk_at = times
    return record


def job_json(job: Any, *, model: str = "") -> dict[str, Any]:
    """A job: its row, its results, and per cell a vllm-bench-shaped run under "benchmarks".

    Its address and every text in it (errors saved before they were scrubbed) are as a reader
    may see them (``labapp.addresses``)."""
    benchmarks = []
    job_kind = registry.find(job.kind)
    sequential = job_kind is None or job_kind.sequential  # one request at a time: a concurrency of 1
    for cell in job.results.get("cells", []):
        requests = cell.get("requests", [])
        records = [_record(r) for r in requests]
        duration = cell.get("duration") or sum(r.e2el or 0 for r in records if r.success)
        summary = summarize(records, duration=duration, peak_in_flight=cell.get("peak_in_flight"))
        benchmarks.append(
            bench_json(
                requests,
                summary,
                model=model,
                request_rate=float(cell.get("request_rate", math.inf)),
                max_concurrency=cell.get("concurrency", 1 if sequential else None),
                # Our own keys beside vLLM's: the cell's name and its medians' 95 % bootstrap intervals.
                extra={"cell": cell_name(job.kind, cell)} | {k: v for k, v in cell.items() if k.startswith("ci_")},
            )
        )
    data = {
        "id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "error": job.error_shown,  # in the reader's language (``labapp.said``)
        "config": job.config,
        "engine_url": addresses.shown(job.engine_url),
        "created_at": job.created_at.isoformat() if job.created_at else None,
        "results": job.results,
        "benchmarks": benchmarks,
        "engine_timeline": engine_timeline_json(job.kind, job.results or {}),
        # Where the numbers came from, read from the engine when the run started; null: not reported.
        "provenance": provenance_fields.Provenance.from_dict(job.provenance).as_dict(),
    }
    return dict(addresses.scrubbed_data(data))
