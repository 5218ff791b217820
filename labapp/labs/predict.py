"""Predict, then measure: each lab's key number to predict before a run, the chapter's estimate of it,
and the prediction's error against what the run measured.

Pure functions of a lab's typed settings, the learner's speeds and a job's results and
``prediction`` (``BenchJob.prediction``: {value, unit, what, made_at}, set by the lab's run form).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from bench.kinds import registry
from rag.estimator import gen_seconds

Results = dict[str, Any]
RAG_TEMPLATE_TOKENS = 200  # the RAG prompt's template and question (bench.kinds.rag_work.rag_longest)


@dataclass(frozen=True)
class Estimate:
    value: float
    formula: str  # the estimator's numbers, e.g. "800 ÷ 600 + 100 ÷ 25 = 1.33 + 4 = 5.33 s"


@dataclass(frozen=True)
class Target:
    """What a lab asks the learner to predict: its words, unit, range, and how to read it from results."""

    what: Callable[[Any], str]  # of the lab's typed settings
    unit: str
    measured: Callable[[Results], float | None]
    estimate: Callable[[Any, float, float], Estimate | None] | None = None  # (settings, prefill, decode speed)
    low: float = 0.0
    high: float = 1e9


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _at(results: Results, *path: str) -> float | None:
    value: Any = results
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return _number(value)


def _n(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


# --- Lab 1: the unseen shape's time ------------------------------------------------------------


def _lab1_what(config: Any) -> str:
    i, o = config.check
    return _("처음 보는 모양 %(i)d/%(o)d(입력/출력 토큰)의 전체 시간") % {"i": i, "o": o}


def _lab1_estimate(config: Any, prefill: float, decode: float) -> Estimate:
    i, o = config.check
    prefill_s, decode_s = gen_seconds(i, o, prefill, decode)
    total = round(prefill_s + decode_s, 2)
    formula = f"{i} ÷ {_n(prefill)} + {o} ÷ {_n(decode)} = {_n(prefill_s)} + {_n(decode_s)} = {_n(total)} s"
    return Estimate(total, formula)


# --- Lab 2: TPOT ----------------------------------------------------------------------------------


def _lab2_estimate(config: Any, prefill: float, decode: float) -> Estimate:
    tpot = round(1000 / decode, 1)
    return Estimate(tpot, f"1000 ms ÷ {_n(decode)} tok/s = {_n(tpot)} ms")


# --- Lab 4: TTFT at the largest top-k -------------------------------------------------------------


def _largest(config: Any) -> tuple[int, int]:
    return max(config.top_ks), max(config.chunk_sizes)


def _lab4_what(config: Any) -> str:
    top_k, size = _largest(config)
    return _("가장 큰 top-k %(k)d, 청크 %(size)d자에서의 TTFT") % {"k": top_k, "size": size}


def _lab4_measured(results: Results) -> float | None:
    cells = [c for c in results.get("cells", []) if isinstance(c, dict) and c.get("completed")]
    if not cells:
        return None
    top = max(cells, key=lambda c: (_number(c.get("top_k")) or 0, _number(c.get("chunk_size")) or 0))
    return _number(top.get("median_ttft_ms"))


def _lab4_estimate(config: Any, prefill: float, decode: float) -> Estimate:
    top_k, size = _largest(config)
    tokens = top_k * size + RAG_TEMPLATE_TOKENS  # Korean text: at most about one token per character
    ms = round(1000 * tokens / prefill)
    return Estimate(ms, f"({top_k} × {size} + {RAG_TEMPLATE_TOKENS}) ÷ {_n(prefill)} tok/s ≈ {ms} ms")


# --- Lab 6: time saved ----------------------------------------------------------------------------


ONE_LINE_TOKENS = 20


def _lab6_estimate(config: Any, prefill: float, decode: float) -> Estimate | None:
    prompt = config.top_k * config.chunk_size + RAG_TEMPLATE_TOKENS
    prefill_s, normal_s = gen_seconds(prompt, config.normal_tokens, prefill, decode)
    # Lab 6's key number is the one-line answer against the normal one; a one-line answer of
    # the default model measured 6-24 tokens (ONE_LINE_TOKENS is the estimate's guess).
    _same, capped_s = gen_seconds(prompt, ONE_LINE_TOKENS, prefill, decode)
    if prefill_s + normal_s <= 0:
        return None
    saved = round(100 * (normal_s - capped_s) / (prefill_s + normal_s), 1)
    formula = (
        f"({config.normal_tokens} − {ONE_LINE_TOKENS}) ÷ {_n(decode)} = {_n(normal_s - capped_s)} s; "
        f"{_n(normal_s - capped_s)} ÷ ({prompt} ÷ {_n(prefill)} + {config.normal_tokens} ÷ {_n(decode)}) "
        f"= {_n(saved)} %"
    )
    return Estimate(saved, formula)


TARGETS: dict[int, Target] = {
    1: Target(_lab1_what, "s", lambda r: _at(r, "check", "measured_s"), _lab1_estimate),
    2: Target(
        lambda c: _("출력 토큰 하나에 드는 시간 TPOT"), "ms", lambda r: _at(r, "fits", "tpot_ms"), _lab2_estimate
    ),
    3: Target(
        lambda c: _("여러 동시 수준 가운데 최대 출력 처리량"), "tok/s", lambda r: _at(r, "peak_output_throughput")
    ),
    4: Target(_lab4_what, "ms", _lab4_measured, _lab4_estimate),
    5: Target(lambda c: _("캐시 적중 시 TTFT가 빨라지는 배수"), "×", lambda r: _at(r, "warm_speedup")),
    6: Target(
        lambda c: _("한 줄 답 지시로 줄어드는 답변 시간"),
        "%",
        lambda r: _at(r, "time_saved_pct"),
        _lab6_estimate,
        low=-100,
        high=100,
    ),
}


def estimate(number: int, config: Any, prefill: float | None, decode: float | None) -> Estimate | None:
    """The chapter's estimate of the lab's predicted number with these speeds (None: no speeds or no formula)."""
    target = TARGETS[number]
    if target.estimate is None or config is None or not prefill or not decode or prefill <= 0 or decode <= 0:
        return None
    return target.estimate(config, prefill, decode)


def prediction_for(number: int, config: Any, value: float) -> dict[str, Any]:
    """What ``BenchJob.prediction`` keeps of a learner's predicted value."""
    target = TARGETS[number]
    what = target.what(config) if config is not None else ""
    return {"value": value, "unit": target.unit, "what": what, "made_at": timezone.now().isoformat()}


