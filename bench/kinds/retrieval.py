"""Lab 4, retrieval size: top-k × chunk size → retrieved tokens → prompt tokens → TTFT.

Every request starts with its own first line, so none profits from another's cached
prefix. The shapes are measured in rounds, one question in every shape per round
(:func:`rounds`). The retrieved tokens of a prompt are its prompt tokens minus those of the
same prompt without material.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy

from bench import configs, palette, plotting, runner
from bench.kinds import rag_work, registry, speed
from bench.kinds.cells import (
    cell_summary,
    farthest_point,
    line_fit,
    median,
    number,
    share,
    step_ms,
    trend,
    watched_cell,
)
from bench.kinds.checks import Check, all_ok, done_cells, noise_advice
from bench.kinds.labs import Estimate, KeyNumber, Lab, Target, finite, shown
from bench.kinds.registry import Field, Runs
from bench.kinds.session import CLIENT_TIMEOUT_S, Session, keeps_partial, warm_up
from bench.reporting import Reporter
from bench.workloads import RagPrompt, nonce_line
from labapp import said
from labapp.said import gettext as _
from rag.chunking import CHUNK_SIZES
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord


@dataclass(frozen=True)
class RetrievalConfig:
    questions: int = 3  # each cell the median of three questions: one slow request does not bend a line
    top_ks: tuple[int, ...] = (1, 3, 5)
    chunk_sizes: tuple[int, ...] = CHUNK_SIZES
    max_tokens: int = 24
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.questions * len(self.top_ks) * len(self.chunk_sizes)

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("top_ks", rag_work.rag_longest(max(self.top_ks), max(self.chunk_sizes), self.max_tokens))]


FIELDS = (
    Field("questions", gettext_lazy("질문 수"), "integer", low=1, high=20),
    Field("top_ks", gettext_lazy("top-k 값들"), "integers", low=0, high=10),
    Field(
        "chunk_sizes",
        gettext_lazy("청크 크기들 (자)"),
        "integers",
        low=1,
        high=100_000,
        help_text=format_lazy("{}: {}", gettext_lazy("색인된 크기"), ", ".join(map(str, CHUNK_SIZES))),
    ),
    Field("max_tokens", gettext_lazy("최대 출력 토큰"), "integer", low=1, high=4096),
)


def parse(raw: dict[str, Any]) -> RetrievalConfig:
    config = RetrievalConfig(**registry.read_fields(RetrievalConfig, FIELDS, raw))
    for size in config.chunk_sizes:
        if size not in CHUNK_SIZES:
            raise configs.ConfigError(
                "chunk_sizes", _("색인된 청크 크기는 200, 500, 1000자입니다 (받은 값 %(size)d)") % {"size": size}
            )
    return config


def label(size: int, top_k: int) -> str:
    return _("청크 %(size)d / top-k %(top_k)d") % {"size": size, "top_k": top_k}


@dataclass
class Asked:
    """What one chunk size × top-k has measured so far, question by question."""

    records: list[RequestRecord] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    context_tokens: list[float] = field(default_factory=list)
    servers: list[dict[str, Any]] = field(default_factory=list)


async def ask(
    session: Session, config: RetrievalConfig, prompt: RagPrompt, bare: RagPrompt, at: tuple[int, int], index: int
) -> tuple[RequestRecord, dict[str, Any], float | None]:
    """Question ``index`` at one chunk size × top-k: (its record, /metrics around it, retrieved tokens
    counted against the same prompt without material)."""
    size, top_k = at
    nonce = nonce_line(config.seed, size, top_k, index)
    spec = runner.RequestSpec(
        prompt=nonce + prompt.text, max_tokens=config.max_tokens, ignore_eos=False, stop=prompt.stop
    )
    record, server = await session.send(spec, label(size, top_k))
    context = None
    if record.prompt_tokens is not None:
        (zero,) = await vllm_client.count_tokens([nonce + bare.text], model=session.model, client=session.http)
        context = float(max(0, record.prompt_tokens - zero))
    return record, server, context


def cell_of(at: tuple[int, int], prompts: list[RagPrompt], asked: Asked) -> dict[str, Any]:
    """One chunk size × top-k as a cell, over the questions it has asked so far."""
    size, top_k = at
    cell = cell_summary(
        asked.records,
        chunk_size=size,
        top_k=top_k,
        answers=asked.answers,
        median_retrieval_ms=median([p.retrieval_ms for p in prompts]),
        median_context_tokens=median(asked.context_tokens),
        median_context_chars=median([float(p.context_chars) for p in prompts]),
        evidence_retrieved=share([p.evidence_retrieved for p in prompts]),
        answer_coverage=median([a["coverage"] for a in asked.answers]),
    )
    return watched_cell(cell, server_metrics.merged(asked.servers))


def rounds(shapes: list[tuple[int, int]], questions: int) -> list[tuple[int, tuple[int, int]]]:
    """(question, shape) in the order they are asked: round by round, one question in every shape,
    the order reversed every other round, so that a slow spell of the machine falls on every shape
    a little instead of on the last shapes entirely (once it made TPOT "grow" 1.6x with context)."""
    order = []
    for index in range(questions):
        order += [(index, at) for at in (shapes if index % 2 == 0 else shapes[::-1])]
    return order


def fits(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """TTFT against context tokens, one line per chunk size (slope ≈ 1 / prefill speed)."""
    out: dict[str, Any] = {}
    for size in sorted({c["chunk_size"] for c in cells}):
        points = [
            c for c in cells if c["chunk_size"] == size and c["completed"] and c["median_context_tokens"] is not None
        ]
        out[str(size)] = line_fit([c["median_context_tokens"] for c in points], [c["median_ttft_ms"] for c in points])
    return out


async def _sweep(
    http: httpx.AsyncClient, config: RetrievalConfig, cells: list[dict[str, Any]], *, base_url: str, model: str,
    reporter: Reporter,
) -> bool:  # fmt: skip
    """Every chunk size × top-k into ``cells``, in :func:`rounds`; True when cancelled."""
    session = Session(http, base_url=base_url, model=model, total=config.total_requests, reporter=reporter)
    questions = await rag_work.questions(config.questions, seed=config.seed)
    await warm_up(base_url=base_url, model=model, seed=config.seed)
    bare = await rag_work.prompts(questions, top_k=0, chunk_size=CHUNK_SIZES[0])  # the same prompts without material
    # One retrieval first, not measured: loading the embedding model is not retrieval time.
    await rag_work.prompts(questions[:1], top_k=1, chunk_size=config.chunk_sizes[0])
    shapes = [(size, top_k) for size in config.chunk_sizes for top_k in config.top_ks]
    prompts = {at: await rag_work.prompts(questions, top_k=at[1], chunk_size=at[0]) for at in shapes}
    asked = {at: Asked() for at in shapes}
    made: dict[tuple[int, int], dict[str, Any]] = {}
    for index, at in rounds(shapes, len(questions)):
        if not await session.start_cell(label(*at)):
            return True
        record, server, context = await ask(session, config, prompts[at][index], bare[index], at, index)
        got = asked[at]
        got.records.append(record)
        got.servers.append(server)
        got.answers.append(rag_work.answer(prompts[at][index], record))
        if context is not None:
            got.context_tokens.append(context)
        made[at] = cell_of(at, prompts[at], got)  # the chart gains a point, then the points settle round by round
        cells[:] = [made[a] for a in shapes if a in made]
        await reporter.partial({"cells": cells, "partial": True})
        if session.cancelled:
            return True
    return False


async def measure(
    config: RetrievalConfig, *, base_url: str, model: str, reporter: Reporter
) -> tuple[dict[str, Any], bool]:
    cells: list[dict[str, Any]] = []
    with keeps_partial(lambda: {"cells": cells, "cancelled": False, "fits": fits(cells)}):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            cancelled = await _sweep(http, config, cells, base_url=base_url, model=model, reporter=reporter)
    if cancelled:
        return {"cells": cells, "cancelled": True}, True
    return {"cells": cells, "cancelled": False, "fits": fits(cells)}, False


# --- the chart, the command, the lab ------------------------------------------------------


def chart(runs: Runs) -> dict[str, Any]:
    """TTFT against retrieved context tokens, one line per chunk size; TPOT stays flat."""
    import plotly.graph_objects as go

    fig = plotting.figure((_("문맥 토큰 대비 TTFT"), _("문맥 토큰 대비 TPOT")))
    for index, (run, results) in enumerate(runs):
        shown = plotting.cells(results)
        symbol = palette.RUN_SYMBOLS[index % len(palette.RUN_SYMBOLS)]  # jobs drawn together: one marker each
        for size in sorted({c["chunk_size"] for c in shown}):
            line = sorted((c for c in shown if c["chunk_size"] == size), key=lambda c: c["top_k"])
            xs = [c["median_context_tokens"] for c in line]
            labels = [f"top-k {c['top_k']}" for c in line]
            for column, key, series in (
                (1, "median_ttft_ms", _("%(size)d자") % {"size": size}),
                (2, "median_tpot_ms", _("TPOT %(size)d자") % {"size": size}),
            ):
                name = plotting.series_name(run, series, runs)
                ys = [c[key] for c in line]
                look = {"line": {"color": palette.chunk_colour(size)}, "marker": {"symbol": symbol}}
                group = {"legendgroup": f"{run} {size}", "showlegend": column == 1}  # one colour, one key per size
                bars = {"error_y": plotting.interval_bars(line, key)}  # each median's 95 % interval
                trace = go.Scatter(x=xs, y=ys, text=labels, mode="lines+markers", name=name, **look, **group, **bars)
                fig.add_trace(trace, 1, column)
    fig.update_xaxes(title_text=_("검색해 넣은 문맥 토큰"))
    fig.update_yaxes(title_text="TTFT (ms)", row=1, col=1)
    fig.update_yaxes(title_text="TPOT (ms)", rangemode="tozero", row=1, col=2)
    return plotting.done(fig)


def cell_label(cell: dict[str, Any]) -> str:
    return label(int(cell.get("chunk_size") or 0), int(cell.get("top_k") or 0))


def cell_name(cell: dict[str, Any]) -> str:
    return f"chunk {cell.get('chunk_size')} / top-k {cell.get('top_k')}"


def cell_line(cell: dict[str, Any]) -> str:
    ms = speed.ms
    context = f"context {ms(cell['median_context_tokens'])} tok, retrieval {ms(cell['median_retrieval_ms'])} ms"
    return f"{speed.latency_line(cell_name(cell), cell)}, {context}"


MIN_VALUES = 2
MINIMUMS = gettext_lazy("top-k 값 2개 이상과 청크 크기 2개 이상")


def missing(config: RetrievalConfig, results: dict[str, Any]) -> list[str]:
    """Lab 4 draws a line per chunk size over top-k: at least two of each."""
    lacking = []
    for what, values in (("top-k", config.top_ks), (_("청크 크기"), config.chunk_sizes)):
        if len(set(values)) < MIN_VALUES:
            lacking.append(
                _("%(what)s %(least)d개 이상 (지금 %(n)d개)")
                % {"what": what, "least": MIN_VALUES, "n": len(set(values))}
            )
    return lacking


def _rising_check(r: dict[str, Any]) -> Check:
    """Each chunk size's line of TTFT against context tokens rises; a falling one names its farthest point."""
    found = {size: fit for size, fit in (r.get("fits") or {}).items() if fit}
    falling = [size for size, fit in found.items() if fit["slope"] <= 0]
    message = (
        said.join(
            ", ",
            (_("%(size)s자: %(slope).2f ms/토큰") % {"size": size, "slope": f["slope"]} for size, f in found.items()),
        )
        or "—"
    )
    passed = bool(found) and not falling
    if passed:
        return Check(_("가져온 토큰이 많을수록 TTFT가 오름"), True, message)
    for size in falling:
        line = [
            c for c in done_cells(r) if str(c.get("chunk_size")) == size and c.get("median_context_tokens") is not None
        ]
        xs, ys = [c["median_context_tokens"] for c in line], [c["median_ttft_ms"] for c in line]
        worst = farthest_point(xs, ys, found[size])
        if worst is not None:
            message += _("; %(size)s자 선에서 가장 벗어난 칸: top-k %(k)d (문맥 %(x).0f 토큰, TTFT %(y).0f ms)") % {
                "size": size,
                "k": line[worst]["top_k"],
                "x": xs[worst],
                "y": ys[worst],
            }
    advice = (
        noise_advice(r) + " " + _("질문 수를 늘리면 칸마다 중앙값을 써서 한 번 느린 요청이 선을 뒤집지 못합니다.")
        if found
        else _("청크 크기마다 top-k 값이 2개 이상 측정되어야 선을 그을 수 있습니다.")
    )
    return Check(_("가져온 토큰이 많을수록 TTFT가 오름"), False, message, advice)


