"""Lab 1, the speed probe: the chapter's estimator table shapes, then an unseen shape to check the estimate.

Prefill speed comes from the cell with the longest input per output token, decode
speed from the one with the longest output per input token; the estimate
(``rag.estimator.gen_seconds``) is then compared with the check shape's measured time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy

from bench import plotting
from bench.kinds import registry
from bench.kinds.cells import number
from bench.kinds.checks import Check, all_ok, noise_advice
from bench.kinds.labs import Estimate, KeyNumber, Lab, Target, measured_at, shown
from bench.kinds.registry import Field, Runs
from bench.kinds.session import Shape, measure_shapes
from bench.reporting import Reporter
from labapp import addresses
from labapp.said import gettext as _
from rag.estimator import gen_seconds

# The chapter's estimator table, then an unseen shape to check the estimate against.
SPEED_SHAPES: tuple[tuple[int, int], ...] = ((100, 50), (1500, 50), (100, 500))
CHECK_SHAPE = (800, 100)


@dataclass(frozen=True)
class SpeedConfig:
    repeats: int = 3  # each cell's median drops one slow request (another program on the CPU)
    shapes: tuple[tuple[int, int], ...] = SPEED_SHAPES
    check: tuple[int, int] = CHECK_SHAPE
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.repeats * (len(self.shapes) + 1)

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("repeats", i + o) for i, o in (*self.shapes, self.check)]


REPEATS = Field("repeats", gettext_lazy("반복 횟수"), "integer", low=1, high=20)


def speeds(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Prefill and decode speed from the cells, and the estimate on the check cell against its measured time."""
    done = [c for c in cells if c["completed"]]
    long_input = max(done, key=lambda c: c["input_tokens"] / c["output_tokens"], default=None)
    long_output = max(done, key=lambda c: c["output_tokens"] / c["input_tokens"], default=None)
    prefill_speed = long_input["prefill_speed"] if long_input else None
    decode_speed = long_output["decode_speed"] if long_output else None
    check = None
    checked = [c for c in done if c.get("check")]
    if checked and prefill_speed and decode_speed:
        cell = checked[0]
        prefill_s, decode_s = gen_seconds(cell["input_tokens"], cell["output_tokens"], prefill_speed, decode_speed)
        measured = (cell["median_e2el_ms"] or 0) / 1000
        check = {
            "input_tokens": cell["input_tokens"],
            "output_tokens": cell["output_tokens"],
            "estimate_s": round(prefill_s + decode_s, 3),
            "measured_s": round(measured, 3),
            "error_pct": round(100 * abs(prefill_s + decode_s - measured) / measured, 1) if measured else None,
        }
    return {"cells": cells, "prefill_speed": prefill_speed, "decode_speed": decode_speed, "check": check}


