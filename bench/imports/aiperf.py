"""AIPerf's profile export (``aiperf profile …``): ``profile_export_aiperf.json`` or ``profile_export.jsonl``.

The JSON holds the run's aggregates, one block per metric (``{"unit", "avg", "p50", "p90", "p99", …}``),
``aiperf_version``, ``input_config`` (models, endpoint, phases with their concurrency or rate) and the
start time; no request of its own. The JSON Lines file holds one record per request,
``{"metadata": {…}, "metrics": {name: {"value", "unit"}}, "error": …}``, and says nothing of the tool's
version, the model or the endpoint; it also holds the warm-up requests (``metadata.benchmark_phase``
``warmup``), which are not the run's and are left out. So either file lacks what the other has: each
is read on its own, and the two of one profile uploaded together are read into one run
(``load_together``): the requests from the JSON Lines, the source and the tool's aggregates from the
JSON. They are checked to be one run's: the profiled records with a latency must be as many as the
JSON's ``request_latency`` count and their latencies must add up to its ``sum`` (the JSON's
aggregates are computed from those very records). The records name no model, so the model cannot be
compared.

Mapped onto docs/metrics.md: TTFT is ``time_to_first_token``; E2EL ``request_latency``; the gaps between
tokens ``inter_chunk_latency`` (per chunk, as ours); token counts the server's usage
(``usage_prompt_tokens``, ``usage_completion_tokens``) when present, else AIPerf's own count with its
tokenizer; TPOT = (E2EL − TTFT) / (output tokens − 1) with those counts. AIPerf's own
``inter_token_latency`` divides by the tokens its tokenizer counted, which can differ from the server's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from bench.imports import registry
from bench.imports.result import RUN_KEYS, Imported, NotImportable, Sample, number, tpot_of, whole
from labapp.said import gettext as _

NAME = "aiperf"
TOOL = "AIPerf"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_record(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("metadata"), dict) and "metrics" in item


def detect(content: Any) -> bool:
    if isinstance(content, dict):
        return "aiperf_version" in content
    return isinstance(content, list) and bool(content) and all(_is_record(item) for item in content)


def _value(metrics: dict[str, Any], name: str) -> Any:
    return _dict(metrics.get(name)).get("value")


def _ms(metrics: dict[str, Any], name: str) -> float | None:
    """A per-request time in seconds from AIPerf's milliseconds (its unit says so)."""
    block = _dict(metrics.get(name))
    got = number(block.get("value"))
    return got / 1000 if got is not None and block.get("unit") == "ms" else None


def _sample(record: dict[str, Any]) -> Sample:
    metrics = _dict(record.get("metrics"))
    error = record.get("error")
    success = not error and not _dict(record.get("metadata")).get("was_cancelled")
    ttft, e2el = _ms(metrics, "time_to_first_token"), _ms(metrics, "request_latency")
    out = whole(_value(metrics, "usage_completion_tokens"))
    if out is None:
        out = whole(_value(metrics, "output_sequence_length"))
    gaps = _dict(metrics.get("inter_chunk_latency"))
    itl = None
    if isinstance(gaps.get("value"), list) and gaps.get("unit") == "ms":
        itl = tuple(g / 1000 for g in (number(x) for x in gaps["value"]) if g is not None)
    prompt = whole(_value(metrics, "usage_prompt_tokens"))
    return Sample(
        success=bool(success),
        ttft=ttft if success else None,
        e2el=e2el if success else None,
        tpot=tpot_of(ttft, e2el, out) if success else None,
        itl=itl if success else None,
        prompt_tokens=prompt if prompt is not None else whole(_value(metrics, "input_sequence_length")),
        output_tokens=out,
        error=str(_dict(error).get("message") or error) if error else None,
    )


def _measured(records: list[Any]) -> list[dict[str, Any]]:
    """The records of the profiling phase: a record AIPerf marks as warm-up is not part of the measurement."""
    return [
        r
        for r in records
        if "warmup" not in (_dict(r.get("metadata")).get(k) for k in ("benchmark_phase", "phase_kind"))
    ]


def _from_records(records: list[Any]) -> Imported:
    samples = tuple(_sample(r) for r in _measured(records))
    run: dict[str, float | None] = dict.fromkeys(RUN_KEYS)
    run["completed"] = float(sum(1 for s in samples if s.success))
    run["failed"] = float(sum(1 for s in samples if not s.success))
    source = dict.fromkeys(("version", "model", "endpoint", "backend", "date", "concurrency", "rate"))
    return Imported(tool=NAME, source={**source, "tool": TOOL}, run=run, samples=samples, notes=("usage_tokens",))


def _stat(content: dict[str, Any], name: str, stat: str, scale: float = 1.0) -> float | None:
    got = number(_dict(content.get(name)).get(stat))
    return got * scale if got is not None else None