TIMED_TOKENS = 8  # a cell's TPOT counts when its answers ran this many tokens (7 gaps or more)
FLAT_MOST = 1.5  # decode re-reads the weights (~1 GB) each token; 1000 more context tokens add ~36 MB of KV cache


def _flat_check(r: dict[str, Any]) -> Check:
    """TPOT against context tokens over the cells long enough to time: the line fitted through them may
    grow at most ``FLAT_MOST`` times from the least to the most context; the message names the extreme cells."""
    name = _("TPOT는 문맥 길이와 거의 무관 (가장 긴 문맥에서 1.5배 이하)")
    timed = [
        c
        for c in done_cells(r)
        if step_ms(c)
        and c.get("median_context_tokens") is not None
        and (c.get("median_output_tokens") or 0) >= TIMED_TOKENS
    ]
    ends = trend([c["median_context_tokens"] for c in timed], [step_ms(c) or 0.0 for c in timed])
    if ends is None:
        message = _("출력이 %(n)d토큰 이상인 칸이 %(m)d개뿐: 비교할 수 없음") % {"n": TIMED_TOKENS, "m": len(timed)}
        return Check(name, False, message, _("최대 출력 토큰을 늘려 다시 실행하세요 (24 이상 권장)."))
    growth = ends[1] / ends[0] if ends[0] > 0 else float("inf")
    high = max(timed, key=lambda c: step_ms(c) or 0.0)
    low = min(timed, key=lambda c: step_ms(c) or 0.0)
    message = _(
        "직선으로 %(a).1f → %(b).1f ms (%(x).2f배); 가장 느린 칸: %(hi)s, %(h).1f ms; 가장 빠른 칸: %(lo)s, %(l).1f ms"
    ) % {
        "a": ends[0],
        "b": ends[1],
        "x": growth,
        "hi": label(high["chunk_size"], high["top_k"]),
        "h": step_ms(high) or 0.0,
        "lo": label(low["chunk_size"], low["top_k"]),
        "l": step_ms(low) or 0.0,
    }
    short = len(done_cells(r)) - len(timed)
    if short:
        message += _("; 출력이 %(n)d토큰보다 짧은 %(m)d칸은 빼고 비교") % {"n": TIMED_TOKENS, "m": short}
    passed = growth <= FLAT_MOST
    return Check(name, passed, message, "" if passed else noise_advice(r))


