"""The one writer of the tooling's reports: a command's JSON or text, aligned tables and saved files.

Every measurement command prints through ``emit``: with ``--json`` its whole report as JSON
(what ``make perf`` reads back), else its lines. ``make perf`` writes its table with
``markdown`` and ``save``; the load test prints ``aligned`` rows; ``lab_reliability --save``
keeps each run with ``save_json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol


class Out(Protocol):
    def write(self, text: str, /) -> Any: ...


def as_json(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, default=str)


def emit(out: Out, data: Any, *, json_wanted: bool, lines: Callable[[], Iterable[str]]) -> None:
    """``data`` as JSON when ``--json`` asked for it, else the text ``lines`` makes (made only then)."""
    out.write(as_json(data) if json_wanted else "\n".join(lines()))


def aligned(rows: Sequence[tuple[str, str]]) -> str:
    """Two columns, the labels padded to the longest."""
    width = max((len(label) for label, _value in rows), default=0)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]], *, code_last: bool = False) -> str:
    """A Markdown table; ``code_last`` sets the last column (a command line) in backticks."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [*row[:-1], f"`{row[-1]}`"] if code_last else list(row)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save(path: Path, text: str) -> Path:
    """``text`` (and a final newline) in ``path``, its folders made as needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")
    return path


def save_json(path: Path, data: Any) -> Path:
    return save(path, as_json(data))
