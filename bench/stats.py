"""Confidence intervals for the medians a job shows: 95 % bootstrap intervals (``scipy.stats.bootstrap``).

A cell's median TTFT of five requests is one draw from what that setting gives on this
machine; its interval says how far another run of the same five would likely land. Two
jobs whose intervals overlap have not shown a difference beyond that noise.

Resampling is seeded, so the same requests always give the same interval. The percentile
method is used: with a handful of requests and repeated values BCa can fail to give one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

CONFIDENCE = 0.95
RESAMPLES = 2000


def _clean(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def median_ci(values: Iterable[float | None], *, scale: float = 1.0, seed: int = 0) -> list[float] | None:
    """The 95 % bootstrap interval [low, high] of the median of ``values`` (times ``scale``); None for fewer
    than two values."""
    clean = [v * scale for v in _clean(values)]
    if len(clean) < 2:
        return None
    if min(clean) == max(clean):
        return [clean[0], clean[0]]
    import numpy as np
    from scipy.stats import bootstrap

    found = bootstrap(
        (np.asarray(clean),),
        np.median,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return [float(found.confidence_interval.low), float(found.confidence_interval.high)]


def ratio_ci(
    numerator: Iterable[float | None], denominator: Iterable[float | None], *, seed: int = 0
) -> list[float] | None:
    """The 95 % bootstrap interval of median(numerator) / median(denominator), the two groups resampled
    independently (e.g. a cold TTFT over a warm one: the cache's speed-up); None when a group has fewer
    than two values or a resampled median is 0."""
    top, bottom = _clean(numerator), _clean(denominator)
    if len(top) < 2 or len(bottom) < 2:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    tops = np.median(rng.choice(np.asarray(top), size=(RESAMPLES, len(top))), axis=1)
    bottoms = np.median(rng.choice(np.asarray(bottom), size=(RESAMPLES, len(bottom))), axis=1)
    if np.any(bottoms == 0):
        return None
    ratios = tops / bottoms
    tail = 100 * (1 - CONFIDENCE) / 2
    return [float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))]


def overlaps(a: list[float] | None, b: list[float] | None) -> bool | None:
    """Whether two intervals share any value (a difference inside the noise); None when one is missing."""
    if not a or not b:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def error_bars(medians: list[Any], intervals: list[Any]) -> dict[str, Any] | None:
    """Plotly's ``error_y`` for points at ``medians`` with these [low, high] intervals; None when none has one."""
    if not any(intervals):
        return None
    above = [None if not ci or m is None else max(0.0, ci[1] - m) for m, ci in zip(medians, intervals, strict=True)]
    below = [None if not ci or m is None else max(0.0, m - ci[0]) for m, ci in zip(medians, intervals, strict=True)]
    return {"type": "data", "symmetric": False, "array": above, "arrayminus": below}