def checks(r: dict[str, Any]) -> list[Check]:
    return [all_ok(r), _rising_check(r), _flat_check(r)]


TtftPoints = dict[str, list[tuple[float, float]]]


def class_points(latest: list[tuple[str, str, dict[str, Any]]]) -> TtftPoints:
    """username → [(context tokens, TTFT ms)] over the cells of each learner's latest run."""
    out: TtftPoints = {}
    for username, _engine_url, results in latest:
        points = []
        for cell in results.get("cells", []):
            x, y = number(cell.get("median_context_tokens")), number(cell.get("median_ttft_ms"))
            if cell.get("completed") and x is not None and y is not None:
                points.append((x, y))
        if points:
            out[username] = sorted(points)
    return out


def class_figure(points: TtftPoints) -> dict[str, Any] | None:
    import plotly.graph_objects as go

    if not points:
        return None
    fig = go.Figure()
    for username, pairs in sorted(points.items()):
        fig.add_trace(
            go.Scatter(
                x=[x for x, _y in pairs],
                y=[y for _x, y in pairs],
                mode="markers",
                name=username,
                hovertemplate=username + _(": %{x:.0f} 토큰 → %{y:.0f} ms") + "<extra></extra>",
            )
        )
    fig.update_xaxes(title_text=_("검색해 넣은 문맥 토큰"))
    fig.update_yaxes(title_text="TTFT (ms)", rangemode="tozero")
    fig.update_layout(title_text=_("문맥 토큰에 따른 TTFT (학습자별)"))
    return plotting.done(fig, plotting.CLASS_LAYOUT)


