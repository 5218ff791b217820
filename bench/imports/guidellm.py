"""GuideLLM's JSON report (``guidellm run … --output kind=json,path=x.json``; older releases:
``guidellm benchmark … --output-path x.json``).

The report is ``{"metadata": {"guidellm_version", …}, "config": {"spec": {"backend", "profile", …}},
"benchmarks": [...]}``: one benchmark per strategy it ran (a sweep holds several), each with its
``config.strategy`` (kind, streams or rate), its ``metrics`` (distributions per status:
``successful``, ``errored``, ``incomplete``) and its ``requests`` by status, every request with
``request_latency`` (s), ``time_to_first_token_ms``, ``prompt_tokens``, ``output_tokens`` and, under
``info.timings``, the clock of its send and of its first and last token. Those requests may be a
sample of the run's (``config.sample_size``).

Mapped onto docs/metrics.md: TTFT = first token − send; E2EL = last token − send (GuideLLM's own
request latency runs to the end of the response); TPOT = (E2EL − TTFT) / (output tokens − 1). Its
``time_per_output_token_ms`` is latency over all output tokens, TTFT included: not our TPOT, and not
used. The gaps between tokens are not in the file.

Each benchmark is its own run, named by its strategy as GuideLLM's console names it
(``synchronous``, ``concurrent@2``, ``throughput@512``, ``constant@18.41``: source key ``strategy``),
so that a sweep's runs can each be told apart and set beside a lab run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bench.imports import registry
from bench.imports.result import RUN_KEYS, Imported, NotImportable, Sample, number, tpot_of, whole
from labapp.said import gettext as _

NAME = "guidellm"
TOOL = "GuideLLM"


def detect(content: Any) -> bool:
    return (
        isinstance(content, dict)
        and isinstance(content.get("benchmarks"), list)
        and isinstance(content.get("metadata"), dict)
        and "guidellm_version" in content["metadata"]
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sample(request: dict[str, Any], *, success: bool) -> Sample:
    timings = _dict(_dict(request.get("info")).get("timings"))
    start = number(timings.get("request_start"))
    first, last = number(timings.get("first_token_iteration")), number(timings.get("last_token_iteration"))
    ttft = first - start if start is not None and first is not None else None
    if ttft is None and number(request.get("time_to_first_token_ms")) is not None:
        ttft = float(request["time_to_first_token_ms"]) / 1000
    e2el = last - start if start is not None and last is not None else None
    out = whole(request.get("output_tokens"))
    error = _dict(request.get("info")).get("error")
    return Sample(
        success=success,
        ttft=ttft if success else None,
        e2el=e2el if success else None,
        tpot=tpot_of(ttft, e2el, out) if success else None,
        prompt_tokens=whole(request.get("prompt_tokens")),
        output_tokens=out,
        error=str(error) if error else None,
    )


def _stat(metrics: dict[str, Any], name: str, stat: str, scale: float = 1.0) -> float | None:
    found = _dict(_dict(metrics.get(name)).get("successful"))
    value = _dict(found.get("percentiles")).get(stat) if stat.startswith("p") else found.get(stat)
    got = number(value)
    return got * scale if got is not None else None


def _run(benchmark: dict[str, Any]) -> dict[str, float | None]:
    metrics = _dict(benchmark.get("metrics"))
    totals = _dict(metrics.get("request_totals"))
    run: dict[str, float | None] = dict.fromkeys(RUN_KEYS)
    run["completed"], run["duration"] = number(totals.get("successful")), number(benchmark.get("duration"))
    errored, incomplete = number(totals.get("errored")), number(totals.get("incomplete"))
    run["failed"] = errored + incomplete if errored is not None and incomplete is not None else None
    run["total_input_tokens"] = _stat(metrics, "prompt_token_count", "total_sum")
    run["total_output_tokens"] = _stat(metrics, "output_token_count", "total_sum")
    duration = run["duration"]
    if duration:  # docs/metrics.md: per second of the run, over successful requests
        for key, total in (("request_throughput", "completed"), ("output_throughput", "total_output_tokens")):
            amount = run[total]
            run[key] = amount / duration if amount is not None else None
    for ours, theirs, scale in (
        ("ttft", "time_to_first_token_ms", 1.0),
        ("tpot", "inter_token_latency_ms", 1.0),
        ("e2el", "request_latency", 1000.0),
    ):
        for stat, key in (("mean", "mean"), ("median", "median"), ("p90", "p90"), ("p99", "p99")):
            run[f"{stat}_{ours}_ms"] = _stat(metrics, theirs, key, scale)
    return run


# The strategy's figure after "@" in GuideLLM's own name for it, and how it is written.
_NAMED_BY = {"concurrent": ("streams", "{}"), "throughput": ("max_concurrency", "{}"), "constant": ("rate", "{:.2f}")}
_NAMED_BY |= {"poisson": ("rate", "{:.2f}")}


def strategy_name(strategy: dict[str, Any]) -> str | None:
    """The benchmark's strategy as GuideLLM's tables name it ("constant@18.41"); None without a type."""
    kind = strategy.get("type_")
    if not isinstance(kind, str) or not kind:
        return None
    key, shape = _NAMED_BY.get(kind, ("", ""))
    figure = strategy.get(key) if key else None
    if isinstance(figure, bool) or not isinstance(figure, int | float):
        return kind
    return f"{kind}@{shape.format(figure)}"


def _concurrency(strategy: dict[str, Any]) -> Any:
    """The requests a strategy keeps in flight when that is what drives it: its streams, one for synchronous,
    and throughput's all-at-once up to its max_concurrency; None for a rate (constant, poisson)."""
    if strategy.get("rate") is not None:
        return None
    return strategy.get("streams") or strategy.get("max_concurrency")


