"""Lab 6, short answers: the same questions normally, with a one-line answer format, and at several caps.

The brief variant asks for a one-line answer and stops at the line's end
(``rag.prompting``): a base model ignores "answer briefly" but follows the format.
The caps (``max_tokens``, on the normal prompt) sweep where the answers lose the
evidence. Output tokens, decode time and evidence coverage per variant; every
request starts with its own first line, so none profits from another's cached prefix.
No repeated-line guard here: the stop strings alone end an answer, as the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy

from bench import configs, plotting, runner, stats
from bench.kinds import rag_work, registry, speed
from bench.kinds.cells import cell_summary, median, watched_cell
from bench.kinds.checks import Check, all_ok, done_cells, not_applicable
from bench.kinds.labs import Estimate, KeyNumber, Lab, Target, measured_at, shown
from bench.kinds.registry import Field, Runs
from bench.kinds.session import CLIENT_TIMEOUT_S, Session, keeps_partial, warm_up
from bench.reporting import Reporter
from bench.workloads import nonce_line
from labapp import said
from labapp.said import gettext as _
from rag.estimator import gen_seconds
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

BASE_VARIANTS = ("normal", "brief")
Measured = dict[str, list[tuple[RequestRecord, dict[str, Any], dict[str, Any]]]]  # variant → (record, answer, /metrics)


@dataclass(frozen=True)
class ShortConfig:
    questions: int = 3
    normal_tokens: int = 160
    caps: tuple[int, ...] = (16, 32, 64, 128)
    top_k: int = 3
    chunk_size: int = 500
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.questions * len(self.variants())

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("normal_tokens", rag_work.rag_longest(self.top_k, self.chunk_size, self.normal_tokens))]

    def variants(self) -> dict[str, tuple[bool, int]]:
        """variant → (asked to answer briefly, max_tokens): the instruction alone, then each cap alone."""
        variants = {"normal": (False, self.normal_tokens), "brief": (True, self.normal_tokens)}
        return variants | {cap_cell(cap): (False, cap) for cap in sorted(set(self.caps))}


def cap_cell(cap: int) -> str:
    return f"cap_{cap}"


FIELDS = (
    Field("questions", gettext_lazy("질문 수"), "integer", low=1, high=20),
    Field("normal_tokens", gettext_lazy("보통 답변의 max_tokens"), "integer", low=2, high=4096),
    Field("caps", gettext_lazy("짧은 답변의 상한들 (max_tokens)"), "integers", low=1, high=4096),
    Field("top_k", gettext_lazy("top-k"), "integer", low=0, high=10),
    rag_work.chunk_size_field(),
)


def parse(raw: dict[str, Any]) -> ShortConfig:
    config = ShortConfig(**registry.read_fields(ShortConfig, FIELDS, raw))
    if max(config.caps) >= config.normal_tokens:
        raise configs.ConfigError("caps", _("상한은 모두 보통 답변의 max_tokens보다 작아야 합니다"))
    return config


def variant_name(cell: str) -> str:
    """A cell's name on the page: "보통", "짧게 지시" or "상한 32"."""
    if cell.startswith("cap_"):
        return _("상한 %(n)s") % {"n": cell.removeprefix("cap_")}
    return {"normal": _("보통"), "brief": _("짧게 지시")}.get(cell, cell)


def cells_of(measured: Measured, config: ShortConfig) -> list[dict[str, Any]]:
    cells = []
    for name, (is_brief, limit) in config.variants().items():
        if not measured.get(name):
            continue
        answers = [answer for _record, answer, _server in measured[name]]
        cell = cell_summary(
            [record for record, _answer, _server in measured[name]],
            cell=name,
            brief=is_brief,
            max_tokens=limit,
            answers=answers,
            answer_coverage=median([a["coverage"] for a in answers]),
            capped=sum(1 for a in answers if a["finish_reason"] == "length"),
        )
        cells.append(watched_cell(cell, server_metrics.merged([server for *_sent, server in measured[name]])))
    return cells


