"""Another tool's run read from its file (``bench.imports``): a job that was never run here.

An imported run is a ``BenchJob`` of this kind, owned by whoever uploaded the file, done from
the start and never runnable (``runnable=False``: no form, command or worker offers it). Its
results hold one cell (``bench.imports.result.Imported.cell``) and, under ``imported``, the
tool, where the file says the run came from (``source``), what the file lacks (``missing``)
and the tool's own aggregates (``run``). Pages name it after its tool and version, and after its
strategy when the file names one (a GuideLLM sweep holds one run per strategy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy

from bench.kinds import registry
from labapp.said import gettext as _


@dataclass(frozen=True)
class ImportedConfig:
    """No settings: what the tool was asked to do is in the results' ``imported.source``."""

    seed: int = 0

    @property
    def total_requests(self) -> int:
        return 0

    def longest_requests(self) -> list[tuple[str, int]]:
        return []


async def measure(config: ImportedConfig, **_ignored: Any) -> tuple[dict[str, Any], bool]:
    raise RuntimeError("an imported run is read from a file, never measured")


def tool_words(results: dict[str, Any]) -> str:
    """The tool and, when the file states it, its version: "vllm bench serve 0.32.0"."""
    found = results.get("imported") or {}
    source = found.get("source") or {}
    tool = str(source.get("tool") or found.get("tool") or "?")
    return f"{tool} {source['version']}" if source.get("version") else tool


def job_label(results: dict[str, Any]) -> str:
    strategy = ((results.get("imported") or {}).get("source") or {}).get("strategy")
    if strategy:  # the tool's own name for how it loaded the server, e.g. GuideLLM's "constant@18.41"
        return _("가져온 결과 (%(tool)s, %(strategy)s)") % {"tool": tool_words(results), "strategy": strategy}
    return _("가져온 결과 (%(tool)s)") % {"tool": tool_words(results)}


KIND = registry.register(
    registry.JobKind(
        name="imported",
        label=gettext_lazy("가져온 결과"),
        config_type=ImportedConfig,
        fields=(),
        measure=measure,
        summary_template="bench/kinds/imported.html",
        sequential=False,
        runnable=False,
        deletable=True,  # a copy of a file the owner still has: theirs to remove
        job_label=job_label,
    )
)
