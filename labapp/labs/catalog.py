"""The six labs: which job each runs, its auto-checks and key numbers, and a learner's status.

Checks are pure functions of a benchmark job's results (``BenchJob.results``), so the
lab page, the gradebook and the tests agree on what "passed" means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.utils.translation import gettext_lazy as _


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Results = dict[str, Any]


def _cells(results: Results) -> list[dict[str, Any]]:
    return [c for c in results.get("cells", []) if c.get("completed")]


def _all_ok(results: Results) -> Check:
    failed = sum(c.get("failed", 0) for c in results.get("cells", []))
    return Check(
        str(_("모든 요청 성공")),
        failed == 0 and bool(_cells(results)),
        str(_("실패한 요청 %(n)d개") % {"n": failed}) if failed else str(_("실패 없음")),
    )


def _checks_speed(r: Results) -> list[Check]:
    check = r.get("check") or {}
    error = check.get("error_pct")
    prefill, decode = r.get("prefill_speed") or 0, r.get("decode_speed") or 0
    return [
        _all_ok(r),
        Check(
            str(_("처음 보는 모양에서 추정이 측정의 15% 이내")),
            error is not None and error <= 15,
            str(_("추정 %(e)s s, 측정 %(m)s s, 오차 %(p)s%%"))
            % {"e": check.get("estimate_s"), "m": check.get("measured_s"), "p": error},
        ),
        Check(
            str(_("프리필이 디코드보다 토큰당 빠름")),
            prefill > decode > 0,
            str(_("프리필 %(p).0f tok/s, 디코드 %(d).1f tok/s (%(x).1f배)"))
            % {"p": prefill, "d": decode, "x": prefill / decode if decode else 0},
        ),
    ]


def _checks_sweep(r: Results) -> list[Check]:
    fits = r.get("fits") or {}
    ttft, decode = fits.get("ttft_vs_input") or {}, fits.get("decode_vs_output") or {}
    tpots = [v for v in (fits.get("tpot_by_input") or {}).values() if v]
    spread = max(tpots) / min(tpots) if tpots and min(tpots) > 0 else None
    return [
        _all_ok(r),
        Check(
            str(_("입력 길이에 대한 TTFT 직선 r² ≥ 0.95")),
            (ttft.get("r2") or 0) >= 0.95 and (ttft.get("slope") or 0) > 0,
            f"r² {ttft.get('r2', 0):.3f}",
        ),
        Check(
            str(_("출력 길이에 대한 디코드 시간 직선 r² ≥ 0.95")),
            (decode.get("r2") or 0) >= 0.95 and (decode.get("slope") or 0) > 0,
            f"r² {decode.get('r2', 0):.3f}",
        ),
        Check(
            str(_("짧은 문맥에서 TPOT는 입력 길이에 거의 무관 (최대/최소 ≤ 1.3)")),
            spread is not None and spread <= 1.3,
            str(_("최대/최소 %(s).2f")) % {"s": spread or 0},
        ),
    ]


def _checks_load(r: Results) -> list[Check]:
    cells = _cells(r)
    first, last = (cells[0], cells[-1]) if cells else ({}, {})
    return [
        _all_ok(r),
        Check(
            str(_("부하를 올리면 처리량이 오름")),
            len(cells) > 1 and last.get("request_throughput", 0) > first.get("request_throughput", 0),
            f"{first.get('request_throughput', 0):.2f} → {last.get('request_throughput', 0):.2f} req/s",
        ),
        Check(
            str(_("부하를 올리면 TPOT가 늘어남")),
            len(cells) > 1 and (last.get("median_tpot_ms") or 0) > (first.get("median_tpot_ms") or 0),
            f"{first.get('median_tpot_ms') or 0:.1f} → {last.get('median_tpot_ms') or 0:.1f} ms",
        ),
        Check(
            str(_("SLO를 지키는 가장 높은 부하를 찾음")),
            r.get("best_level") is not None,
            str(r.get("best_level")),
        ),
    ]


def _checks_retrieval(r: Results) -> list[Check]:
    fits = {size: fit for size, fit in (r.get("fits") or {}).items() if fit}
    tpots = [c["median_tpot_ms"] for c in _cells(r) if c.get("median_tpot_ms")]
    flat = max(tpots) / min(tpots) if tpots and min(tpots) > 0 else None
    return [
        _all_ok(r),
        Check(
            str(_("가져온 토큰이 많을수록 TTFT가 오름")),
            bool(fits) and all(fit["slope"] > 0 for fit in fits.values()),
            ", ".join(f"{size}: {fit['slope']:.2f} ms/tok" for size, fit in fits.items()) or "—",
        ),
        Check(
            str(_("TPOT는 문맥 길이와 거의 무관 (최대/최소 ≤ 1.5)")),
            flat is not None and flat <= 1.5,
            str(_("최대/최소 %(s).2f")) % {"s": flat or 0},
        ),
    ]


def _checks_prefix(r: Results) -> list[Check]:
    by = {c["cell"]: c for c in _cells(r)}
    cold, warm = by.get("cold", {}), by.get("warm", {})
    other, reordered = by.get("other_question", {}), by.get("reordered", {})
    return [
        _all_ok(r),
        Check(
            str(_("웜 요청의 TTFT가 콜드의 절반 이하")),
            bool(cold and warm) and (warm.get("median_ttft_ms") or 0) * 2 <= (cold.get("median_ttft_ms") or 0),
            f"{cold.get('median_ttft_ms') or 0:.0f} → {warm.get('median_ttft_ms') or 0:.0f} ms",
        ),
        Check(
            str(_("웜 요청은 캐시된 토큰이 있고 콜드는 없음")),
            (warm.get("median_cached_tokens") or 0) > 0 and (cold.get("median_cached_tokens") or 0) == 0,
            f"{cold.get('median_cached_tokens') or 0:.0f} / {warm.get('median_cached_tokens') or 0:.0f}",
        ),
        Check(
            str(_("청크 순서를 바꾸면 캐시를 더 쓰지 못함")),
            bool(other and reordered)
            and (reordered.get("median_cached_tokens") or 0) <= (other.get("median_cached_tokens") or 0),
            f"{other.get('median_cached_tokens') or 0:.0f} → {reordered.get('median_cached_tokens') or 0:.0f}",
        ),
    ]


def _checks_short(r: Results) -> list[Check]:
    by = {c["cell"]: c for c in _cells(r)}
    normal, capped = by.get("normal", {}), by.get("brief_cap", {})
    return [
        _all_ok(r),
        Check(
            str(_("지시와 상한으로 출력 토큰이 줄어듦")),
            bool(normal and capped)
            and (capped.get("median_output_tokens") or 0) < (normal.get("median_output_tokens") or 0),
            f"{normal.get('median_output_tokens') or 0:.0f} → {capped.get('median_output_tokens') or 0:.0f}",
        ),
        Check(
            str(_("전체 시간이 줄어듦")),
            (r.get("time_saved_pct") or 0) > 0,
            f"{r.get('time_saved_pct') or 0:.0f}%",
        ),
        Check(
            str(_("짧은 답도 근거를 잃지 않음 (근거 포함률 하락 ≤ 0.3)")),
            bool(normal and capped)
            and (capped.get("answer_coverage") or 0) >= (normal.get("answer_coverage") or 0) - 0.3,
            f"{normal.get('answer_coverage') or 0:.2f} → {capped.get('answer_coverage') or 0:.2f}",
        ),
    ]


def _key_numbers(r: Results, keys: Iterable[tuple[str, str]]) -> dict[str, Any]:
    out = {}
    for label, path in keys:
        value: Any = r
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[label] = value
    return out


@dataclass(frozen=True)
class Lab:
    number: int
    slug: str  # the chapter section with the lab's prose
    job_kind: str
    title: Any
    checks: Callable[[Results], list[Check]]
    keys: tuple[tuple[str, str], ...]  # (label, dotted path into the job's results)
    config: dict[str, Any] = field(default_factory=dict)  # the run button's settings (the job form has all)

    def key_numbers(self, results: Results) -> dict[str, Any]:
        return _key_numbers(results, self.keys)


LABS: dict[int, Lab] = {
    lab.number: lab
    for lab in (
        Lab(1, "lab1-speed", "speed", _("실습 1 — 프리필·디코드 속도 재기"), _checks_speed,
            (("prefill tok/s", "prefill_speed"), ("decode tok/s", "decode_speed"),
             ("estimate error %", "check.error_pct")),
            {"repeats": 1}),
        Lab(2, "lab2-length-sweep", "sweep", _("실습 2 — 길이 스윕"), _checks_sweep,
            (("prefill tok/s", "fits.prefill_speed"), ("TPOT ms", "fits.tpot_ms"),
             ("TTFT r²", "fits.ttft_vs_input.r2"))),
        Lab(3, "lab3-load", "load", _("실습 3 — 부하 아래의 서빙"), _checks_load,
            (("best level", "best_level"), ("peak tok/s", "peak_output_throughput"))),
        Lab(4, "lab4-rag-retrieval", "retrieval", _("실습 4 — 검색 크기와 지연"), _checks_retrieval,
            (("ms/token (500)", "fits.500.slope"), ("ms/token (1000)", "fits.1000.slope")),
            {"questions": "1", "max_tokens": "8"}),
        Lab(5, "lab5-prefix-caching", "prefix", _("실습 5 — 프리픽스 캐싱"), _checks_prefix,
            (("warm speed-up", "warm_speedup"), ("cache reset", "cache_reset"))),
        Lab(6, "lab6-short-answers", "short", _("실습 6 — 짧게 답하게 하기"), _checks_short,
            (("time saved %", "time_saved_pct"),)),
    )
}  # fmt: skip


class Status:
    NOT_STARTED = "not_started"
    IN_PROGRESS = "in_progress"
    PASSED = "passed"
    SUBMITTED = "submitted"

    LABELS = {
        NOT_STARTED: _("시작 전"),
        IN_PROGRESS: _("진행 중"),
        PASSED: _("확인 통과"),
        SUBMITTED: _("제출함"),
    }


@dataclass
class LabState:
    lab: Lab
    status: str = Status.NOT_STARTED
    job: Any = None  # the latest job of the lab's kind (any status)
    checked_job: Any = None  # the latest finished job, whose checks are shown
    checks: list[Check] = field(default_factory=list)
    submission: Any = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def status_label(self) -> Any:
        return Status.LABELS[self.status]

    @property
    def key_numbers(self) -> dict[str, Any]:
        if self.submission is not None and self.submission.key_numbers:
            return dict(self.submission.key_numbers)
        return self.lab.key_numbers(self.checked_job.results) if self.checked_job else {}


def states_for(user_ids: Iterable[int], labs: Iterable[int] = tuple(LABS)) -> dict[tuple[int, int], LabState]:
    """Every (user, lab) state in three queries, however many learners (the gradebook's need)."""
    from bench.models import BenchJob
    from labapp.models import LabSubmission

    ids, numbers = list(user_ids), list(labs)
    kinds = {LABS[n].job_kind: n for n in numbers}
    latest: dict[tuple[int, int], Any] = {}
    finished: dict[tuple[int, int], Any] = {}
    jobs = BenchJob.objects.filter(owner_id__in=ids, kind__in=kinds).order_by("owner_id", "kind", "-pk")
    for job in jobs.only("pk", "owner_id", "kind", "status", "results", "done_requests", "total_requests"):
        key = (job.owner_id, kinds[job.kind])
        latest.setdefault(key, job)
        if job.status == BenchJob.Status.DONE:
            finished.setdefault(key, job)
    submissions = {(s.user_id, s.lab): s for s in LabSubmission.objects.filter(user_id__in=ids, lab__in=numbers)}
    states = {}
    for user_id in ids:
        for number in numbers:
            key = (user_id, number)
            state = LabState(LABS[number], job=latest.get(key), checked_job=finished.get(key))
            state.submission = submissions.get(key)
            if state.checked_job is not None:
                state.checks = state.lab.checks(state.checked_job.results or {})
            if state.submission is not None:
                state.status = Status.SUBMITTED
            elif state.passed:
                state.status = Status.PASSED
            elif state.job is not None:
                state.status = Status.IN_PROGRESS
            states[key] = state
    return states


def state_for(user_id: int, number: int) -> LabState:
    return states_for([user_id], [number])[(user_id, number)]