@dataclass(frozen=True)
class Comparison:
    """A prediction beside what the run measured."""

    what: str
    unit: str
    predicted: float
    measured: float | None

    @property
    def error(self) -> float | None:
        """Predicted minus measured, in the unit (positive: predicted too high)."""
        return None if self.measured is None else self.predicted - self.measured

    @property
    def error_pct(self) -> float | None:
        """The error as a percentage of the measured value (None when nothing or zero was measured)."""
        if self.measured is None or self.measured == 0:
            return None
        return 100 * (self.predicted - self.measured) / abs(self.measured)


def _measured(job: Any, number: int, stored: dict[str, Any] | None) -> float | None:
    """What the run measured of its prediction's target: from its stored outcomes when given (the gradebook
    reads no results), else from its results."""
    if stored is not None and "measured" in stored:
        found = stored["measured"]
        return None if found is None else float(found)
    return TARGETS[number].measured(job.results or {})


def compare(job: Any, *, stored: dict[str, Any] | None = None) -> Comparison | None:
    """The job's prediction against its own results, or against its current stored outcomes (``stored``,
    ``labapp.labs.outcomes``); None: no prediction with the run, or no lab."""
    prediction = getattr(job, "prediction", None)
    number = getattr(job, "lab", None)
    if not isinstance(prediction, dict) or number not in TARGETS:
        return None
    value = _number(prediction.get("value"))
    if value is None:
        return None
    measured = _measured(job, number, stored) if job.status == "done" else None
    kind = registry.for_lab(number)
    config = kind.saved_config(job.config or {}) if kind is not None else None
    what = TARGETS[number].what(config) if config is not None else str(prediction.get("what") or "")  # reader's words
    return Comparison(what, str(prediction.get("unit") or TARGETS[number].unit), value, measured)
