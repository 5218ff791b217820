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
from bench.kinds.cells import cell_summary, median
from bench.kinds.checks import Check, all_ok, done_cells
from bench.kinds.registry import Field, Runs
from bench.kinds.session import CLIENT_TIMEOUT_S, Session, keeps_partial, warm_up
from bench.reporting import Reporter
from bench.workloads import nonce_line
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord

VARIANTS = ("normal", "brief", "cap", "brief_cap")
Measured = dict[str, list[tuple[RequestRecord, dict[str, Any]]]]  # variant → (record, its answer)


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
        answers = [answer for _record, answer in measured[name]]
        cells.append(
            cell_summary(
                [record for record, _answer in measured[name]],
                cell=name,
                brief=is_brief,
                max_tokens=limit,
                answers=answers,
                answer_coverage=median([a["coverage"] for a in answers]),
                capped=sum(1 for a in answers if a["finish_reason"] == "length"),
            )
        )
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
            record, _server = await session.send(spec, f"{asked}: {variant_names()[name]}")
            measured[name].append((record, rag_work.answer(prompt, record) | {"id": question.id}))
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


def checks(r: dict[str, Any]) -> list[Check]:
    by = {c["cell"]: c for c in done_cells(r)}
    normal, capped = by.get("normal", {}), by.get("brief_cap", {})
    return [
        all_ok(r),
        Check(
            _("지시와 상한으로 출력 토큰이 줄어듦"),
            bool(normal and capped)
            and (capped.get("median_output_tokens") or 0) < (normal.get("median_output_tokens") or 0),
            f"{normal.get('median_output_tokens') or 0:.0f} → {capped.get('median_output_tokens') or 0:.0f}",
        ),
        Check(_("전체 시간이 줄어듦"), (r.get("time_saved_pct") or 0) > 0, f"{r.get('time_saved_pct') or 0:.0f}%"),
        Check(
            _("짧은 답도 근거를 잃지 않음 (근거 포함률 하락 ≤ 0.3)"),
            bool(normal and capped)
            and (capped.get("answer_coverage") or 0) >= (normal.get("answer_coverage") or 0) - 0.3,
            f"{normal.get('answer_coverage') or 0:.2f} → {capped.get('answer_coverage') or 0:.2f}",
        ),
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
        lab=registry.LabChecks(6, checks, (("time saved %", "time_saved_pct"),)),
    )
)