def _from_summary(content: dict[str, Any]) -> Imported:
    run: dict[str, float | None] = dict.fromkeys(RUN_KEYS)
    run["completed"] = _stat(content, "request_count", "avg")
    errors = content.get("error_summary")
    run["failed"] = (
        float(sum(int(e.get("count") or 0) for e in errors if isinstance(e, dict)))
        if isinstance(errors, list)
        else None
    )
    run["duration"] = _stat(content, "benchmark_duration", "avg")
    run["total_input_tokens"] = _stat(content, "total_usage_prompt_tokens", "avg")
    run["total_output_tokens"] = _stat(content, "total_usage_completion_tokens", "avg")
    run["request_throughput"] = _stat(content, "request_throughput", "avg")
    run["total_token_throughput"] = _stat(content, "total_token_throughput", "avg")
    if run["duration"] and run["total_output_tokens"] is not None:  # with the server's count, as ours
        run["output_throughput"] = run["total_output_tokens"] / run["duration"]
    for ours, theirs in (("ttft", "time_to_first_token"), ("itl", "inter_chunk_latency"), ("e2el", "request_latency")):
        for stat, key in (("mean", "avg"), ("median", "p50"), ("p90", "p90"), ("p99", "p99")):
            run[f"{stat}_{ours}_ms"] = _stat(content, theirs, key)
    config = _dict(content.get("input_config"))
    endpoint = _dict(config.get("endpoint"))
    phases = [p for p in config.get("phases") or [] if isinstance(p, dict) and p.get("kind") == "profiling"]
    phase = phases[0] if phases else {}
    models = [m.get("name") for m in _dict(config.get("models")).get("items") or [] if isinstance(m, dict)]
    urls = endpoint.get("urls") or []
    source = {
        "tool": TOOL,
        "version": content.get("aiperf_version"),
        "model": ", ".join(str(m) for m in models if m) or None,
        "endpoint": ", ".join(str(u) for u in urls) or None,
        "backend": endpoint.get("type"),
        "date": content.get("start_time"),
        "concurrency": phase.get("concurrency"),
        "rate": phase.get("rate") or phase.get("request_rate"),
        "profile": phase.get("type"),
    }
    # AIPerf's inter_token_latency uses its tokenizer's count: not our TPOT, so TPOT stays missing here.
    return Imported(tool=NAME, source=source, run=run, notes=("itl_own_tokens",))


def load(content: Any) -> list[Imported]:
    if not detect(content):
        raise NotImportable(_("AIPerf의 결과 파일이 아닙니다"))
    return [_from_summary(content)] if isinstance(content, dict) else [_from_records(content)]


def _same_run(summary: dict[str, Any], records: list[Any]) -> None:
    """NotImportable unless the records are the ones the summary's aggregates were computed from."""
    latency = _dict(summary.get("request_latency"))
    # Every record with a latency, as AIPerf's aggregate counts them (a failed request has none).
    found = (number(_value(_dict(record.get("metrics")), "request_latency")) for record in _measured(records))
    theirs = [latency for latency in found if latency is not None]
    count, total = whole(latency.get("count")), number(latency.get("sum"))
    if count is None:  # a summary without the latency's count: the requests that completed
        count = whole(_dict(summary.get("request_count")).get("avg"))
    if count is not None and count != len(theirs):
        raise NotImportable(
            _(
                "두 파일이 같은 AIPerf 실행의 것이 아닙니다: profile_export.jsonl에는 지연이 적힌 요청이 "
                "%(records)d개, profile_export_aiperf.json에는 %(summary)d개입니다. 한 실행의 두 파일을 함께 올리세요."
            )
            % {"records": len(theirs), "summary": count}
        )
    if total is not None and not math.isclose(sum(theirs), total, rel_tol=1e-6, abs_tol=1e-3):
        raise NotImportable(
            _(
                "두 파일이 같은 AIPerf 실행의 것이 아닙니다: 요청 수는 같지만 요청 지연의 합이 다릅니다 "
                "(profile_export.jsonl %(records).1f ms, profile_export_aiperf.json %(summary).1f ms). "
                "한 실행의 두 파일을 함께 올리세요."
            )
            % {"records": sum(theirs), "summary": total}
        )


def load_together(contents: list[Any]) -> list[Imported]:
    """One profile's ``profile_export_aiperf.json`` and ``profile_export.jsonl`` (either order) as one run."""
    summaries = [c for c in contents if isinstance(c, dict) and detect(c)]
    records = [c for c in contents if isinstance(c, list) and detect(c)]
    if len(summaries) != 1 or len(records) != 1 or len(contents) != 2:
        raise NotImportable(
            _("AIPerf의 파일을 함께 올릴 때는 profile_export_aiperf.json 하나와 profile_export.jsonl 하나를 올리세요")
        )
    _same_run(summaries[0], records[0])
    summary, requests = _from_summary(summaries[0]), _from_records(records[0])
    # The aggregates and where the run came from are the JSON's; the requests (and TPOT from them) the JSON Lines'.
    return [dataclasses.replace(summary, samples=requests.samples, notes=requests.notes)]


IMPORTER = registry.register(
    registry.Importer(
        name=NAME,
        tool=TOOL,
        detect=detect,
        load=load,
        load_together=load_together,
        together="profile_export_aiperf.json, profile_export.jsonl",
    )
)
