"""A lab's auto-checks and key numbers: pure functions of a job's results (``BenchJob.results``).

Each kind module writes its lab's checks with these, so the lab page, the gradebook
and the tests agree on what "passed" means.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.utils.translation import gettext as _

Results = dict[str, Any]


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str

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


def key_numbers(results: Results, keys: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """{label: the value at its dotted path in the results (None when missing)}."""
    out = {}
    for label, path in keys:
        value: Any = results
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[label] = value
    return out
