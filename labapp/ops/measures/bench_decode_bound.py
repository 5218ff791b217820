"""Decode speed against the memory-bandwidth bound.

Each decode step reads every weight of the model once (the chapter's point: decode is
memory-bound), so TPOT can be no lower than (bytes of weights) / (memory bandwidth).
This measures the machine's read bandwidth with NumPy (one reader per core, arrays far
larger than the caches), counts the served model's weight bytes from its safetensors
header at the engine's dtype, measures TPOT on the engine, and prints measured / bound.

    python manage.py bench_decode_bound [--model-dir data/models/gemma-3-270m] [--dtype float32]
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import runner
from bench.metrics import summarize
from labapp.ops.report import emit
from labapp.ops.stack import components
from rag.vllm import client as vllm_client

BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def weight_count(model_dir: Path) -> int:
    """Parameters in every *.safetensors file of a model folder (read from the headers only)."""
    total = 0
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CommandError(f"no *.safetensors in {model_dir}")
    for path in files:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header: dict[str, Any] = json.loads(handle.read(length))
        for name, tensor in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in tensor["shape"]:
                count *= int(dim)
            total += count
    return total


def read_bandwidth(mib_per_reader: int = 512, readers: int | None = None, rounds: int = 5) -> float:
    """Bytes per second that ``readers`` threads reading their own large arrays reach together (best round)."""
    readers = readers or os.cpu_count() or 1
    arrays = [np.ones(mib_per_reader * 1024 * 1024 // 8) for _ in range(readers)]
    best = 0.0
    for _ in range(rounds):
        barrier = threading.Barrier(readers + 1)

        def read(array: Any, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            array.sum()  # NumPy releases the GIL: the readers really run side by side

        threads = [threading.Thread(target=read, args=(a,)) for a in arrays]
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        best = max(best, sum(a.nbytes for a in arrays) / elapsed)
    return best


class Command(BaseCommand):
    help = "Measured TPOT against the memory-bandwidth bound (weight bytes / read bandwidth)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model-dir", type=Path, help="the served model's folder (default: the embedded model)")
        parser.add_argument("--dtype", default="", help="the engine's dtype (default: what the embedded engine uses)")
        parser.add_argument("--output-tokens", type=int, default=64)
        parser.add_argument("--repeats", type=int, default=3)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:

        model_dir = options["model_dir"] or components.embedded_model_dir()
        dtype = options["dtype"] or components.engine_dtype(components.has_nvidia_gpu())
        if dtype not in DTYPE_BYTES:
            raise CommandError(f"--dtype must be one of {', '.join(DTYPE_BYTES)}")
        params = weight_count(Path(model_dir))
        weight_bytes = params * DTYPE_BYTES[dtype]
        bandwidth = read_bandwidth()
        bound_ms = 1000 * weight_bytes / bandwidth
        base = vllm_client.base_url()
        try:
            model = asyncio.run(vllm_client.engine_model(base))
        except vllm_client.EngineUnavailable as exc:
            raise CommandError(str(exc)) from exc
        specs = [
            runner.RequestSpec(prompt=f"decode bound {i} {time.time()}", max_tokens=options["output_tokens"])
            for i in range(options["repeats"])
        ]
        result = asyncio.run(
            runner.run(specs, base_url=base, model=model, shape=runner.LoadShape(concurrency=1),
                       warmup=[runner.RequestSpec(prompt="warm-up", max_tokens=4)])
        )  # fmt: skip
        summary = summarize(result.records, duration=result.duration)
        if not summary["completed"]:
            raise CommandError(f"no request finished: {[r.error for r in result.records]}")
        tpot = summary["median_tpot_ms"]
        report = {
            "model_dir": str(model_dir),
            "parameters": params,
            "dtype": dtype,
            "weight_bytes": weight_bytes,
            "read_bandwidth_gb_s": bandwidth / 1e9,
            "bound_tpot_ms": bound_ms,
            "measured_tpot_ms": tpot,
            "ratio": tpot / bound_ms if bound_ms else None,
        }

        def text_lines() -> Iterator[str]:
            yield (
                f"model: {params / 1e6:.0f} M parameters × {DTYPE_BYTES[dtype]} bytes ({dtype}) = "
                f"{weight_bytes / 1e9:.2f} GB read per token\n"
                f"memory read bandwidth ({os.cpu_count()} readers, NumPy): {bandwidth / 1e9:.1f} GB/s\n"
                f"bound: TPOT ≥ {bound_ms:.1f} ms; measured median TPOT {tpot:.1f} ms → "
                f"measured / bound = {tpot / bound_ms:.2f}"
            )

        emit(self.stdout, report, json_wanted=options["json"], lines=text_lines)
