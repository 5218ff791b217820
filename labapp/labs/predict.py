"""Predict, then measure: each lab's key number to predict before a run, the chapter's estimate of it,
and the prediction's error against what the run measured.

What a lab asks to predict, how it is estimated and how a run's results answer it are the lab's
``Target``, declared with the lab by the kind that serves it (``bench.kinds.labs``). Here are the
functions every lab shares: of a lab's typed settings, the learner's speeds and a job's results and
``prediction`` (``BenchJob.prediction``: {value, unit, what, made_at, and the estimator's value and formula
when the learner had speeds: estimate, formula}, set by the lab's run form). The learner's value and the
estimator's are kept apart, so the page shows each under its own name, during the run and after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from bench.kinds import registry
from bench.kinds.labs import Estimate, Target, finite

__all__ = ["Comparison", "Estimate", "Target", "compare", "estimate", "prediction_for", "target"]


def target(number: int) -> Target:
    """What lab ``number`` asks the learner to predict (KeyError: no such lab)."""
    kind = registry.for_lab(number)
    if kind is None or kind.lab is None:
        raise KeyError(number)
    return kind.lab.target


def estimate(number: int, config: Any, prefill: float | None, decode: float | None) -> Estimate | None:
    """The chapter's estimate of the lab's predicted number with these speeds (None: no speeds or no formula)."""
    found = target(number)
    if found.estimate is None or config is None or not prefill or not decode or prefill <= 0 or decode <= 0:
        return None
    return found.estimate(config, prefill, decode)


def prediction_for(number: int, config: Any, value: float, estimated: Estimate | None = None) -> dict[str, Any]:
    """What ``BenchJob.prediction`` keeps of a learner's predicted value, and apart from it the estimator's
    value the run card showed beside it (None: the learner had no speeds, or the lab has no formula)."""
    found = target(number)
    what = found.what(config) if config is not None else ""
    kept = {"value": value, "unit": found.unit, "what": what, "made_at": timezone.now().isoformat()}
    if estimated is not None:
        kept |= {"estimate": estimated.value, "formula": estimated.formula}
    return kept


@dataclass(frozen=True)
class Comparison:
    """A prediction beside what the run measured."""

    what: str
    unit: str
    predicted: float  # the learner's
    measured: float | None
    estimate: float | None = None  # the chapter's estimator's, as the run card showed it at the run
    formula: str = ""

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
    return target(number).measured(job.results or {})


def compare(job: Any, *, stored: dict[str, Any] | None = None) -> Comparison | None:
    """The job's prediction against its own results, or against its current stored outcomes (``stored``,
    ``labapp.labs.outcomes``); None: no prediction with the run, or no lab."""
    prediction = getattr(job, "prediction", None)
    number = getattr(job, "lab", None)
    kind = registry.for_lab(number) if isinstance(number, int) else None
    if not isinstance(prediction, dict) or kind is None or kind.lab is None:
        return None
    value = finite(prediction.get("value"))
    if value is None:
        return None
    measured = _measured(job, kind.lab.number, stored) if job.status == "done" else None
    config = kind.saved_config(job.config or {})
    found = kind.lab.target
    what = found.what(config) if config is not None else str(prediction.get("what") or "")  # reader's words
    unit = str(prediction.get("unit") or found.unit)
    return Comparison(
        what, unit, value, measured, finite(prediction.get("estimate")), str(prediction.get("formula") or "")
    )
