"""``vllm bench serve --save-result`` (and ``--save-detailed``) JSON.

The file is one object: the run's settings (``date``, ``backend``, ``model_id``, ``num_prompts``,
``request_rate``, ``burstiness``, ``max_concurrency``), its aggregates under our names already
(bench/metrics.py keys them as vLLM does), and per request ``latencies`` and ``queue_times``;
``--save-detailed`` adds ``ttfts``, ``itls``, ``input_lens``, ``output_lens``, ``start_times``,
``errors`` and ``generated_texts``. It states neither vLLM's version nor the server's address.

Its TTFT is the first chunk with choices (our ``first_chunk``), its latency the last such chunk:
the same as our TTFT and E2EL when every chunk carries text, as vLLM's do.
"""

from __future__ import annotations

from typing import Any

from bench.imports import registry
from bench.imports.result import RUN_KEYS, Imported, NotImportable, Sample, number, tpot_of, whole
from labapp.said import gettext as _

NAME = "vllm_bench_serve"
TOOL = "vllm bench serve"
SIGNATURE = {"model_id", "num_prompts", "completed", "duration", "request_throughput"}


def detect(content: Any) -> bool:
    return isinstance(content, dict) and SIGNATURE <= set(content)


def _list(content: dict[str, Any], key: str, size: int) -> list[Any] | None:
    """A per-request list of the run's length, or None (absent, or of another length)."""
    found = content.get(key)
    return found if isinstance(found, list) and len(found) == size and size > 0 else None


def _samples(content: dict[str, Any]) -> tuple[Sample, ...]:
    latencies = content.get("latencies")
    size = len(latencies) if isinstance(latencies, list) else len(content.get("ttfts") or [])
    ttfts, itls = _list(content, "ttfts", size), _list(content, "itls", size)
    inputs, outputs = _list(content, "input_lens", size), _list(content, "output_lens", size)
    errors, ends = _list(content, "errors", size), _list(content, "latencies", size)
    if ttfts is None and ends is None:
        return ()
    # Without the errors list a failed request's latency cannot be told from a good one's, unless none failed.
    known_good = errors is None and whole(content.get("failed")) == 0
    samples = []
    for i in range(size):
        success = (not errors[i]) if errors is not None else (True if known_good else None)
        if success is None:
            return ()  # which latencies are failures' is not in the file
        ttft = number(ttfts[i]) if ttfts is not None and success else None
        gaps = tuple(g for g in (number(x) for x in itls[i]) if g is not None) if itls and success else None
        e2el = number(ends[i]) if ends is not None and success else None
        out = whole(outputs[i]) if outputs is not None else None
        samples.append(
            Sample(
                success=success,
                ttft=ttft,
                e2el=e2el,
                tpot=tpot_of(ttft, e2el, out),
                itl=gaps,
                prompt_tokens=whole(inputs[i]) if inputs is not None else None,
                output_tokens=out,
                error=str(errors[i]) if errors is not None and errors[i] else None,
            )
        )
    return tuple(samples)


def load(content: Any) -> list[Imported]:
    if not detect(content):
        raise NotImportable(_("vllm bench serve의 결과 파일이 아닙니다"))
    run = {key: number(content.get(key)) for key in RUN_KEYS}
    if run["completed"] is None:
        raise NotImportable(_("vllm bench serve의 결과에 완료한 요청 수(completed)가 없습니다"))
    concurrency = content.get("max_concurrency")
    source = {
        "tool": TOOL,
        "version": None,  # vllm bench serve does not write its version
        "model": content.get("model_id"),
        "endpoint": None,  # nor the server's address: only the endpoint type
        "backend": content.get("backend") or content.get("endpoint_type"),
        "date": content.get("date"),
        # null is vllm bench serve's "no limit" (every request sent as its time comes)
        "concurrency": "inf" if "max_concurrency" in content and concurrency is None else concurrency,
        "rate": content.get("request_rate"),
        "burstiness": content.get("burstiness"),
        "num_prompts": content.get("num_prompts"),
        "tokenizer": content.get("tokenizer_id"),
        "label": content.get("label"),
    }
    return [Imported(tool=NAME, source=source, run=run, samples=_samples(content), notes=("first_chunk_ttft",))]


IMPORTER = registry.register(registry.Importer(name=NAME, tool=TOOL, detect=detect, load=load))
