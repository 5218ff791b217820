"""A lab is one declaration: ``Lab``, given as ``JobKind.lab`` by the kind module that serves it.

The declaration holds everything that makes the lab itself: its number (the URL
``/labs/<number>/``, ``BenchJob.lab``, hand-ins and assignments), its chapter section
(``slug``), its title, its run button's settings, the engine panels under its requests,
its auto-checks, key numbers and minimum settings, and what the learner predicts before
a run (``Target``). The lab pages, the catalog, the predictions, the gradebook and the
hand-ins (``labapp.labs``) derive all of it from the registered kinds and keep no table
of labs of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.functional import Promise

from bench.kinds.checks import Check, key_intervals, key_numbers, settings_check, undisturbed
from labapp.said import gettext as _

Text = str | Promise  # a label: usually gettext_lazy, read when shown in the user's language
Results = dict[str, Any]
Shapes = list[tuple[int, int]]  # (input, output tokens) of each request


@dataclass(frozen=True)
class Estimate:
    """The chapter's estimate of a predicted number, with the estimator's arithmetic shown."""

    value: float
    formula: str  # e.g. "800 ÷ 600 + 100 ÷ 25 = 1.33 + 4 = 5.33 s"


@dataclass(frozen=True)
class Target:
    """What a lab asks the learner to predict before a run, and how the run's results answer it.

    ``what(config)`` says it in the reader's words for the lab's typed settings; ``measured(results)``
    is the value the prediction is compared with (None: the run did not measure it);
    ``estimate(config, prefill, decode)`` is the chapter's estimator with the learner's speeds
    (None: the lab has no formula, the learner estimates from the chapter's prose). A prediction
    outside ``low``..``high`` is refused on the run form.
    """

    what: Callable[[Any], str]
    unit: str
    measured: Callable[[Results], float | None]
    estimate: Callable[[Any, float, float], Estimate | None] | None = None
    low: float = 0.0
    high: float = 1e9


@dataclass(frozen=True)
class KeyNumber:
    """One of a lab's key numbers: stored under ``key`` (stable English: hand-ins and CSV columns keep
    it), read at the dotted ``path`` in a run's results, shown as ``label`` in the reader's language."""

    key: str
    path: str
    label: Text


def _nothing_missing(config: Any, results: Results) -> list[str]:
    return []


@dataclass(frozen=True)
class Lab:
    """One lab, declared by the kind that runs it.

    - ``number`` names the lab in URLs and stored rows; ``slug`` is the chapter section holding its
      prose; ``title`` is gettext_lazy; ``config`` the run button's settings (over the kind's defaults).
    - ``checks(results)`` are the lab's own checks. ``missing(config, results)`` names what a run
      lacks of its minimum settings, which ``minimums`` says in words; ``all_checks`` adds the two
      every lab has (the settings meet the minimums; no other traffic ran while a cell was measured).
    - ``keys``: its key numbers (``KeyNumber``: stored key, path into the results, label).
    - ``target``: the number the learner predicts before a run.
    - ``engine_panels``: the engine timeline's panels under its requests (``bench.charts.ENGINE_PANELS``);
      ``notice``: a template shown above the run button (e.g. the base model's notice where the
      answers' words matter); ``request_shapes(config)``: every request's (input, output tokens)
      when the settings fix them (the run's time is then estimated from the learner's speeds), and
      ``shapes_basis`` says where the lengths come from when they are reckoned rather than fixed;
      ``speeds``: its runs measure the learner's prefill and decode speeds (``prefill_speed``,
      ``decode_speed`` in the results), which the estimator and the chat use.
    """

    number: int
    slug: str
    title: Text
    checks: Callable[[Results], list[Check]]
    target: Target
    keys: tuple[KeyNumber, ...] = ()
    missing: Callable[[Any, Results], list[str]] = _nothing_missing
    minimums: Text = ""
    config: dict[str, Any] = field(default_factory=dict, hash=False)
    engine_panels: tuple[str, ...] = ()
    notice: str = ""
    request_shapes: Callable[[Any], Shapes] | None = None
    shapes_basis: Text = ""
    speeds: bool = False

    @property
    def paths(self) -> tuple[tuple[str, str], ...]:
        """(stored key, dotted path into the results) of each key number."""
        return tuple((number.key, number.path) for number in self.keys)

    def key_numbers(self, results: Results) -> dict[str, Any]:
        return key_numbers(results, self.paths)

    def key_intervals(self, results: Results) -> dict[str, list[float]]:
        return key_intervals(results, self.paths)

    def lacking(self, results: Results, config: Any | None) -> list[str]:
        """What the run lacks of the minimums; a config that no longer reads (None) lacks readable settings."""
        if config is None:
            return [_("읽을 수 있는 설정 (저장된 설정을 지금의 규칙으로 읽지 못함)")]
        return self.missing(config, results)

    def all_checks(self, results: Results, config: Any | None) -> list[Check]:
        return [*self.checks(results), settings_check(self.lacking(results, config)), undisturbed(results)]

    def shapes(self, config: Any | None) -> Shapes:
        """(input, output tokens) of every request of a run with ``config``, when the lab's settings fix them."""
        return self.request_shapes(config) if self.request_shapes is not None and config is not None else []


# --- for a target's functions ---------------------------------------------------------------------


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def at(results: Results, *path: str) -> float | None:
    """The finite number at ``path`` in the results (None when missing)."""
    value: Any = results
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return finite(value)


def measured_at(*path: str) -> Callable[[Results], float | None]:
    """A target's ``measured``: the number at ``path`` in the results."""
    return lambda results: at(results, *path)


def shown(value: float) -> str:
    """A number in an estimate's formula: two decimals at most, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