def pairs(normal: dict[str, Any], other: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(normal, other) request rows of the same question, both answered: every variant asks the same
    questions in the same order, so a question's answers are compared with each other, not medians
    of different questions (one long answer on either side no longer decides the comparison)."""

    def by_question(cell: dict[str, Any]) -> dict[Any, dict[str, Any]]:
        answers, rows = cell.get("answers") or [], cell.get("requests") or []
        return {a.get("id"): row for a, row in zip(answers, rows, strict=False) if row.get("success")}

    theirs = by_question(other)
    return [(row, theirs[key]) for key, row in by_question(normal).items() if key in theirs]


def _savings(normal: dict[str, Any], other: dict[str, Any]) -> list[float]:
    """Per question, the share of the normal answer's end-to-end time the other variant saved (%)."""
    return [100 * (1 - b["e2el"] / a["e2el"]) for a, b in pairs(normal, other) if a.get("e2el") and b.get("e2el")]


def _saved(normal: dict[str, Any], other: dict[str, Any]) -> float | None:
    """The median over questions of the time saved (%), each question against itself."""
    return median(_savings(normal, other))


def _saved_ci(normal: dict[str, Any], other: dict[str, Any]) -> list[float] | None:
    """The 95 % bootstrap interval of that median, the questions resampled."""
    return stats.median_ci(_savings(normal, other))


def shorter_longer(normal: dict[str, Any], other: dict[str, Any]) -> tuple[int, int, int]:
    """How many questions the other variant answered in fewer, more and as many output tokens."""
    diffs = [(b.get("output_tokens") or 0) - (a.get("output_tokens") or 0) for a, b in pairs(normal, other)]
    return sum(d < 0 for d in diffs), sum(d > 0 for d in diffs), sum(d == 0 for d in diffs)


def _caps_of(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((c for c in cells if str(c.get("cell", "")).startswith("cap_")), key=lambda c: c["max_tokens"])


def enough_cap(cells: list[dict[str, Any]]) -> int | None:
    """The smallest cap from which every larger cap keeps the evidence of the normal answers (``COVERAGE_KEPT``).

    None when the normal answers hold too little evidence to judge (``COVERAGE_FLOOR``) or no cap keeps it.
    """
    normal = next((c for c in cells if c.get("cell") == "normal"), {})
    held = normal.get("answer_coverage") or 0
    if held <= COVERAGE_FLOOR:
        return None
    found = None
    for cell in reversed(_caps_of(cells)):
        if (cell.get("answer_coverage") or 0) < COVERAGE_KEPT * held:
            break
        found = int(cell["max_tokens"])
    return found


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """``time_saved_pct``: the brief instruction against the normal answers, question by question
    (:func:`_saved`); each cap's saving in its cell."""
    by = {c["cell"]: c for c in cells}
    normal = by.get("normal", {})
    for cell in _caps_of(cells):
        cell["time_saved_pct"] = _saved(normal, cell)
    brief = by.get("brief")
    return {
        "time_saved_pct": _saved(normal, brief) if brief else None,
        "time_saved_pct_ci": _saved_ci(normal, brief) if brief else None,
        "enough_cap": enough_cap(cells),
    }


async def _questions(config: ShortConfig, measured: Measured, session: Session) -> None:
    """Each question in every variant, one after another; stops at a cancel (``session.cancelled``)."""
    questions = await rag_work.questions(config.questions, seed=config.seed)
    await warm_up(base_url=session.base_url, model=session.model, seed=config.seed)
    plain = await rag_work.prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size)
    brief = await rag_work.prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size, brief=True)
    for number, question in enumerate(questions):
        asked = _("질문 %(n)d") % {"n": number + 1}
        if not await session.start_cell(asked):
            return
        for name, (is_brief, limit) in config.variants().items():
            prompt = (brief if is_brief else plain)[number]
            nonce = nonce_line(config.seed, number, name)
            spec = runner.RequestSpec(prompt=nonce + prompt.text, max_tokens=limit, ignore_eos=False, stop=prompt.stop)
            record, server = await session.send(spec, f"{asked}: {variant_name(name)}")
            measured[name].append((record, rag_work.answer(prompt, record) | {"id": question.id}, server))
            if session.cancelled:
                return


