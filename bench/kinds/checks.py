"""A lab's auto-checks and key numbers: pure functions of a job's results (``BenchJob.results``)
and, for the minimum settings, of its config.

Each kind module writes its lab's checks with these, so the lab page, the gradebook
and the tests agree on what "passed" means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from labapp import said
from labapp.said import gettext as _

Results = dict[str, Any]


@dataclass(frozen=True)
class Check:
    """One auto-check: its name, whether it passed, what was seen, and (when it failed) ``advice``:
    why in the learner's words and what to do (e.g. run again on a quiet machine)."""

    name: str
    passed: bool
    message: str
    advice: str = ""
    applies: bool = True  # False: what it compares is not there to judge (shown as "해당 없음", not counted)

    @property
    def failed(self) -> bool:
        return self.applies and not self.passed

    def as_dict(self) -> dict[str, Any]:
        """As a hand-in keeps it: the texts as ``labapp.said`` stores them (msgids and values), so that
        ``stored_check`` says them again in the reader's language."""
        texts = {key: said.stored(getattr(self, key)) for key in ("name", "message", "advice")}
        return asdict(self) | texts


STALL_MS = 250.0  # a gap between tokens this long (and 4x the cell's median) is the CPU taken away, not decode


def stalls(results: Results) -> tuple[int, float]:
    """(how many gaps between tokens were stalls, the longest in ms) over every stored request: the trace
    another program leaves on a 2-core machine (a decode step takes tens of ms; a stall, hundreds)."""
    count, longest = 0, 0.0
    for cell in results.get("cells", []):
        typical = cell.get("median_itl_ms") or 0.0
        for row in cell.get("requests") or []:
            for gap in row.get("itl") or []:
                ms = gap * 1000
                if ms >= STALL_MS and ms >= 4 * typical:
                    count, longest = count + 1, max(longest, ms)
    return count, longest


def noise_advice(results: Results | None = None) -> str:
    """Why a timing check fails on a correct run: something else used the CPU while it was measured
    (with the stalls seen in ``results``, when there were any)."""
    advice = _(
        "다른 프로그램이 CPU를 쓰는 동안 잰 것 같습니다. 이 실습 탭 말고 다른 탭과 프로그램을 닫고 다시 실행하세요."
    )
    count, longest = stalls(results or {})
    if count:
        seen = _("측정 중 토큰 사이가 %(n)d번 멈췄습니다 (가장 길게 %(ms).0f ms).") % {"n": count, "ms": longest}
        advice = seen + " " + advice
    return advice


def rerun_advice() -> str:
    return _("실행 버튼의 기본 설정으로 다시 실행해 보세요.")


def all_passed(checks: Iterable[Check]) -> bool:
    """Every check that applies passed, and at least one applies."""
    counted = [c for c in checks if c.applies]
    return bool(counted) and all(c.passed for c in counted)


def not_applicable(name: str, why: str) -> Check:
    """A check with nothing to judge in this run: shown with ``why``, counted neither way."""
    return Check(name, False, str(_("해당 없음: %(why)s") % {"why": why}), applies=False)


def done_cells(results: Results) -> list[dict[str, Any]]:
    """The cells with at least one completed request."""
    return [c for c in results.get("cells", []) if c.get("completed")]


def all_ok(results: Results) -> Check:
    failed = sum(c.get("failed", 0) for c in results.get("cells", []))
    passed = failed == 0 and bool(done_cells(results))
    errors = [e for c in results.get("cells", []) for e in c.get("errors") or []]
    message = _("실패한 요청 %(n)d개") % {"n": failed} if failed else _("실패 없음")
    if errors:
        message += _(" (첫 오류: %(error)s)") % {"error": str(errors[0])[:200]}
    advice = _("엔진이 요청에 답하지 못했습니다. 상태 페이지에서 엔진이 켜져 있는지 확인한 뒤 다시 실행하세요.")
    return Check(_("모든 요청 성공"), passed, message, "" if passed else advice)


def settings_check(missing: list[str]) -> Check:
    """Every lab's check that the run's settings meet its minimums; ``missing`` names what they lack."""
    return Check(
        _("설정이 실습의 최소 조건을 만족"),
        not missing,
        _("부족: %(what)s") % {"what": said.join("; ", missing)} if missing else _("최소 조건을 모두 만족"),
        _("부족한 설정을 채우거나 실행 버튼의 기본 설정으로 다시 실행하세요.") if missing else "",
    )


def disturbed_cells(results: Results, name: Callable[[dict[str, Any]], str]) -> list[tuple[str, float]]:
    """(``name`` of the cell, most requests beyond its own) of each cell marked ``disturbed``."""
    return [(name(c), c.get("extra_requests") or 0) for c in results.get("cells", []) if c.get("disturbed")]


def undisturbed(results: Results) -> Check:
    """Every lab's check that no other traffic ran on the engine while a cell was measured.

    A cell is ``disturbed`` when the engine held more requests than the cell's own
    (``cells.watched_cell``); a cell without that mark could not be checked (no /metrics),
    which fails as well: the check says only what it saw.
    """
    cells = results.get("cells", [])
    disturbed = [c for c in cells if c.get("disturbed")]
    unknown = [c for c in cells if c.get("disturbed") is None]
    if disturbed:
        most = max(c.get("extra_requests") or 0 for c in disturbed)
        message = _("%(n)d칸을 재는 동안 다른 요청이 엔진에서 실행됨 (최대 %(extra)d개 더)") % {
            "n": len(disturbed),
            "extra": most,
        }
    elif unknown:
        message = _("%(n)d칸은 엔진의 /metrics를 읽지 못해 확인하지 못함") % {"n": len(unknown)}
    elif not cells:
        message = _("잰 칸이 없음")
    else:
        message = _("잰 칸 %(n)d개 모두 다른 요청 없이 잼") % {"n": len(cells)}
    passed = bool(cells) and not disturbed and not unknown
    if passed:
        advice = ""
    elif disturbed:
        advice = _(
            "같은 엔진에 다른 요청(다른 탭의 채팅이나 실행, 같은 엔진을 쓰는 다른 사람)이 함께 돌았습니다. "
            "그것이 끝난 뒤 다시 실행하세요."
        )
    else:
        advice = _("엔진의 /metrics를 읽지 못했습니다. 엔진이 켜져 있는지 확인하고 다시 실행하세요.")
    return Check(_("측정 중 다른 트래픽 없음"), passed, message, advice)


def key_numbers(results: Results, keys: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """{label: the value at its dotted path in the results (None when missing)}."""
    out = {}
    for label, path in keys:
        value: Any = results
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[label] = value
    return out


def key_intervals(results: Results, keys: Iterable[tuple[str, str]]) -> dict[str, list[float]]:
    """{label: the 95 % interval stored beside its key number (``<path>_ci``)} for the key numbers that have one."""
    found = key_numbers(results, [(label, f"{path}_ci") for label, path in keys])
    return {label: value for label, value in found.items() if isinstance(value, list) and len(value) == 2}