async def measure(config: SpeedConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    shapes = [Shape(i, o, (("check", False),)) for i, o in config.shapes]
    shapes.append(Shape(*config.check, (("check", True),)))
    cells, cancelled = await measure_shapes(
        shapes,
        repeats=config.repeats,
        seed=config.seed,
        base_url=base_url,
        model=model,
        reporter=reporter,
        results=lambda cells: speeds(cells) | {"cancelled": False},
    )
    return speeds(cells) | {"cancelled": cancelled}, cancelled


# --- the chart (also Lab 2's) -----------------------------------------------------------


def lengths_chart(runs: Runs) -> dict[str, Any]:
    """TTFT against input tokens and decode time against output tokens, with the fit lines where there are."""
    import plotly.graph_objects as go

    fig = plotting.figure((_("입력 토큰 대비 TTFT"), _("출력 토큰 대비 디코드 시간")))
    for run, results in runs:
        shown = plotting.cells(results)
        ttft_cells = [c for c in shown if c.get("sweep") != "output"]
        decode_cells = [c for c in shown if c.get("sweep") != "input"]
        panels = (
            (1, ttft_cells, "input_tokens", "median_ttft_ms", _("TTFT 중앙값 (ms)"), "ttft_vs_input", 0),
            (2, decode_cells, "output_tokens", "median_decode_ms", _("디코드 시간 중앙값 (ms)"), "decode_vs_output", 1),
        )
        for column, points, x_key, y_key, series, fit_key, shift in panels:
            xs = [c[x_key] for c in points]
            name = plotting.series_name(run, series, runs)
            bars = plotting.interval_bars(points, y_key)  # each median's 95 % interval
            dots = go.Scatter(x=xs, y=[c[y_key] for c in points], mode="markers", name=name, error_y=bars)
            fig.add_trace(dots, 1, column)
            fit = (results.get("fits") or {}).get(fit_key)
            if fit and xs:
                # Decode time is fitted against output - 1 (the first token comes with the prefill).
                ends = [min(xs) - shift, max(xs) - shift]
                fit_name = plotting.series_name(run, _("직선 (r² %(r2).3f)") % {"r2": fit["r2"]}, runs)
                ys = [fit["slope"] * x + fit["intercept"] for x in ends]
                line = go.Scatter(x=[x + shift for x in ends], y=ys, mode="lines", name=fit_name)
                fig.add_trace(line, 1, column)
    fig.update_xaxes(title_text=_("입력 토큰"), row=1, col=1)
    fig.update_xaxes(title_text=_("출력 토큰"), row=1, col=2)
    fig.update_yaxes(title_text="ms")
    return plotting.done(fig)


# --- the terminal command ----------------------------------------------------------------


def ms(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def cell_name(cell: dict[str, Any]) -> str:
    return "{}/{}".format(cell.get("input_tokens"), cell.get("output_tokens"))


def cell_label(cell: dict[str, Any]) -> str:
    """A cell's name on a page: "입력 100 / 출력 50"."""
    return _("입력 %(input)s / 출력 %(output)s") % {
        "input": cell.get("input_tokens"),
        "output": cell.get("output_tokens"),
    }


def latency_line(name: str, cell: dict[str, Any]) -> str:
    """A cell's name and median latencies: how every one-at-a-time kind's line in the command starts."""
    ttft, tpot, e2el = ms(cell["median_ttft_ms"], 1), ms(cell["median_tpot_ms"], 1), ms(cell["median_e2el_ms"])
    return f"{name:<24} TTFT {ttft:>8} ms, TPOT {tpot:>6} ms, E2EL {e2el:>6} ms"


def cell_line(cell: dict[str, Any]) -> str:
    speeds = f"prefill {ms(cell.get('prefill_speed'))} tok/s, decode {ms(cell.get('decode_speed'), 1)} tok/s"
    return f"{latency_line(cell_name(cell), cell)}, {speeds}"


def report_lines(results: dict[str, Any]) -> list[str]:
    if not (results.get("prefill_speed") or results.get("decode_speed")):
        return []
    line = f"prefill {ms(results.get('prefill_speed'))} tok/s, decode {ms(results.get('decode_speed'), 1)} tok/s"
    check = results.get("check")
    if check:
        line += (
            f"; estimate on {check['input_tokens']}/{check['output_tokens']}: {check['estimate_s']} s vs "
            f"measured {check['measured_s']} s ({check['error_pct']} % off)"
        )
    return [line]


# --- Lab 1's checks ------------------------------------------------------------------------


ESTIMATE_TOLERANCE_PCT = 15  # the chapter's check: the estimator within 15 % of the measurement


def _estimate_check(r: dict[str, Any]) -> Check:
    check = r.get("check") or {}
    error = check.get("error_pct")
    passed = error is not None and error <= ESTIMATE_TOLERANCE_PCT
    message = _("추정 %(e)s s, 측정 %(m)s s, 오차 %(p)s%%") % {
        "e": check.get("estimate_s"),
        "m": check.get("measured_s"),
        "p": error,
    }
    if passed:
        advice = ""
    elif error is None:
        advice = _("처음 보는 모양이나 속도를 잴 칸이 측정되지 않았습니다. 기본 모양 그대로 다시 실행하세요.")
    else:
        # One slow request moves a single measurement; the median over repeats does not follow it.
        advice = noise_advice(r) + " " + _("반복 횟수를 늘리면 칸마다 중앙값을 써서 덜 흔들립니다.")
    return Check(_("처음 보는 모양에서 추정이 측정의 15% 이내"), passed, message, advice)


def checks(r: dict[str, Any]) -> list[Check]:
    prefill, decode = r.get("prefill_speed") or 0, r.get("decode_speed") or 0
    faster = prefill > decode > 0
    return [
        all_ok(r),
        _estimate_check(r),
        Check(
            _("프리필이 디코드보다 토큰당 빠름"),
            faster,
            _("프리필 %(p).0f tok/s, 디코드 %(d).1f tok/s (%(x).1f배)")
            % {"p": prefill, "d": decode, "x": prefill / decode if decode else 0},
            ""
            if faster
            else _("프리필은 토큰을 한 번에 계산하므로 토큰당 훨씬 빨라야 합니다. ")
            + _("입력이 긴 모양(1500/50)과 출력이 긴 모양(100/500)이 기본값인지 확인하고 다시 실행하세요."),
        ),
    ]


MINIMUMS = gettext_lazy("추정표의 세 모양(100/50, 1500/50, 100/500)과 처음 보는 모양 800/100: 기본 모양 그대로")


def _shape(shape: Any) -> tuple[int, int]:
    return int(shape[0]), int(shape[1])


def missing(config: SpeedConfig, results: dict[str, Any]) -> list[str]:
    """Lab 1 measures the estimator table's shapes and checks the estimate on the unseen one."""
    shapes = {_shape(shape) for shape in config.shapes}
    lacking = [_("추정표의 모양 %(i)d/%(o)d") % {"i": i, "o": o} for i, o in SPEED_SHAPES if (i, o) not in shapes]
    if _shape(config.check) != CHECK_SHAPE:
        lacking.append(_("처음 보는 모양 %(i)d/%(o)d") % {"i": CHECK_SHAPE[0], "o": CHECK_SHAPE[1]})
    return lacking


# --- Lab 1's prediction: the unseen shape's time ---------------------------------------------


def unseen_what(config: SpeedConfig) -> str:
    i, o = config.check
    return _("처음 보는 모양 %(i)d/%(o)d(입력/출력 토큰)의 전체 시간") % {"i": i, "o": o}


def unseen_estimate(config: SpeedConfig, prefill: float, decode: float) -> Estimate:
    i, o = config.check
    prefill_s, decode_s = gen_seconds(i, o, prefill, decode)
    total = round(prefill_s + decode_s, 2)
    formula = (
        f"{i} ÷ {shown(prefill)} + {o} ÷ {shown(decode)} = {shown(prefill_s)} + {shown(decode_s)} = {shown(total)} s"
    )
    return Estimate(total, formula)


def request_shapes(config: SpeedConfig) -> list[tuple[int, int]]:
    """Every request of a run: each shape of the table and the unseen one, ``repeats`` times."""
    return [(int(i), int(o)) for i, o in (*config.shapes, config.check)] * int(config.repeats)


PREFILL = KeyNumber("prefill tok/s", "prefill_speed", gettext_lazy("프리필 속도 (tok/s)"))  # Lab 2's as well

LAB = Lab(
    number=1,
    slug="lab1-speed",
    title=gettext_lazy("실습 1 — 프리필·디코드 속도 재기"),
    checks=checks,
    keys=(
        PREFILL,
        KeyNumber("decode tok/s", "decode_speed", gettext_lazy("디코드 속도 (tok/s)")),
        KeyNumber("estimate error %", "check.error_pct", gettext_lazy("추정 오차 (%)")),
    ),
    missing=missing,
    minimums=MINIMUMS,
    target=Target(unseen_what, "s", measured_at("check", "measured_s"), unseen_estimate),
    request_shapes=request_shapes,
    speeds=True,
)


# --- the class chart ----------------------------------------------------------------------------


SpeedPoints = dict[str, list[tuple[str, float | None, float | None]]]


def class_points(latest: list[tuple[str, str, dict[str, Any]]]) -> SpeedPoints:
    """engine address (as shown: no credentials) → [(username, prefill tok/s, decode tok/s)] from each
    learner's latest probe."""
    out: SpeedPoints = {}
    for username, engine_url, results in latest:
        prefill, decode = number(results.get("prefill_speed")), number(results.get("decode_speed"))
        if prefill is None and decode is None:
            continue
        out.setdefault(addresses.shown(engine_url) or "?", []).append((username, prefill, decode))
    return out


def class_figure(points: SpeedPoints) -> dict[str, Any] | None:
    """Each engine's measured speeds as boxes with every learner's point."""
    import plotly.graph_objects as go

    if not points:
        return None
    fig = plotting.figure((_("프리필 속도 (tok/s)"), _("디코드 속도 (tok/s)")))
    for engine, rows in sorted(points.items()):
        for column in (1, 2):
            kept = [(row[0], row[column]) for row in rows if row[column] is not None]
            box = go.Box(
                y=[value for _name, value in kept],
                text=[name for name, _value in kept],
                name=engine,
                legendgroup=engine,
                showlegend=column == 1,
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                hovertemplate="%{text}: %{y:.1f} tok/s<extra></extra>",
            )
            fig.add_trace(box, 1, column)
    fig.update_yaxes(rangemode="tozero")
    return plotting.done(fig, plotting.CLASS_LAYOUT)


KIND = registry.register(
    registry.JobKind(
        name="speed",
        label=gettext_lazy("속도 측정 (실습 1)"),
        config_type=SpeedConfig,
        fields=(REPEATS,),
        measure=measure,
        chart=lengths_chart,
        summary_template="bench/kinds/lengths.html",
        cell_name=cell_name,
        cell_label=cell_label,
        cell_line=cell_line,
        report_lines=report_lines,
        lab=LAB,
        class_chart=registry.ClassChart("speeds", "class-speeds", class_points, class_figure),
    )
)