# --- Lab 4's prediction: TTFT at the largest top-k ------------------------------------------------


def _largest(config: RetrievalConfig) -> tuple[int, int]:
    return max(config.top_ks), max(config.chunk_sizes)


def largest_what(config: RetrievalConfig) -> str:
    top_k, size = _largest(config)
    return _("가장 큰 top-k %(k)d, 청크 %(size)d자에서의 TTFT") % {"k": top_k, "size": size}


def largest_measured(results: dict[str, Any]) -> float | None:
    cells = [c for c in results.get("cells", []) if isinstance(c, dict) and c.get("completed")]
    if not cells:
        return None
    top = max(cells, key=lambda c: (finite(c.get("top_k")) or 0, finite(c.get("chunk_size")) or 0))
    return finite(top.get("median_ttft_ms"))


def largest_estimate(config: RetrievalConfig, prefill: float, decode: float) -> Estimate:
    top_k, size = _largest(config)
    ms = round(1000 * rag_work.context_tokens(top_k, size) / prefill)
    formula = f"({top_k} × {size} + {rag_work.TEMPLATE_TOKENS}) ÷ {shown(prefill)} tok/s ≈ {ms} ms"
    return Estimate(ms, formula)


def request_shapes(config: RetrievalConfig) -> list[tuple[int, int]]:
    """Every request of a run as the run-time estimate counts it: each question at each top-k × chunk size,
    its prompt reckoned from the settings, its answer at ``max_tokens`` (the most it may take)."""
    cells = [(k, size) for k in config.top_ks for size in config.chunk_sizes]
    one = [(rag_work.expected_prompt_tokens(k, size), config.max_tokens) for k, size in cells]
    return one * config.questions


LAB = Lab(
    number=4,
    slug="lab4-rag-retrieval",
    title=gettext_lazy("실습 4 — 검색 크기와 지연"),
    checks=checks,
    keys=(
        KeyNumber("ms/token (500)", "fits.500.slope", gettext_lazy("토큰당 TTFT 증가 ms (500자 청크)")),
        KeyNumber("ms/token (1000)", "fits.1000.slope", gettext_lazy("토큰당 TTFT 증가 ms (1000자 청크)")),
    ),
    missing=missing,
    minimums=MINIMUMS,
    target=Target(largest_what, "ms", largest_measured, largest_estimate),
    request_shapes=request_shapes,
    shapes_basis=rag_work.RECKONED,
)


KIND = registry.register(
    registry.JobKind(
        name="retrieval",
        label=gettext_lazy("검색 크기 스윕 (실습 4)"),
        config_type=RetrievalConfig,
        fields=FIELDS,
        measure=measure,
        parse=parse,
        chart=chart,
        summary_template="bench/kinds/retrieval.html",
        cell_name=cell_name,
        cell_label=cell_label,
        cell_line=cell_line,
        lab=LAB,
        class_chart=registry.ClassChart("ttft_vs_context", "class-ttft", class_points, class_figure),
    )
)
