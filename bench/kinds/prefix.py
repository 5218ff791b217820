"""Lab 5, the prefix cache: the same long context cold, warm, with another question and with its chunks reordered.

Per context the engine's prefix cache is reset first (where the engine allows it;
else the context's own first line keeps it cold), then the four prompts go one
after another; cached tokens and the hit rate come from the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from django.utils.translation import gettext_lazy

from bench import plotting, runner, stats
from bench.kinds import rag_work, registry, speed
from bench.kinds.cells import cell_summary, watched_cell
from bench.kinds.checks import Check, all_ok, done_cells, noise_advice
from bench.kinds.labs import KeyNumber, Lab, Target, measured_at
from bench.kinds.registry import Field, Runs
from bench.kinds.session import CLIENT_TIMEOUT_S, Session, keeps_partial, warm_up
from bench.reporting import Reporter
from bench.workloads import RagPrompt, nonce_line
from labapp import said
from labapp.said import gettext as _
from rag import prompting
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

CASES = ("cold", "warm", "other_question", "reordered")
Measured = dict[str, list[tuple[RequestRecord, dict[str, Any]]]]  # case → (record, /metrics around it)


@dataclass(frozen=True)
class PrefixConfig:
    contexts: int = 2  # how many long contexts, each asked four ways
    top_k: int = 5
    chunk_size: int = 1000
    max_tokens: int = 8
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.contexts * len(CASES)

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("top_k", rag_work.rag_longest(self.top_k, self.chunk_size, self.max_tokens))]


FIELDS = (
    Field("contexts", gettext_lazy("문맥 수"), "integer", low=1, high=10),
    Field("top_k", gettext_lazy("top-k"), "integer", low=2, high=10),
    rag_work.chunk_size_field(),
    Field("max_tokens", gettext_lazy("최대 출력 토큰"), "integer", low=1, high=4096),
)


def case_names() -> dict[str, str]:
    return {"cold": _("콜드"), "warm": _("웜"), "other_question": _("다른 질문"), "reordered": _("청크 순서 바꿈")}


def texts(prompt: RagPrompt, other: Any) -> dict[str, str]:
    """The four prompts of one context: twice the same, another question, the chunks reversed."""
    chunks = list(prompt.context)
    return {
        "cold": prompt.text,
        "warm": prompt.text,
        "other_question": prompting.prompt_build(other.question, chunks, brief=False).text,
        "reordered": prompting.prompt_build(prompt.question, list(reversed(chunks)), brief=False, keep_order=True).text,
    }


def cells_of(measured: Measured) -> list[dict[str, Any]]:
    cells = []
    for name, sent in measured.items():
        if not sent:
            continue
        records = [record for record, _server in sent]
        cell = watched_cell(cell_summary(records, cell=name), server_metrics.merged([s for _r, s in sent]))
        prompt_total = sum(r.prompt_tokens or 0 for r in records if r.success)
        cached_total = sum(r.cached_tokens or 0 for r in records if r.success)
        cell["hit_rate"] = cached_total / prompt_total if prompt_total else None
        cells.append(cell)
    return cells


def _ttfts(cells: list[dict[str, Any]], name: str) -> list[float | None]:
    return [r.get("ttft") for c in cells if c["cell"] == name for r in c.get("requests", []) if r.get("success")]


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The warm speed-up (median cold TTFT ÷ median warm TTFT) with its 95 % bootstrap interval."""
    ttft = {c["cell"]: c["median_ttft_ms"] for c in cells}
    cold, warm = ttft.get("cold"), ttft.get("warm")
    return {
        "warm_speedup": cold / warm if cold and warm else None,
        "warm_speedup_ci": stats.ratio_ci(_ttfts(cells, "cold"), _ttfts(cells, "warm")),
    }


