"""Other tools' benchmark results read into the lab: one module per tool, in a registry.

Importing this package registers the built-in importers (``vllm_bench_serve``, ``guidellm``,
``aiperf``); ``registry.read(data)`` finds the one that recognises a file and reads it, and
``registry.read_together(files)`` reads one file the same way or the files of one run a tool split
(AIPerf's two) into that one run.
"""

from __future__ import annotations

from bench.imports import aiperf, guidellm, registry, vllm_bench_serve
from bench.imports.result import Imported, NotImportable, Sample

BUILT_IN = (vllm_bench_serve.IMPORTER, guidellm.IMPORTER, aiperf.IMPORTER)

__all__ = ["BUILT_IN", "Imported", "NotImportable", "Sample", "registry"]
