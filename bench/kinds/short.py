"""Lab 6, short answers: the same questions normally, with a one-line answer format, and at several caps.

The brief variant asks for a one-line answer and stops at the line's end
(``rag.prompting``): a base model ignores "answer briefly" but follows the format.
The caps (``max_tokens``) send exactly the normal prompt, so at temperature 0 a cap
changes an answer only where it cuts it. Every variant of a question sends the same
first line, and the prefix cache is emptied before each request: every request pays
its whole prefill, so the brief instruction's own prefill cost shows in its TTFT
beside the decode it saves. The questions ask for an explanation and every prompt shows two
worked answers (a conclusion line, then reasons: ``ANSWER_SHAPE``), so the normal answers run
long enough that their length decides the time.
No repeated-line guard here: the stop strings and the model end an answer, a frequency penalty
(``FREQUENCY_PENALTY``, the same in every variant) keeping it from repeating one line to the cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy

from bench import configs, plotting, runner, stats
from bench.kinds import rag_work, registry, speed
from bench.kinds.cells import cell_summary, median, watched_cell
from bench.kinds.checks import Check, all_ok, done_cells, not_applicable, rerun_advice
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
    questions: int = 6  # enough that a real saving's interval excludes zero (one odd question is tolerated)
    normal_tokens: int = 160
    caps: tuple[int, ...] = (16, 32, 64)
    top_k: int = 3
    chunk_size: int = 500
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.questions * len(self.variants())

    def longest_requests(self) -> list[tuple[str, int]]:
        longest = rag_work.rag_longest(self.top_k, self.chunk_size, self.normal_tokens) + len(ANSWER_SHAPE)
        return [("normal_tokens", longest)]

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


def _by_question(cell: dict[str, Any]) -> dict[Any, tuple[dict[str, Any], dict[str, Any]]]:
    """{question id: (request row, answer)} of a cell's answered questions."""
    answers, rows = cell.get("answers") or [], cell.get("requests") or []
    return {a.get("id"): (row, a) for a, row in zip(answers, rows, strict=False) if row.get("success")}


def _paired(normal: dict[str, Any], other: dict[str, Any]) -> list[tuple[tuple[dict[str, Any], dict[str, Any]], ...]]:
    theirs = _by_question(other)
    return [(mine, theirs[key]) for key, mine in _by_question(normal).items() if key in theirs]


