"""A lab's auto-checks and key numbers: pure functions of a job's results (``BenchJob.results``)
and, for the minimum settings, of its config.

Each kind module writes its lab's checks with these, so the lab page, the gradebook
and the tests agree on what "passed" means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

Results = dict[str, Any]


@dataclass(frozen=True)
class Check:
    """One auto-check: its name, whether it passed, what was seen, and (when it failed) ``advice``:
    why in the learner's words and what to do (e.g. run again on a quiet machine)."""

    name: str
    passed: bool
    message: str
    advice: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def done_cells(results: Results) -> list[dict[str, Any]]:
    """The cells with at least one completed request."""
    return [c for c in results.get("cells", []) if c.get("completed")]


def all_ok(results: Results) -> Check:
    failed = sum(c.get("failed", 0) for c in results.get("cells", []))
    return Check(
        _("모든 요청 성공"),
        failed == 0 and bool(done_cells(results)),
        _("실패한 요청 %(n)d개") % {"n": failed} if failed else _("실패 없음"),
    )


def settings_check(missing: list[str]) -> Check:
    """Every lab's check that the run's settings meet its minimums; ``missing`` names what they lack."""
    return Check(
        _("설정이 실습의 최소 조건을 만족"),
        not missing,
        _("부족: %(what)s") % {"what": "; ".join(missing)} if missing else _("최소 조건을 모두 만족"),
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
    return Check(_("측정 중 다른 트래픽 없음"), bool(cells) and not disturbed and not unknown, message)


def key_numbers(results: Results, keys: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """{label: the value at its dotted path in the results (None when missing)}."""
    out = {}
    for label, path in keys:
        value: Any = results
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[label] = value
    return out


# A key number is stored under a stable English key (hand-ins and CSV columns keep it);
# its label is what a reader sees, in the reader's language.
KEY_LABELS: dict[str, str | Promise] = {
    "prefill tok/s": gettext_lazy("프리필 속도 (tok/s)"),
    "decode tok/s": gettext_lazy("디코드 속도 (tok/s)"),
    "estimate error %": gettext_lazy("추정 오차 (%)"),
    "TPOT ms": gettext_lazy("TPOT (ms)"),
    "TTFT r²": gettext_lazy("TTFT 직선 r²"),
    "best level": gettext_lazy("가장 좋은 수준"),
    "peak tok/s": gettext_lazy("최대 처리량 (tok/s)"),
    "ms/token (500)": gettext_lazy("토큰당 TTFT 증가 ms (500자 청크)"),
    "ms/token (1000)": gettext_lazy("토큰당 TTFT 증가 ms (1000자 청크)"),
    "warm speed-up": gettext_lazy("캐시 적중 시 빨라진 배수"),
    "cache reset": gettext_lazy("캐시 초기화"),
    "time saved %": gettext_lazy("줄어든 시간 (%)"),
}


def key_label(key: str) -> str:
    """What a reader sees for a stored key number (the key itself when it has no label)."""
    return str(KEY_LABELS.get(key, key))
