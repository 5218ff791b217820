"""An imported run as a reader sees it: where it came from, what its file lacks, in the reader's language.

The results keep stable keys (``source`` keys, ``missing`` as ``source:…``, ``request:…``,
``run:…``, ``notes``); the words are made here, when a page is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy

from labapp import addresses

SOURCE_LABELS = {
    "tool": gettext_lazy("도구"),
    "version": gettext_lazy("도구 버전"),
    "model": gettext_lazy("모델"),
    "endpoint": gettext_lazy("엔진 주소"),
    "backend": gettext_lazy("백엔드 (API)"),
    "date": gettext_lazy("잰 때 (파일에 적힌 대로)"),
    "concurrency": gettext_lazy("동시성"),
    "rate": gettext_lazy("요청률 (req/s)"),
    "max_concurrency": gettext_lazy("동시 요청 상한"),
    "burstiness": gettext_lazy("버스트 정도"),
    "num_prompts": gettext_lazy("요청 수 (설정)"),
    "tokenizer": gettext_lazy("토크나이저"),
    "label": gettext_lazy("라벨"),
    "profile": gettext_lazy("부하 방식"),
    "strategy": gettext_lazy("부하 전략 (도구가 부르는 이름)"),
    "sample_size": gettext_lazy("요청 표본 크기"),
}
REQUEST_LABELS = {
    "all": gettext_lazy("요청별 값 전부 (실행 전체의 집계만 있음)"),
    "success": gettext_lazy("요청별 성공 여부"),
    "ttft": gettext_lazy("요청별 TTFT"),
    "tpot": gettext_lazy("요청별 TPOT"),
    "itl": gettext_lazy("요청별 토큰 사이 간격 (ITL)"),
    "e2el": gettext_lazy("요청별 전체 지연 (E2EL)"),
    "prompt_tokens": gettext_lazy("요청별 프롬프트 토큰"),
    "output_tokens": gettext_lazy("요청별 출력 토큰"),
}
NOTES = {
    "first_chunk_ttft": gettext_lazy(
        "이 도구의 TTFT는 choices가 있는 첫 청크까지의 시간입니다(이 실습실의 first_chunk). 청크마다 글자가 "
        "있으면 이 실습실의 TTFT와 같습니다."
    ),
    "e2el_last_token": gettext_lazy(
        "요청별 전체 지연은 파일의 시각으로 보낸 때부터 마지막 토큰까지 쟀습니다(이 실습실의 정의). 도구가 보고한 "
        "실행 전체의 지연은 응답이 끝난 때까지라 조금 더 깁니다."
    ),
    "guidellm_tpot": gettext_lazy(
        "GuideLLM의 time_per_output_token은 TTFT를 포함한 지연을 출력 토큰 수로 나눈 값이라 이 실습실의 TPOT이 "
        "아닙니다. TPOT은 요청마다 (전체 지연 − TTFT) / (출력 토큰 − 1)로 계산했습니다."
    ),
    "usage_tokens": gettext_lazy(
        "토큰 수는 서버의 usage(usage_prompt_tokens, usage_completion_tokens)를 썼고, 그것이 없을 때만 도구가 제 "
        "토크나이저로 센 수를 썼습니다. TPOT은 요청마다 (전체 지연 − TTFT) / (출력 토큰 − 1)로 계산했습니다."
    ),
    "itl_own_tokens": gettext_lazy(
        "AIPerf의 inter_token_latency는 도구가 제 토크나이저로 센 출력 토큰으로 나눈 값이라 서버의 토큰 수와 "
        "다를 수 있어 TPOT으로 옮기지 않았습니다. 요청별 값(profile_export.jsonl)을 가져오면 TPOT을 계산합니다."
    ),
}


@dataclass(frozen=True)
class Shown:
    source: list[tuple[str, str]]  # (label, value) of what the file states
    missing: list[str]  # what it lacks, in words
    notes: list[str]
    per_request: bool
    run: list[tuple[str, float]]  # the tool's own aggregates, (our key, value)


def value_words(key: str, value: Any) -> str:
    if key == "endpoint":
        return addresses.shown(str(value))
    if key in ("concurrency", "rate") and str(value) == "inf":
        return "∞"
    return str(value)


def missing_words(key: str) -> str:
    where, _colon, name = key.partition(":")
    if where == "source":
        return str(SOURCE_LABELS.get(name, name))
    if where == "request":
        return str(REQUEST_LABELS.get(name, name))
    return name  # a run aggregate's own key, e.g. p99_ttft_ms (docs/metrics.md)


def shown(results: dict[str, Any]) -> Shown:
    found = results.get("imported") or {}
    source = found.get("source") or {}
    rows = [(str(SOURCE_LABELS.get(k, k)), value_words(k, v)) for k, v in source.items() if v not in (None, "")]
    run = [(k, float(v)) for k, v in (found.get("run") or {}).items() if isinstance(v, int | float)]
    return Shown(
        source=rows,
        missing=[missing_words(k) for k in found.get("missing") or []],
        notes=[str(NOTES[k]) for k in found.get("notes") or [] if k in NOTES],
        per_request=bool(found.get("per_request")),
        run=run,
    )
