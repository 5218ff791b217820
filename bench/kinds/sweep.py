"""Lab 2, length sweeps: the input length with the output fixed, then the output length with the input fixed.

Two lines are fitted: TTFT against input tokens (slope = 1 / prefill speed) and
decode time against output tokens - 1 (slope = TPOT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bench.kinds import registry, speed
from bench.kinds.cells import line_fit
from bench.kinds.checks import Check, all_ok, done_cells
from bench.kinds.registry import Field
from bench.kinds.session import Shape, measure_shapes
from bench.reporting import Reporter


@dataclass(frozen=True)
class SweepConfig:
    repeats: int = 1
    input_lengths: tuple[int, ...] = (100, 400, 800, 1200, 1600)
    fixed_output: int = 16
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
        "tpot_by_input": {str(c["input_tokens"]): c["median_tpot_ms"] for c in inputs},
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


def _points(r: dict[str, Any], sweep: str, key: str) -> int:
    """How many distinct lengths of the sweep were measured (the points its line is fitted to)."""
    return len({c.get(key) for c in done_cells(r) if c.get("sweep") == sweep})


def _too_few(points: int) -> str:
    return _("점이 %(n)d개뿐: 점 %(least)d개 이상에서만 판정") % {"n": points, "least": MIN_POINTS}


def _fit_check(name: str, fit: dict[str, Any], points: int) -> Check:
    """r² ≥ 0.95 with a rising line, counted only over at least ``MIN_POINTS`` points."""
    if points < MIN_POINTS:
        return Check(name, False, _too_few(points))
    passed = (fit.get("r2") or 0) >= 0.95 and (fit.get("slope") or 0) > 0
    return Check(name, passed, _("r² %(r2).3f, 점 %(n)d개") % {"r2": fit.get("r2") or 0, "n": points})


def checks(r: dict[str, Any]) -> list[Check]:
    found = r.get("fits") or {}
    ttft, decode = found.get("ttft_vs_input") or {}, found.get("decode_vs_output") or {}
    tpots = [v for v in (found.get("tpot_by_input") or {}).values() if v]
    spread = max(tpots) / min(tpots) if tpots and min(tpots) > 0 else None
    flat = _("짧은 문맥에서 TPOT는 입력 길이에 거의 무관 (최대/최소 ≤ 1.3)")
    return [
        all_ok(r),
        _fit_check(_("입력 길이에 대한 TTFT 직선 r² ≥ 0.95"), ttft, _points(r, "input", "input_tokens")),
        _fit_check(_("출력 길이에 대한 디코드 시간 직선 r² ≥ 0.95"), decode, _points(r, "output", "output_tokens")),
        Check(flat, False, _too_few(len(tpots)))
        if len(tpots) < MIN_POINTS
        else Check(flat, spread is not None and spread <= 1.3, _("최대/최소 %(s).2f") % {"s": spread or 0}),
    ]


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
        cell_line=speed.cell_line,
        report_lines=report_lines,
        lab=registry.LabChecks(
            2,
            checks,
            (
                ("prefill tok/s", "fits.prefill_speed"),
                ("TPOT ms", "fits.tpot_ms"),
                ("TTFT r²", "fits.ttft_vs_input.r2"),
            ),
            missing=missing,
            minimums=MINIMUMS,
        ),
    )
)