def pairs(normal: dict[str, Any], other: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(normal, other) request rows of the same question, both answered: every variant asks the same
    questions in the same order, so a question's answers are compared with each other, not medians
    of different questions (one long answer on either side no longer decides the comparison)."""
    return [(a[0], b[0]) for a, b in _paired(normal, other)]


def changed(normal: dict[str, Any], other: dict[str, Any]) -> tuple[int, int]:
    """(questions whose answer the other variant changed, questions compared): at temperature 0 on the
    same prompt, the only answers that differ are the ones the setting reached."""
    both = _paired(normal, other)
    return sum(1 for a, b in both if a[1].get("answer") != b[1].get("answer")), len(both)


def _savings(normal: dict[str, Any], other: dict[str, Any]) -> list[float]:
    """Per question, the share of the normal answer's end-to-end time the other variant saved (%)."""
    return [100 * (1 - b["e2el"] / a["e2el"]) for a, b in pairs(normal, other) if a.get("e2el") and b.get("e2el")]


def saved_ms(normal: dict[str, Any], other: dict[str, Any], key: str) -> list[float]:
    """Per question, the ms of ``key`` (a request row's seconds: "ttft", "decode_time") the other variant saved."""
    both = [(a.get(key), b.get(key)) for a, b in pairs(normal, other)]
    return [1000 * (a - b) for a, b in both if a is not None and b is not None]


def _saved(normal: dict[str, Any], other: dict[str, Any]) -> float | None:
    """The median over questions of the time saved (%), each question against itself."""
    return median(_savings(normal, other))


def _saved_ci(normal: dict[str, Any], other: dict[str, Any]) -> list[float] | None:
    """The 95 % bootstrap interval of that median, the questions resampled."""
    return stats.median_ci(_savings(normal, other))


def saving(normal: dict[str, Any], other: dict[str, Any], key: str, *, changed_only: bool = False) -> dict[str, Any]:
    """The median ms of ``key`` saved per question and its 95 % interval (None: fewer than two questions);
    ``changed_only``: over the questions whose answer the other variant changed (a cap's saving: on an
    answer it did not reach, the difference is the machine's noise, not the cap)."""
    values = saved_ms(normal, other, key)
    if changed_only:
        moved = [a[1].get("answer") != b[1].get("answer") for a, b in _paired(normal, other)]
        values = [v for v, m in zip(values, moved, strict=False) if m]
    return {"median": median(values), "ci": stats.median_ci(values), "n": len(values)}


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


def cap_effect(normal: dict[str, Any], cap: dict[str, Any]) -> dict[str, Any]:
    """What a cap did to the normal answers: nothing when no answer reached it (``no_effect``), else the
    time and decode it saved, question by question, with intervals and the answers it changed."""
    changed_n, compared = changed(normal, cap)
    effect: dict[str, Any] = {"changed": changed_n, "compared": compared, "no_effect": not cap.get("capped")}
    if effect["no_effect"]:
        return effect | {"time_saved_pct": None, "time_saved_pct_ci": None, "decode_saved_ms": None}
    decode = saving(normal, cap, "decode_time", changed_only=True)
    return effect | {
        "time_saved_pct": _saved(normal, cap),
        "time_saved_pct_ci": _saved_ci(normal, cap),
        "decode_saved_ms": decode["median"],
        "decode_saved_ms_ci": decode["ci"],
    }


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """``time_saved_pct``: the brief instruction against the normal answers, question by question
    (:func:`_saved`), beside the decode it saved and the prefill its own words cost; each cap's
    effect in its cell (:func:`cap_effect`)."""
    by = {c["cell"]: c for c in cells}
    normal, brief = by.get("normal", {}), by.get("brief")
    for cell in _caps_of(cells):
        cell.update(cap_effect(normal, cell))
    if not brief:
        return {"time_saved_pct": None, "time_saved_pct_ci": None, "enough_cap": enough_cap(cells)}
    decode, prefill = saving(normal, brief, "decode_time"), saving(brief, normal, "ttft")
    return {
        "time_saved_pct": _saved(normal, brief),
        "time_saved_pct_ci": _saved_ci(normal, brief),
        "decode_saved_ms": decode["median"],
        "decode_saved_ms_ci": decode["ci"],
        "prefill_cost_ms": prefill["median"],
        "prefill_cost_ms_ci": prefill["ci"],
        "brief_changed": changed(normal, brief)[0],
        "enough_cap": enough_cap(cells),
    }


ASK_WHY = " 이유와 함께 자세히 설명하세요."  # in the question itself: every variant asks it, the normal answer runs

# Two worked questions in every variant's prompt, right before its question (the prompt's shape, not its
# content: neither is one of the evaluation questions). A base model ignores "explain in detail" and,
# without them, answers in one line that ends at the next "질문:" (median 21-36 tokens on Gemma 3 270M),
# so the brief format had nothing to cut. Shown a conclusion line and then reasons, it writes the
# reasons (or repeats a line until max_tokens); the brief format keeps the conclusion line alone.
ANSWER_SHAPE = (
    "[예시 1]\n질문: 요청이 몰리면 TTFT가 왜 늘어나나요?" + ASK_WHY + "\n"
    "답변: 새 요청이 앞선 요청들의 프리필을 기다리기 때문입니다.\n"
    "- 엔진은 한 스텝에 정해진 양의 토큰만 계산합니다.\n"
    "- 새 요청은 앞선 요청의 프리필이 끝날 때까지 대기열에서 기다립니다.\n"
    "- 그래서 동시 요청이 많을수록 첫 토큰이 늦게 나옵니다.\n\n"
    "[예시 2]\n질문: 모델이 커지면 TPOT는 어떻게 되나요?" + ASK_WHY + "\n"
    "답변: TPOT가 길어집니다.\n"
    "- 디코드는 토큰마다 가중치 전체를 메모리에서 읽습니다.\n"
    "- 가중치가 두 배면 읽을 바이트도 두 배입니다.\n"
    "- 메모리 대역폭은 그대로이므로 토큰 하나에 걸리는 시간이 늘어납니다.\n\n"
)
# Sent with every variant: a penalty on tokens the answer itself has already written (vLLM, like
# OpenAI, leaves the prompt's tokens out), so a base model's answer ends instead of repeating one
# line ("1. 1. 1. ...", "1000000...") up to max_tokens. Without it the brief format's first line
# looped to the cap in 2-5 of 6 questions on Gemma 3 270M and the decode check failed; with 0.8
# the normal answers ended by themselves at 43-110 tokens and the brief ones were shorter in 17
# of 18 questions (three question sets, temperature 0).
FREQUENCY_PENALTY = 0.8


@dataclass(frozen=True)
class Explained:
    """An evaluation question as Lab 6 asks it, with :data:`ASK_WHY` (a question with a one-word answer
    leaves nothing for the instruction or a cap to save)."""

    id: str
    question: str
    slug: str
    evidence: str


def explained(question: Any) -> Explained:
    return Explained(question.id, question.question + ASK_WHY, question.slug, question.evidence)


def reset_state(resets: list[str]) -> str:
    """ "ok" when every reset emptied the prefix cache, else the first other answer (e.g. "unsupported")."""
    return next((r for r in resets if r != "ok"), "ok") if resets else "none"


async def _questions(config: ShortConfig, measured: Measured, resets: list[str], session: Session) -> None:
    """Each question in every variant, one after another, the prefix cache emptied before each request;
    stops at a cancel (``session.cancelled``)."""
    questions = [explained(q) for q in await rag_work.questions(config.questions, seed=config.seed)]
    await warm_up(base_url=session.base_url, model=session.model, seed=config.seed)
    shared = {"top_k": config.top_k, "chunk_size": config.chunk_size, "example": ANSWER_SHAPE}
    plain = await rag_work.prompts(questions, **shared)
    brief = await rag_work.prompts(questions, **shared, brief=True)
    for number, question in enumerate(questions):
        asked = _("질문 %(n)d") % {"n": number + 1}
        if not await session.start_cell(asked):
            return
        nonce = nonce_line(config.seed, number)  # one per question: a cap sends exactly the normal prompt
        for name, (is_brief, limit) in config.variants().items():
            prompt = (brief if is_brief else plain)[number]
            spec = runner.RequestSpec(
                prompt=nonce + prompt.text,
                max_tokens=limit,
                ignore_eos=False,
                stop=prompt.stop,
                frequency_penalty=FREQUENCY_PENALTY,
            )
            resets.append(await vllm_client.reset_prefix_cache(session.http))
            record, server = await session.send(spec, f"{asked}: {variant_name(name)}")
            measured[name].append((record, rag_work.answer(prompt, record) | {"id": question.id}, server))
            if session.cancelled:
                return


async def measure(config: ShortConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    measured: Measured = {name: [] for name in config.variants()}
    resets: list[str] = []
    with keeps_partial(lambda: {"cells": cells_of(measured, config), "cancelled": False}):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            session = Session(http, base_url=base_url, model=model, total=config.total_requests, reporter=reporter)
            await _questions(config, measured, resets, session)
    cells = cells_of(measured, config)
    done = {"cells": cells, "cancelled": session.cancelled, "cache_reset": reset_state(resets)}
    return done | summary(cells), session.cancelled


def chart(runs: Runs) -> dict[str, Any]:
    """Time per variant (TTFT and decode) beside how much of the evidence its answers hold (a share: 0-1)."""
    names = {c["cell"]: variant_name(c["cell"]) for _run, results in runs for c in results.get("cells", [])}
    figure = plotting.bars(
        runs,
        (_("시간 중앙값 (ms)"), _("답의 근거 포함률 (0-1)")),
        ([("median_ttft_ms", "TTFT"), ("median_decode_ms", _("디코드"))], [("answer_coverage", _("근거 포함률"))]),
        names=names,
    )
    figure["layout"].setdefault("yaxis2", {})["range"] = [0, 1]
    return figure


def cell_line(cell: dict[str, Any]) -> str:
    ms = speed.ms
    output = f"output {ms(cell['median_output_tokens'])} tok, evidence {ms(cell['answer_coverage'], 2)}"
    return f"{speed.latency_line(str(cell.get('cell', '')), cell)}, {output}"


def _span(value: float | None, ci: list[float] | None, unit: str) -> str:
    """A saving and its interval for the text report: "1200 ms [900, 1500]"."""
    interval = f" [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else ""
    return f"{speed.ms(value)} {unit}{interval}"


def _cap_report(cell: dict[str, Any]) -> str:
    if cell.get("no_effect"):
        return f"{cell['max_tokens']}: no effect (no answer reached the cap)"
    decode = _span(cell.get("decode_saved_ms"), cell.get("decode_saved_ms_ci"), "ms decode")
    return f"{cell['max_tokens']}: {decode}, {cell.get('changed')}/{cell.get('compared')} answers changed"


def report_lines(results: dict[str, Any]) -> list[str]:
    enough = results.get("enough_cap")
    caps = [_cap_report(c) for c in _caps_of(results.get("cells", []))]
    return [
        f"brief vs normal: {_span(results.get('time_saved_pct'), results.get('time_saved_pct_ci'), '%')} less time",
        f"  decode saved {_span(results.get('decode_saved_ms'), results.get('decode_saved_ms_ci'), 'ms')}, "
        f"instruction's prefill {_span(results.get('prefill_cost_ms'), results.get('prefill_cost_ms_ci'), 'ms')}",
        f"each cap vs normal, saved: {'; '.join(caps) or '—'}",
        f"smallest cap that keeps the evidence: {enough if enough is not None else '—'}",
        f"prefix cache emptied before each request: {results.get('cache_reset', '—')}",
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


def coverage_lost(normal: dict[str, Any], brief: dict[str, Any]) -> dict[str, Any]:
    """Per question, the share of its normal answer's evidence the brief answer lost (0.25: a quarter;
    negative: it held more; a question whose normal answer held none is left out): the median, its 95 %
    interval and how many questions."""
    both = [(a[1].get("coverage"), b[1].get("coverage")) for a, b in _paired(normal, brief)]
    values = [1 - float(theirs) / float(mine) for mine, theirs in both if mine and theirs is not None]
    return {"median": median(values), "ci": stats.median_ci(values), "n": len(values)}


def _brief_coverage_check(normal: dict[str, Any], brief: dict[str, Any]) -> Check:
    """The brief answers keep most of the evidence, judged only when the normal answers hold it, and only
    when the questions say it either way: the share lost per question, with its interval, against the
    share allowed (``1 - COVERAGE_KEPT``). A few questions whose interval
    straddles the allowance say "can't tell" rather than a verdict the next run may reverse."""
    name = _("짧게 지시한 답도 근거를 지킴 (보통 답 근거 포함률의 70% 이상)")
    held, kept = normal.get("answer_coverage") or 0, brief.get("answer_coverage") or 0
    if not (normal and brief):
        return Check(name, False, _("보통 답이나 짧게 지시한 답이 없음"))
    if held <= COVERAGE_FLOOR:
        return not_applicable(name, _no_evidence(held))
    lost, allowed = coverage_lost(normal, brief), 1 - COVERAGE_KEPT
    if lost["median"] is None:  # no question answered on both sides with its coverage: the medians alone
        return Check(name, kept >= COVERAGE_KEPT * held, f"{held:.2f} → {kept:.2f}")
    low, high = lost["ci"] or [lost["median"], lost["median"]]
    shown = _(
        "근거 포함률 보통 → 짧게 지시: %(held)s → %(kept)s; "
        "질문별로 잃은 몫 %(lost)s (95%% 구간 %(low)s ~ %(high)s), 허용 %(allowed)s"
    ) % {
        "held": f"{held:.2f}",
        "kept": f"{kept:.2f}",
        "lost": f"{100 * lost['median']:.0f}%",
        "low": f"{100 * low:.0f}%",
        "high": f"{100 * high:.0f}%",
        "allowed": f"{100 * allowed:.0f}%",
    }
    if high <= allowed:
        return Check(name, True, shown)
    if low > allowed:
        return Check(name, False, shown)
    why = _(
        "질문 %(n)d개로는 가릴 수 없음: 잃은 몫의 구간이 허용치를 사이에 둡니다 (%(shown)s). "
        "질문 수를 늘려 다시 실행하세요"
    ) % {
        "n": lost["n"],
        "shown": shown,
    }
    return not_applicable(name, why)


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


def _time(ms: float | None) -> str:
    """A duration as the checks say it: "850 ms", "3.2 s"."""
    if ms is None:
        return "—"
    return f"{ms / 1000:.1f} s" if abs(ms) >= 1000 else f"{ms:.0f} ms"


def _amount(value: float, unit: str) -> str:
    return _time(value) if unit == "ms" else f"{value:.0f}%"


def _interval(ci: list[float] | None, unit: str = "ms") -> str:
    """ "95 % 구간 a ~ b", or that one question gives none."""
    if not ci:
        return str(_("구간 없음: 질문이 2개 미만"))
    return str(_("95%% 구간 %(low)s ~ %(high)s") % {"low": _amount(ci[0], unit), "high": _amount(ci[1], unit)})


def _went(saved: float | None, ci: list[float] | None = None, unit: str = "ms", *, interval: bool = True) -> str:
    """A saving in the direction it went, its interval the same way: "2.2 s 줄어듦 (95% 구간 2.0 s ~ 2.4 s)"."""
    if saved is None:
        return "—"
    if saved == 0 and not interval:
        return str(_("변화 없음"))
    grew = saved < 0
    if grew:
        saved, ci = -saved, ([-ci[1], -ci[0]] if ci else None)
    value = (_("%(value)s 늘어남") if grew else _("%(value)s 줄어듦")) % {"value": _amount(saved, unit)}
    return value + " (" + _interval(ci, unit) + ")" if interval else value


def _excludes_zero(median_value: float | None, ci: list[float] | None) -> bool:
    """A saving shown beyond the noise: its interval lies above zero (one question: the value itself)."""
    return ci[0] > 0 if ci else (median_value or 0) > 0


def _uncertain_advice(median_value: float | None) -> str:
    if (median_value or 0) > 0:
        return _(
            "절약은 보였지만 질문별 95% 구간이 0을 포함합니다: 이 질문 수로는 잡음과 가려낼 수 없습니다. "
            "질문 수를 늘려 다시 실행하세요."
        )
    return rerun_advice()


def _brief_decode_check(normal: dict[str, Any], brief: dict[str, Any]) -> Check:
    """The instruction's saving where it acts: the decode of the same questions, with its interval."""
    name = _("짧게 지시하면 디코드 시간이 줄어듦")
    if not (normal and brief):
        return Check(name, False, _("보통 답이나 짧게 지시한 답이 없음"))
    decode, (moved, compared) = saving(normal, brief, "decode_time"), changed(normal, brief)
    shown = _("디코드 보통 → 짧게 지시: %(normal)s → %(brief)s; 질문별 %(saved)s; 답이 바뀐 질문 %(moved)d/%(n)d") % {
        "normal": _time(normal.get("median_decode_ms")),
        "brief": _time(brief.get("median_decode_ms")),
        "saved": _went(decode["median"], decode["ci"]),
        "moved": moved,
        "n": compared,
    }
    passed = _excludes_zero(decode["median"], decode["ci"])
    return Check(name, passed, shown, "" if passed else _uncertain_advice(decode["median"]))


def _total_shown(normal: dict[str, Any], brief: dict[str, Any]) -> str:
    """The whole answer's time in the claim's order, beside its two parts: the decode saved, the prefill added."""
    decode, prefill = saving(normal, brief, "decode_time"), saving(brief, normal, "ttft")
    return str(
        _(
            "전체 시간 보통 → 짧게 지시: %(normal)s → %(brief)s, 질문별 %(went)s; "
            "디코드 %(decode)s, 지시문의 프리필 %(prefill)s"
        )
        % {
            "normal": _time(normal.get("median_e2el_ms")),
            "brief": _time(brief.get("median_e2el_ms")),
            "went": _went(_saved(normal, brief), _saved_ci(normal, brief), "%"),
            "decode": _went(decode["median"], interval=False),
            "prefill": _went(None if prefill["median"] is None else -prefill["median"], interval=False),
        }
    )


def _total_time_check(normal: dict[str, Any], brief: dict[str, Any]) -> Check:
    """The whole answer, judged apart from the decode: when the decode saving is real but the instruction's
    own prefill ate it (a slow-prefill CPU, answers already short), the check says so and counts neither way."""
    name = _("전체 시간이 줄어듦")
    if not (normal and brief):
        return Check(name, False, _("보통 답이나 짧게 지시한 답이 없음"))
    shown = _total_shown(normal, brief)
    if _excludes_zero(_saved(normal, brief), _saved_ci(normal, brief)):
        return Check(name, True, shown)
    decode, prefill = saving(normal, brief, "decode_time"), saving(brief, normal, "ttft")
    if not _excludes_zero(decode["median"], decode["ci"]):
        why = _("지시가 디코드를 잡음 이상으로 줄이지 못해(바로 위 확인) 전체 시간에서 볼 절약이 없습니다 (%(shown)s)")
        return not_applicable(name, str(why % {"shown": shown}))
    if (prefill["median"] or 0) > 0:
        why = _(
            "디코드는 줄었지만 지시문이 더한 프리필이 그만큼을 다시 썼습니다. 프리필이 느린 기계에서 이미 짧은 답은 "
            "전체 시간이 거의 그대로입니다: 출력이 길수록 출력 길이가 시간을 정합니다 (%(shown)s)"
        )
        return not_applicable(name, str(why % {"shown": shown}))
    return Check(name, False, shown, _uncertain_advice(_saved(normal, brief)))


def _cap_detail(normal: dict[str, Any], cap: dict[str, Any]) -> str:
    """One cap's effect: none when no answer reached it, else the decode it saved and the answers it changed."""
    effect = cap_effect(normal, cap)
    if effect["no_effect"]:
        return str(_("%(cap)s: 효과 없음 (상한에 닿은 답 없음)") % {"cap": variant_name(cap["cell"])})
    saved = effect["decode_saved_ms"]
    return str(
        _("%(cap)s: 디코드 %(saved)s, 바뀐 답 %(moved)d/%(n)d")
        % {
            "cap": variant_name(cap["cell"]),
            "saved": _went(saved, effect["decode_saved_ms_ci"]),
            "moved": effect["changed"],
            "n": effect["compared"],
        }
    )


def _caps_chain(normal: dict[str, Any], bit: list[dict[str, Any]]) -> str:
    """From the normal answers down to the smallest cap that cut one: "보통 → 상한 32 → 상한 16: 디코드 5.1 s → …"."""
    chain = [normal, *reversed(bit)]
    return str(
        _("%(names)s: 디코드 %(times)s")
        % {
            "names": said.join(
                " → ",
                [variant_name(normal["cell"]), variant_name(chain[1]["cell"])]
                + [str(c["max_tokens"]) for c in chain[2:]],
            ),
            "times": " → ".join(_time(c.get("median_decode_ms")) for c in chain),
        }
    )


def _caps_check(normal: dict[str, Any], caps: list[dict[str, Any]]) -> Check:
    """A lower cap gives fewer output tokens and less decode time, judged only on the caps some answer reached
    (the others changed nothing): tokens fall down the chain, and the smallest cap's decode saving is real."""
    name = _("상한을 낮추면 출력 토큰과 디코드 시간이 줄어듦")
    if not (normal and caps):
        return Check(name, False, _("상한 칸이 없음"))
    over = [c["max_tokens"] for c in caps if (c.get("median_output_tokens") or 0) > c["max_tokens"]]
    if over:
        return Check(name, False, _("상한을 넘은 칸: %(caps)s") % {"caps": ", ".join(map(str, over))})
    details = said.join("; ", [_cap_detail(normal, c) for c in reversed(caps)])
    bit = [c for c in caps if c.get("capped")]
    if not bit:
        return not_applicable(name, details)
    tokens = [c.get("median_output_tokens") or 0 for c in [normal, *reversed(bit)]]
    smallest = cap_effect(normal, bit[0])
    passed = tokens == sorted(tokens, reverse=True) and _excludes_zero(
        smallest["decode_saved_ms"], smallest["decode_saved_ms_ci"]
    )
    shown = _caps_chain(normal, bit) + "; " + details
    return Check(name, passed, shown, "" if passed else _uncertain_advice(smallest["decode_saved_ms"]))


def checks(r: dict[str, Any]) -> list[Check]:
    cells = done_cells(r)
    by = {c["cell"]: c for c in cells}
    normal, brief = by.get("normal", {}), by.get("brief", {})
    return [
        all_ok(r),
        _brief_tokens_check(normal, brief),
        _brief_decode_check(normal, brief),
        _total_time_check(normal, brief),
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
    prompt = rag_work.context_tokens(config.top_k, config.chunk_size) + len(ANSWER_SHAPE)
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


def request_shapes(config: ShortConfig) -> list[tuple[int, int]]:
    """Every request of a run as the run-time estimate counts it: each question in every variant, each
    prefilling its whole prompt (the cache is emptied before each); the normal answer and each cap at their
    max_tokens, the one-line answer at its usual length."""
    shape = round(len(ANSWER_SHAPE) * rag_work.TOKENS_PER_CHAR)  # the worked answers every prompt carries
    prompt = rag_work.expected_prompt_tokens(config.top_k, config.chunk_size) + shape
    outputs = [ONE_LINE_TOKENS if is_brief else limit for is_brief, limit in config.variants().values()]
    return [(prompt, output) for output in outputs] * config.questions


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
    request_shapes=request_shapes,
    shapes_basis=rag_work.RECKONED,
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