async def _contexts(
    http: httpx.AsyncClient, config: PrefixConfig, measured: Measured, resets: list[str], session: Session
) -> None:
    """Each context: reset the cache, then its four prompts; stops at a cancel (``session.cancelled``)."""
    questions = await rag_work.questions(config.contexts * 2, seed=config.seed)
    firsts, others = questions[: config.contexts], questions[config.contexts :]
    await warm_up(base_url=session.base_url, model=session.model, seed=config.seed)
    prompts = await rag_work.prompts(firsts, top_k=config.top_k, chunk_size=config.chunk_size)
    for number, (prompt, other) in enumerate(zip(prompts, others or firsts, strict=False)):
        context = _("문맥 %(n)d") % {"n": number + 1}
        if not await session.start_cell(context):
            return
        resets.append(await vllm_client.reset_prefix_cache(http))
        nonce = nonce_line(config.seed, number)
        asked = texts(prompt, other)
        for name in CASES:
            spec = runner.RequestSpec(prompt=nonce + asked[name], max_tokens=config.max_tokens)
            measured[name].append(await session.send(spec, f"{context}: {case_names()[name]}"))
            if session.cancelled:
                return


async def measure(
    config: PrefixConfig, *, base_url: str, model: str, reporter: Reporter
) -> tuple[dict[str, Any], bool]:
    """Per context: reset, cold, the same prompt again, another question, the chunks reordered."""
    measured: Measured = {name: [] for name in CASES}
    resets: list[str] = []
    with keeps_partial(lambda: {"cells": cells_of(measured), "cancelled": False}):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            session = Session(http, base_url=base_url, model=model, total=config.total_requests, reporter=reporter)
            await _contexts(http, config, measured, resets, session)
    cells = cells_of(measured)
    reset = "ok" if resets and all(r == "ok" for r in resets) else (resets[0] if resets else None)
    return {"cells": cells, "cancelled": session.cancelled, "cache_reset": reset} | summary(cells), session.cancelled


def chart(runs: Runs) -> dict[str, Any]:
    """Cold vs warm bars of TTFT, and the cached share of the prompt."""
    return plotting.bars(  # the hit rate's axis runs 0–1: plotting.tidy_axes decides it for every fraction
        runs,
        (_("TTFT 중앙값 (ms)"), _("캐시된 토큰 / 프롬프트 토큰")),
        ([("median_ttft_ms", "TTFT")], [("hit_rate", _("적중률"))]),
        names=case_names(),
    )


def cell_line(cell: dict[str, Any]) -> str:
    ms = speed.ms
    cached = f"cached {ms(cell['median_cached_tokens'])} tok (hit rate {ms(cell['hit_rate'], 2)})"
    return f"{speed.latency_line(str(cell.get('cell', '')), cell)}, {cached}"


def report_lines(results: dict[str, Any]) -> list[str]:
    return [
        f"prefix cache reset: {results.get('cache_reset')}; "
        f"warm/cold TTFT speed-up {speed.ms(results.get('warm_speedup'), 1)}x"
    ]


MINIMUMS = gettext_lazy("문맥 1개 이상, 그 문맥의 네 칸(콜드, 웜, 다른 질문, 청크 순서 바꿈) 모두")


def missing(config: PrefixConfig, results: dict[str, Any]) -> list[str]:
    """Lab 5 compares four asks of one context: at least one context, each of the four measured."""
    lacking = [] if config.contexts >= 1 else [_("문맥 1개 이상")]
    measured = {c.get("cell") for c in done_cells(results)}
    absent = [case_names()[name] for name in CASES if name not in measured]
    if absent:
        lacking.append(_("네 칸 모두 (빠진 칸: %(cells)s)") % {"cells": said.join(", ", absent)})
    return lacking


