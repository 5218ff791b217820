"""Lab 6, short answers: the same questions with and without "answer briefly" and a ``max_tokens`` cap.

Output tokens and decode time per variant, and whether the answer still holds the
evidence. Every request starts with its own first line: none profits from another's
cached prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from bench import charts, configs, runner
from bench.kinds import rag_work, registry, speed
from bench.kinds.cells import cell_summary, median, watched_cell
from bench.kinds.checks import Check, all_ok, done_cells
from bench.kinds.registry import Field, Runs
from bench.kinds.session import CLIENT_TIMEOUT_S, Session, keeps_partial, warm_up
from bench.reporting import Reporter
from bench.workloads import nonce_line
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

VARIANTS = ("normal", "brief", "cap", "brief_cap")
Measured = dict[str, list[tuple[RequestRecord, dict[str, Any], dict[str, Any]]]]  # variant → (record, answer, /metrics)


@dataclass(frozen=True)
class ShortConfig:
    questions: int = 3
    normal_tokens: int = 160
    cap_tokens: int = 32
    top_k: int = 3
    chunk_size: int = 500
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.questions * len(VARIANTS)

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("normal_tokens", rag_work.rag_longest(self.top_k, self.chunk_size, self.normal_tokens))]

    def variants(self) -> dict[str, tuple[bool, int]]:
        """variant → (asked to answer briefly, max_tokens)."""
        return {
            "normal": (False, self.normal_tokens),
            "brief": (True, self.normal_tokens),
            "cap": (False, self.cap_tokens),
            "brief_cap": (True, self.cap_tokens),
        }


FIELDS = (
    Field("questions", gettext_lazy("질문 수"), "integer", low=1, high=20),
    Field("normal_tokens", gettext_lazy("보통 답변의 max_tokens"), "integer", low=2, high=4096),
    Field("cap_tokens", gettext_lazy("짧은 답변의 상한"), "integer", low=1, high=4096),
    Field("top_k", gettext_lazy("top-k"), "integer", low=0, high=10),
    rag_work.chunk_size_field(),
)


def parse(raw: dict[str, Any]) -> ShortConfig:
    config = ShortConfig(**registry.read_fields(ShortConfig, FIELDS, raw))
    if config.cap_tokens >= config.normal_tokens:
        raise configs.ConfigError("cap_tokens", _("상한은 보통 답변의 max_tokens보다 작아야 합니다"))
    return config


def variant_names() -> dict[str, str]:
    return {"normal": _("보통"), "brief": _("짧게 지시"), "cap": _("상한"), "brief_cap": _("지시 + 상한")}


def cells_of(measured: Measured, config: ShortConfig) -> list[dict[str, Any]]:
    cells = []
    for name in VARIANTS:
        if not measured[name]:
            continue
        is_brief, limit = config.variants()[name]
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


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    by = {c["cell"]: c for c in cells}
    normal, best = by.get("normal"), by.get("brief_cap")
    if not normal or not best or not normal.get("median_e2el_ms") or best.get("median_e2el_ms") is None:
        return {"time_saved_pct": None}
    return {"time_saved_pct": 100 * (1 - best["median_e2el_ms"] / normal["median_e2el_ms"])}


async def _questions(config: ShortConfig, measured: Measured, session: Session) -> None:
    """Each question in the four variants, one after another; stops at a cancel (``session.cancelled``)."""
    questions = await rag_work.questions(config.questions, seed=config.seed)
    await warm_up(base_url=session.base_url, model=session.model, seed=config.seed)
    plain = await rag_work.prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size)
    brief = await rag_work.prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size, brief=True)
    for number, question in enumerate(questions):
        asked = _("질문 %(n)d") % {"n": number + 1}
        if not await session.start_cell(asked):
            return
        for name in VARIANTS:
            is_brief, limit = config.variants()[name]
            prompt = (brief if is_brief else plain)[number]
            nonce = nonce_line(config.seed, number, name)
            spec = runner.RequestSpec(prompt=nonce + prompt.text, max_tokens=limit, ignore_eos=False, stop=prompt.stop)
            record, server = await session.send(spec, f"{asked}: {variant_names()[name]}")
            measured[name].append((record, rag_work.answer(prompt, record) | {"id": question.id}, server))
            if session.cancelled:
                return


async def measure(config: ShortConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    measured: Measured = {name: [] for name in VARIANTS}
    with keeps_partial(lambda: {"cells": cells_of(measured, config), "cancelled": False}):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            session = Session(http, base_url=base_url, model=model, total=config.total_requests, reporter=reporter)
            await _questions(config, measured, session)
    cells = cells_of(measured, config)
    return {"cells": cells, "cancelled": session.cancelled} | summary(cells), session.cancelled


def chart(runs: Runs) -> dict[str, Any]:
    """Output tokens and time per variant (normal, brief, capped, both)."""
    return charts.bars(
        runs,
        (_("출력 토큰 중앙값"), _("시간 중앙값 (ms)")),
        ([("median_output_tokens", _("출력 토큰"))], [("median_ttft_ms", "TTFT"), ("median_decode_ms", _("디코드"))]),
        names=variant_names(),
    )


def cell_line(cell: dict[str, Any]) -> str:
    ms = speed.ms
    output = f"output {ms(cell['median_output_tokens'])} tok, evidence {ms(cell['answer_coverage'], 2)}"
    return f"{speed.latency_line(str(cell.get('cell', '')), cell)}, {output}"


def report_lines(results: dict[str, Any]) -> list[str]:
    return [f"brief + capped vs normal: {speed.ms(results.get('time_saved_pct'))} % less time per answer"]


COVERAGE_FLOOR = 0.3  # normal answers holding less of the evidence than this say nothing to compare against
COVERAGE_KEPT = 0.7  # the capped answers keep at least this share of the normal answers' coverage
MINIMUMS = gettext_lazy(
    "네 변형(보통, 짧게 지시, 상한, 지시 + 상한)을 모두 같은 질문들로, 상한은 보통 답변의 max_tokens보다 작게"
)


def missing(config: ShortConfig, results: dict[str, Any]) -> list[str]:
    """Lab 6 compares variants of the same answers: every variant over the same questions."""
    lacking = [] if config.cap_tokens < config.normal_tokens else [_("보통 답변의 max_tokens보다 작은 상한")]
    asked = {c.get("cell"): {a.get("id") for a in c.get("answers") or []} for c in done_cells(results)}
    normal = asked.get("normal") or set()
    unlike = [variant_names()[name] for name in VARIANTS if not normal or asked.get(name) != normal]
    if unlike:
        lacking.append(_("네 변형 모두 같은 질문들로 (맞지 않는 변형: %(cells)s)") % {"cells": ", ".join(unlike)})
    return lacking


def _coverage_check(normal: dict[str, Any], capped: dict[str, Any]) -> Check:
    """The capped answers keep most of the evidence, judged only when the normal answers hold it."""
    name = _("짧은 답도 근거를 지킴 (보통 답 근거 포함률의 70% 이상)")
    held, kept = normal.get("answer_coverage") or 0, capped.get("answer_coverage") or 0
    shown = f"{held:.2f} → {kept:.2f}"
    if not (normal and capped) or held <= COVERAGE_FLOOR:
        why = _("보통 답이 근거를 담지 않음 (근거 포함률 %(held)s ≤ 0.3): 이 비교는 아무것도 말하지 않음")
        return Check(name, False, why % {"held": f"{held:.2f}"})
    return Check(name, kept >= COVERAGE_KEPT * held, shown)


def checks(r: dict[str, Any]) -> list[Check]:
    by = {c["cell"]: c for c in done_cells(r)}
    normal, brief, capped = by.get("normal", {}), by.get("brief", {}), by.get("brief_cap", {})
    return [
        all_ok(r),
        Check(
            _("짧게 답하라는 지시만으로 출력 토큰이 줄어듦 (상한 없이)"),
            bool(normal and brief)
            and (brief.get("median_output_tokens") or 0) < (normal.get("median_output_tokens") or 0),
            f"{normal.get('median_output_tokens') or 0:.0f} → {brief.get('median_output_tokens') or 0:.0f}",
        ),
        Check(_("전체 시간이 줄어듦"), (r.get("time_saved_pct") or 0) > 0, f"{r.get('time_saved_pct') or 0:.0f}%"),
        _coverage_check(normal, capped),
    ]


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
        cell_line=cell_line,
        report_lines=report_lines,
        lab=registry.LabChecks(6, checks, (("time saved %", "time_saved_pct"),), missing=missing, minimums=MINIMUMS),
    )
)