def _source(content: dict[str, Any], benchmark: dict[str, Any]) -> dict[str, Any]:
    config = _dict(benchmark.get("config"))
    backend = _dict(config.get("backend")) or _dict(_dict(_dict(content.get("config")).get("spec")).get("backend"))
    strategy = _dict(config.get("strategy"))
    started = number(benchmark.get("start_time"))
    target = backend.get("target")
    return {
        "tool": TOOL,
        "version": _dict(content.get("metadata")).get("guidellm_version"),
        "model": backend.get("model"),
        "endpoint": f"{target}{backend.get('request_format') or ''}" if target else None,
        "backend": backend.get("kind"),
        "date": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds") if started else None,
        "concurrency": _concurrency(strategy),
        # A rate-driven strategy's max_concurrency is only a cap on requests in flight, not what drove it.
        "max_concurrency": strategy.get("max_concurrency") if strategy.get("rate") is not None else None,
        "rate": strategy.get("rate"),
        "profile": strategy.get("type_"),
        "strategy": strategy_name(strategy),
        "sample_size": config.get("sample_size"),
    }


def load(content: Any) -> list[Imported]:
    if not detect(content):
        raise NotImportable(_("GuideLLM의 보고서가 아닙니다"))
    runs = []
    for benchmark in content["benchmarks"]:
        if not isinstance(benchmark, dict):
            continue
        requests = _dict(benchmark.get("requests"))
        samples = [_sample(r, success=True) for r in requests.get("successful") or [] if isinstance(r, dict)]
        for status in ("errored", "incomplete"):
            samples += [_sample(r, success=False) for r in requests.get(status) or [] if isinstance(r, dict)]
        notes = ("e2el_last_token", "guidellm_tpot")
        runs.append(
            Imported(
                tool=NAME, source=_source(content, benchmark), run=_run(benchmark), samples=tuple(samples), notes=notes
            )
        )
    return runs


IMPORTER = registry.register(registry.Importer(name=NAME, tool=TOOL, detect=detect, load=load))