def checks(r: dict[str, Any]) -> list[Check]:
    by = {c["cell"]: c for c in done_cells(r)}
    cold, warm = by.get("cold", {}), by.get("warm", {})
    other, reordered = by.get("other_question", {}), by.get("reordered", {})
    faster = bool(cold and warm) and (warm.get("median_ttft_ms") or 0) * 2 <= (cold.get("median_ttft_ms") or 0)
    cached = (warm.get("median_cached_tokens") or 0) > 0 and (cold.get("median_cached_tokens") or 0) == 0
    reorder = bool(other and reordered) and (reordered.get("median_cached_tokens") or 0) <= (
        other.get("median_cached_tokens") or 0
    )
    if r.get("cache_reset") not in (None, "ok"):
        cache_advice = _(
            "엔진이 프리픽스 캐시 초기화를 거절했습니다 (%(why)s). 개발 모드 엔진에서 다시 실행하세요."
        ) % {"why": r.get("cache_reset")}
    else:
        cache_advice = _("엔진이 프리픽스 캐싱을 켰는지(--enable-prefix-caching) 확인하고 다시 실행하세요.")
    return [
        all_ok(r),
        Check(
            _("웜 요청의 TTFT가 콜드의 절반 이하"),
            faster,
            _("TTFT: 콜드 %(cold).0f ms → 웜 %(warm).0f ms") % {"cold": _ms(cold), "warm": _ms(warm)},
            "" if faster else (noise_advice(r) if cached else cache_advice),
        ),
        Check(
            _("웜 요청은 캐시된 토큰이 있고 콜드는 없음"),
            cached,
            _("캐시된 토큰: 콜드 %(cold).0f, 웜 %(warm).0f") % {"cold": _cached(cold), "warm": _cached(warm)},
            "" if cached else cache_advice,
        ),
        Check(
            _("청크 순서를 바꾸면 캐시를 더 쓰지 못함"),
            reorder,
            _("캐시된 토큰: 다른 질문 %(other).0f → 청크 순서를 바꾼 질문 %(reordered).0f")
            % {"other": _cached(other), "reordered": _cached(reordered)},
            "" if reorder else _("top-k를 2 이상으로 두어 순서를 바꿀 청크가 여러 개가 되게 하고 다시 실행하세요."),
        ),
    ]


def _ms(cell: dict[str, Any]) -> float:
    return float(cell.get("median_ttft_ms") or 0)


def _cached(cell: dict[str, Any]) -> float:
    return float(cell.get("median_cached_tokens") or 0)


def speedup_what(config: PrefixConfig) -> str:
    return _("캐시 적중 시 TTFT가 빨라지는 배수")


def request_shapes(config: PrefixConfig) -> list[tuple[int, int]]:
    """Every request of a run as the run-time estimate counts it, prefill of the uncached tokens only:
    cold and the reordered chunks prefill the whole prompt; warm and another question only what follows
    the cached chunks (the template and question, at most). Every answer at ``max_tokens``."""
    whole = rag_work.expected_prompt_tokens(config.top_k, config.chunk_size)
    tail = rag_work.TEMPLATE_TOKENS
    prefilled = {"cold": whole, "warm": tail, "other_question": tail, "reordered": whole}
    return [(prefilled[name], config.max_tokens) for name in CASES] * config.contexts


LAB = Lab(
    number=5,
    slug="lab5-prefix-caching",
    title=gettext_lazy("실습 5 — 프리픽스 캐싱"),
    checks=checks,
    keys=(
        KeyNumber("warm speed-up", "warm_speedup", gettext_lazy("캐시 적중 시 빨라진 배수")),
        KeyNumber("cache reset", "cache_reset", gettext_lazy("캐시 초기화")),
    ),
    missing=missing,
    minimums=MINIMUMS,
    target=Target(speedup_what, "×", measured_at("warm_speedup")),
    engine_panels=("cache",),  # the prefix cache's hits
    request_shapes=request_shapes,
    shapes_basis=rag_work.RECKONED,
)


KIND = registry.register(
    registry.JobKind(
        name="prefix",
        label=gettext_lazy("프리픽스 캐시 콜드/웜 (실습 5)"),
        config_type=PrefixConfig,
        fields=FIELDS,
        measure=measure,
        chart=chart,
        summary_template="bench/kinds/prefix.html",
        cell_label=lambda cell: str(case_names().get(str(cell.get("cell")), cell.get("cell"))),
        cell_line=cell_line,
        report_lines=report_lines,
        lab=LAB,
    )
)