async def measure(config: ShortConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    measured: Measured = {name: [] for name in config.variants()}
    with keeps_partial(lambda: {"cells": cells_of(measured, config), "cancelled": False}):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            session = Session(http, base_url=base_url, model=model, total=config.total_requests, reporter=reporter)
            await _questions(config, measured, session)
    cells = cells_of(measured, config)
    return {"cells": cells, "cancelled": session.cancelled} | summary(cells), session.cancelled


def chart(runs: Runs) -> dict[str, Any]:
    """Time per variant (TTFT and decode) beside how much of the evidence its answers hold."""
    names = {c["cell"]: variant_name(c["cell"]) for _run, results in runs for c in results.get("cells", [])}
    return plotting.bars(
        runs,
        (_("시간 중앙값 (ms)"), _("답의 근거 포함률 (0-1)")),
        ([("median_ttft_ms", "TTFT"), ("median_decode_ms", _("디코드"))], [("answer_coverage", _("근거 포함률"))]),
        names=names,
    )


def cell_line(cell: dict[str, Any]) -> str:
    ms = speed.ms
    output = f"output {ms(cell['median_output_tokens'])} tok, evidence {ms(cell['answer_coverage'], 2)}"
    return f"{speed.latency_line(str(cell.get('cell', '')), cell)}, {output}"


def report_lines(results: dict[str, Any]) -> list[str]:
    enough = results.get("enough_cap")
    caps = [f"{c['max_tokens']}: {speed.ms(c.get('time_saved_pct'))} %" for c in _caps_of(results.get("cells", []))]
    return [
        f"brief vs normal: {speed.ms(results.get('time_saved_pct'))} % less time per answer",
        f"each cap vs normal, time saved: {', '.join(caps) or '—'}",
        f"smallest cap that keeps the evidence: {enough if enough is not None else '—'}",
    ]


COVERAGE_FLOOR = 0.3  # normal answers holding less of the evidence than this say nothing to compare against
COVERAGE_KEPT = 0.7  # a shorter answer keeps at least this share of the normal answers' coverage
MIN_CAPS = 3
MINIMUMS = gettext_lazy(
    "보통, 짧게 지시, 상한 3개 이상을 모두 같은 질문들로, 상한은 모두 보통 답변의 max_tokens보다 작게"
)


def missing(config: ShortConfig, results: dict[str, Any]) -> list[str]:
    """Lab 6 compares variants of the same answers: every variant over the same questions."""
    lacking = [] if max(config.caps) < config.normal_tokens else [_("보통 답변의 max_tokens보다 작은 상한")]
    if len(set(config.caps)) < MIN_CAPS:
        lacking.append(_("상한 %(n)d개 이상 (지금 %(now)d개)") % {"n": MIN_CAPS, "now": len(set(config.caps))})
    asked = {c.get("cell"): {a.get("id") for a in c.get("answers") or []} for c in done_cells(results)}
    normal = asked.get("normal") or set()
    unlike = [variant_name(name) for name in config.variants() if not normal or asked.get(name) != normal]
    if unlike:
        lacking.append(_("모든 변형을 같은 질문들로 (맞지 않는 변형: %(cells)s)") % {"cells": said.join(", ", unlike)})
    return lacking


def _no_evidence(held: float) -> str:
    why = _(
        "보통 답이 근거를 담지 않음 (근거 포함률 %(held)s ≤ 0.3): 기본 모델(기반 모델)은 답의 질을 재기엔 약해 "
        "이 비교는 아무것도 말하지 않습니다. 답의 질은 지시를 따르는 모델로 재세요"
    )
    return str(why % {"held": f"{held:.2f}"})


def _brief_tokens_check(normal: dict[str, Any], brief: dict[str, Any]) -> Check:
    """The instruction alone shortens the answers: question by question, more got shorter than longer."""
    name = _("짧게 답하라는 지시만으로 출력 토큰이 줄어듦 (상한 없이)")
    shorter, longer, same = shorter_longer(normal, brief)
    shown = _("질문별로 짧아짐 %(s)d · 길어짐 %(l)d · 같음 %(e)d") % {"s": shorter, "l": longer, "e": same}
    return Check(name, shorter > longer, shown)


def _brief_coverage_check(normal: dict[str, Any], brief: dict[str, Any]) -> Check:
    """The brief answers keep most of the evidence, judged only when the normal answers hold it."""
    name = _("짧게 지시한 답도 근거를 지킴 (보통 답 근거 포함률의 70% 이상)")
    held, kept = normal.get("answer_coverage") or 0, brief.get("answer_coverage") or 0
    if not (normal and brief):
        return Check(name, False, _("보통 답이나 짧게 지시한 답이 없음"))
    if held <= COVERAGE_FLOOR:
        return not_applicable(name, _no_evidence(held))
    return Check(name, kept >= COVERAGE_KEPT * held, f"{held:.2f} → {kept:.2f}")


def _enough_cap_check(r: dict[str, Any], normal: dict[str, Any]) -> Check:
    """The sweep shows where accuracy starts to fall: a cap from which the answers keep the evidence."""
    name = _("근거를 지키는 가장 작은 상한을 찾음")
    held = normal.get("answer_coverage") or 0
    if held <= COVERAGE_FLOOR:
        return not_applicable(name, _no_evidence(held))
    enough = r.get("enough_cap")
    if enough is None:
        return Check(name, False, _("어느 상한에서도 답이 근거를 지키지 못함"))
    return Check(name, True, _("상한 %(n)d 토큰부터 근거를 지킴") % {"n": enough})


def _caps_check(normal: dict[str, Any], caps: list[dict[str, Any]]) -> Check:
    """A lower cap gives fewer output tokens and less decode time: each cap holds, the smallest decodes least."""
    name = _("상한을 낮추면 출력 토큰과 디코드 시간이 줄어듦")
    if not (normal and caps):
        return Check(name, False, _("상한 칸이 없음"))
    over = [c["max_tokens"] for c in caps if (c.get("median_output_tokens") or 0) > c["max_tokens"]]
    smallest, largest = caps[0].get("median_decode_ms") or 0, normal.get("median_decode_ms") or 0
    # In the claim's order: from the normal answers to the smallest cap.
    shown = _("디코드: 보통 답 %(normal).0f ms → 상한 %(cap)d 토큰 %(capped).0f ms") % {
        "normal": largest,
        "cap": caps[0]["max_tokens"],
        "capped": smallest,
    }
    if over:
        return Check(name, False, _("상한을 넘은 칸: %(caps)s") % {"caps": ", ".join(map(str, over))})
    return Check(name, smallest < largest, shown)


def _total_time_check(r: dict[str, Any]) -> Check:
    """The brief instruction's saving on the whole answer, worded in the direction it went."""
    saved = r.get("time_saved_pct") or 0
    if saved >= 0:
        shown = _("짧게 지시한 답이 전체 시간 %(pct).0f%% 줄어듦") % {"pct": saved}
    else:
        shown = _("짧게 지시한 답이 전체 시간 %(pct).0f%% 늘어남") % {"pct": -saved}
    return Check(_("전체 시간이 줄어듦"), saved > 0, shown)


def checks(r: dict[str, Any]) -> list[Check]:
    cells = done_cells(r)
    by = {c["cell"]: c for c in cells}
    normal, brief = by.get("normal", {}), by.get("brief", {})
    return [
        all_ok(r),
        _brief_tokens_check(normal, brief),
        _total_time_check(r),
        _brief_coverage_check(normal, brief),
        _caps_check(normal, _caps_of(cells)),
        _enough_cap_check(r, normal),
    ]


# --- Lab 6's prediction: the time saved ----------------------------------------------------------


ONE_LINE_TOKENS = 20  # a one-line answer of the default model measured 6-24 tokens: the estimate's guess


def saved_what(config: ShortConfig) -> str:
    return _("한 줄 답 지시로 줄어드는 답변 시간")


def saved_estimate(config: ShortConfig, prefill: float, decode: float) -> Estimate | None:
    """The one-line answer's time saved against the normal one, as a share of the normal answer's whole time."""
    prompt = rag_work.context_tokens(config.top_k, config.chunk_size)
    prefill_s, normal_s = gen_seconds(prompt, config.normal_tokens, prefill, decode)
    _same, capped_s = gen_seconds(prompt, ONE_LINE_TOKENS, prefill, decode)
    if prefill_s + normal_s <= 0:
        return None
    saved = round(100 * (normal_s - capped_s) / (prefill_s + normal_s), 1)
    formula = (
        f"({config.normal_tokens} − {ONE_LINE_TOKENS}) ÷ {shown(decode)} = {shown(normal_s - capped_s)} s; "
        f"{shown(normal_s - capped_s)} ÷ ({prompt} ÷ {shown(prefill)} + {config.normal_tokens} ÷ {shown(decode)}) "
        f"= {shown(saved)} %"
    )
    return Estimate(saved, formula)


LAB = Lab(
    number=6,
    slug="lab6-short-answers",
    title=gettext_lazy("실습 6 — 짧게 답하게 하기"),
    checks=checks,
    keys=(KeyNumber("time saved %", "time_saved_pct", gettext_lazy("줄어든 시간 (%)")),),
    missing=missing,
    minimums=MINIMUMS,
    target=Target(saved_what, "%", measured_at("time_saved_pct"), saved_estimate, low=-100, high=100),
    notice="model_notice.html",  # its answers' words are compared: the base model's are poor, say so
)


KIND = registry.register(
    registry.JobKind(
        name="short",
        label=gettext_lazy("짧은 답변 대 보통 답변 (실습 6)"),
        config_type=ShortConfig,
        fields=FIELDS,
        measure=measure,
        parse=parse,
        chart=chart,
        summary_template="bench/kinds/short.html",
        cell_label=lambda cell: str(variant_name(str(cell.get("cell")))),
        cell_line=cell_line,
        report_lines=report_lines,
        lab=LAB,
    )
)
