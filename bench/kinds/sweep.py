"""Lab 2, length sweeps: the input length with the output fixed, then the output length with the input fixed.

Two lines are fitted: TTFT against input tokens (slope = 1 / prefill speed) and
decode time against output tokens - 1 (slope = TPOT).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy

from bench.kinds import registry, speed
from bench.kinds.cells import farthest_point, line_fit, step_ms, trend
from bench.kinds.checks import Check, all_ok, done_cells, noise_advice
from bench.kinds.labs import Estimate, KeyNumber, Lab, Target, measured_at, shown
from bench.kinds.registry import Field
from bench.kinds.session import Shape, measure_shapes
from bench.reporting import Reporter
from labapp.said import gettext as _


@dataclass(frozen=True)
class SweepConfig:
    repeats: int = 2  # each point the median of two requests
    input_lengths: tuple[int, ...] = (100, 400, 800, 1200, 1600)
    fixed_output: int = 64  # TPOT over 63 gaps: one slow step moves it little
    output_lengths: tuple[int, ...] = (16, 64, 128, 192, 256)
    fixed_input: int = 100
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.repeats * (len(self.input_lengths) + len(self.output_lengths))

    def longest_requests(self) -> list[tuple[str, int]]:
        return [
            ("input_lengths", max(self.input_lengths) + self.fixed_output),
            ("output_lengths", self.fixed_input + max(self.output_lengths)),
        ]


FIELDS = (
    Field("repeats", gettext_lazy("반복 횟수"), "integer", low=1, high=20),
    Field("input_lengths", gettext_lazy("입력 길이들 (토큰, 쉼표로)"), "integers", low=1, high=1 << 20),
    Field("fixed_output", gettext_lazy("입력 스윕의 출력 길이 (토큰)"), "integer", low=2, high=1 << 16),
    Field("output_lengths", gettext_lazy("출력 길이들 (토큰, 쉼표로)"), "integers", low=2, high=1 << 16),
    Field("fixed_input", gettext_lazy("출력 스윕의 입력 길이 (토큰)"), "integer", low=1, high=1 << 20),
)


def fits(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """TTFT against input length (slope = 1/prefill speed) and decode time against output length (slope = TPOT)."""
    inputs = [c for c in cells if c.get("sweep") == "input" and c["completed"]]
    outputs = [c for c in cells if c.get("sweep") == "output" and c["completed"]]
    ttft = line_fit([c["input_tokens"] for c in inputs], [c["median_ttft_ms"] for c in inputs])
    decode = line_fit([c["output_tokens"] - 1 for c in outputs], [c["median_decode_ms"] or 0 for c in outputs])
    return {
        "ttft_vs_input": ttft,
        "decode_vs_output": decode,
        "prefill_speed": 1000 / ttft["slope"] if ttft and ttft["slope"] > 0 else None,
        "tpot_ms": decode["slope"] if decode else None,
        # Short contexts: decode per token hardly changes with the input length.
        # (the median gap between tokens where stored: one stall on a busy CPU does not move it)
        "tpot_by_input": {str(c["input_tokens"]): step_ms(c) for c in inputs},
    }


def results(cells: list[dict[str, Any]], cancelled: bool = False) -> dict[str, Any]:
    return speed.speeds(cells) | {"cancelled": cancelled, "fits": fits(cells)}


async def measure(config: SweepConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    shapes = [Shape(i, config.fixed_output, (("sweep", "input"),)) for i in config.input_lengths]
    shapes += [Shape(config.fixed_input, o, (("sweep", "output"),)) for o in config.output_lengths]
    cells, cancelled = await measure_shapes(
        shapes,
        repeats=config.repeats,
        seed=config.seed,
        base_url=base_url,
        model=model,
        reporter=reporter,
        results=results,
    )
    return results(cells, cancelled), cancelled


def report_lines(r: dict[str, Any]) -> list[str]:
    lines = speed.report_lines(r)
    found = r.get("fits") or {}
    if found.get("ttft_vs_input") and found.get("decode_vs_output"):
        ttft, decode = found["ttft_vs_input"], found["decode_vs_output"]
        lines.append(
            f"TTFT = {ttft['slope']:.3f} ms/token x input + {ttft['intercept']:.1f} ms (r² {ttft['r2']:.3f}); "
            f"decode = {decode['slope']:.1f} ms/token x (output-1) + {decode['intercept']:.1f} ms "
            f"(r² {decode['r2']:.3f})"
        )
    return lines


MIN_POINTS = 5  # a line through fewer points fits them too well to say anything (two points: r² = 1)
MINIMUMS = gettext_lazy("입력 길이 5개 이상과 출력 길이 5개 이상 (스윕마다 점 5개 이상)")


def missing(config: SweepConfig, results: dict[str, Any]) -> list[str]:
    """Lab 2 fits lines: each sweep needs at least ``MIN_POINTS`` lengths."""
    lacking = []
    for what, values in ((_("입력 길이"), config.input_lengths), (_("출력 길이"), config.output_lengths)):
        if len(set(values)) < MIN_POINTS:
            lacking.append(
                _("%(what)s %(least)d개 이상 (지금 %(n)d개)")
                % {"what": what, "least": MIN_POINTS, "n": len(set(values))}
            )
    return lacking


def _too_few(points: int) -> str:
    return _("점이 %(n)d개뿐: 점 %(least)d개 이상에서만 판정") % {"n": points, "least": MIN_POINTS}


def _fit_check(
    name: str, fit: dict[str, Any], points: list[tuple[float, float]], unit: str, r: dict[str, Any]
) -> Check:
    """r² ≥ 0.95 with a rising line, counted only over at least ``MIN_POINTS`` points; a failure names the
    point farthest from the line (``unit`` says what its x is)."""
    if len(points) < MIN_POINTS:
        return Check(
            name, False, _too_few(len(points)), _("길이를 %(n)d개 이상 넣고 다시 실행하세요.") % {"n": MIN_POINTS}
        )
    passed = (fit.get("r2") or 0) >= 0.95 and (fit.get("slope") or 0) > 0
    message = _("r² %(r2).3f, 점 %(n)d개") % {"r2": fit.get("r2") or 0, "n": len(points)}
    if passed:
        return Check(name, True, message)
    xs, ys = [float(x) for x, _y in points], [float(y) for _x, y in points]
    worst = farthest_point(xs, ys, fit if fit else None)
    if worst is not None:
        message += _("; 직선에서 가장 먼 점: %(x).0f %(unit)s에서 %(y).0f ms") % {
            "x": xs[worst],
            "unit": unit,
            "y": ys[worst],
        }
    # Each point is a median of ``repeats`` requests: more repeats and one slow request no longer moves it.
    return Check(name, False, message, noise_advice(r) + " " + _("반복 횟수를 3으로 늘리면 점마다 중앙값을 씁니다."))


def _points(r: dict[str, Any], sweep: str, x_key: str, y_key: str) -> list[tuple[float, float]]:
    """The (length, median) points of the sweep its line is fitted to, one per distinct length."""
    found = {c.get(x_key): c.get(y_key) or 0 for c in done_cells(r) if c.get("sweep") == sweep}
    return sorted((x, y) for x, y in found.items() if x is not None)


FLAT_MOST = 1.3  # TPOT at 1600 tokens of context reads ~5 % more than at 100 (the KV cache next to the weights)


def _flat_check(found: dict[str, Any], r: dict[str, Any]) -> Check:
    """TPOT against the input length of the input sweep: the fitted line may grow at most ``FLAT_MOST`` times
    from the shortest to the longest input; the message names the slowest and the fastest length."""
    name = _("짧은 문맥에서 TPOT는 입력 길이에 거의 무관 (가장 긴 입력에서 1.3배 이하)")
    tpots = {int(k): v for k, v in (found.get("tpot_by_input") or {}).items() if v}
    if len(tpots) < MIN_POINTS:
        advice = _("입력 길이를 %(n)d개 이상 넣고 다시 실행하세요.") % {"n": MIN_POINTS}
        return Check(name, False, _too_few(len(tpots)), advice)
    ends = trend([float(x) for x in tpots], list(tpots.values()))
    growth = ends[1] / ends[0] if ends and ends[0] > 0 else float("inf")
    high, low = max(tpots, key=tpots.__getitem__), min(tpots, key=tpots.__getitem__)
    message = _(
        "직선으로 %(a).1f → %(b).1f ms (%(x).2f배); 입력 %(hi)d 토큰에서 %(h).1f ms, 입력 %(lo)d 토큰에서 %(l).1f ms"
    ) % {
        "a": ends[0] if ends else 0.0,
        "b": ends[1] if ends else 0.0,
        "x": growth,
        "hi": high,
        "h": tpots[high],
        "lo": low,
        "l": tpots[low],
    }
    passed = growth <= FLAT_MOST
    advice = (
        ""
        if passed
        else noise_advice(r)
        + " "
        + _("입력 스윕의 출력 길이가 짧으면 TPOT가 몇 토큰으로만 재져 흔들립니다 (64 이상 권장).")
    )
    return Check(name, passed, message, advice)


def checks(r: dict[str, Any]) -> list[Check]:
    found = r.get("fits") or {}
    ttft, decode = found.get("ttft_vs_input") or {}, found.get("decode_vs_output") or {}
    inputs = _points(r, "input", "input_tokens", "median_ttft_ms")
    outputs = [(x - 1, y) for x, y in _points(r, "output", "output_tokens", "median_decode_ms")]
    return [
        all_ok(r),
        _fit_check(_("입력 길이에 대한 TTFT 직선 r² ≥ 0.95"), ttft, inputs, _("입력 토큰"), r),
        _fit_check(_("출력 길이에 대한 디코드 시간 직선 r² ≥ 0.95"), decode, outputs, _("출력 토큰 - 1"), r),
        _flat_check(found, r),
    ]


# --- Lab 2's prediction: TPOT ----------------------------------------------------------------------


def tpot_what(config: SweepConfig) -> str:
    return _("출력 토큰 하나에 드는 시간 TPOT")


def tpot_estimate(config: SweepConfig, prefill: float, decode: float) -> Estimate:
    tpot = round(1000 / decode, 1)
    return Estimate(tpot, f"1000 ms ÷ {shown(decode)} tok/s = {shown(tpot)} ms")


def request_shapes(config: SweepConfig) -> list[tuple[int, int]]:
    """Every request of a run: the input sweep, then the output sweep, ``repeats`` times."""
    inputs = [(i, config.fixed_output) for i in config.input_lengths]
    outputs = [(config.fixed_input, o) for o in config.output_lengths]
    return [(int(i), int(o)) for i, o in inputs + outputs] * int(config.repeats)


LAB = Lab(
    number=2,
    slug="lab2-length-sweep",
    title=gettext_lazy("실습 2 — 길이 스윕"),
    checks=checks,
    keys=(
        dataclasses.replace(speed.PREFILL, path="fits.prefill_speed"),
        KeyNumber("TPOT ms", "fits.tpot_ms", gettext_lazy("TPOT (ms)")),
        KeyNumber("TTFT r²", "fits.ttft_vs_input.r2", gettext_lazy("TTFT 직선 r²")),
    ),
    missing=missing,
    minimums=MINIMUMS,
    target=Target(tpot_what, "ms", measured_at("fits", "tpot_ms"), tpot_estimate),
    request_shapes=request_shapes,
)


KIND = registry.register(
    registry.JobKind(
        name="sweep",
        label=gettext_lazy("길이 스윕 (실습 2)"),
        config_type=SweepConfig,
        fields=FIELDS,
        measure=measure,
        chart=speed.lengths_chart,
        summary_template="bench/kinds/lengths.html",
        cell_name=speed.cell_name,
        cell_label=speed.cell_label,
        cell_line=speed.cell_line,
        report_lines=report_lines,
        lab=LAB,
    )
)
