"""What each benchmark job measures (async, no database): today the speed probe of Lab 1.

A job reports progress after every request through ``progress``; when that
returns False the job stops and returns what it measured so far.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from django.utils.translation import gettext as _

from bench import configs, runner
from bench.estimator import gen_seconds
from bench.metrics import SLO, summarize
from bench.workloads import nonce_line, rag_prompts, rag_questions, shared_prefix_prompts, synthetic_prompts
from rag.chunking import CHUNK_SIZES
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

Progress = Callable[[int, int, str], Awaitable[bool]]  # done, total, current cell -> keep going?

# Set by whoever runs a job to see its cells as they finish (the job row saves them, so a page
# can draw a chart while the job still runs); unset, finished cells are only returned at the end.
PARTIAL: ContextVar[Callable[[dict[str, Any]], Awaitable[None]] | None] = ContextVar("partial", default=None)


async def report_partial(results: dict[str, Any]) -> None:
    hook = PARTIAL.get()
    if hook is not None:
        await hook(results)


# The chapter's estimator table, then an unseen shape to check the estimate against.
SPEED_SHAPES: tuple[tuple[int, int], ...] = ((100, 50), (1500, 50), (100, 500))
CHECK_SHAPE = (800, 100)


@dataclass(frozen=True)
class SpeedConfig:
    repeats: int = 2
    shapes: tuple[tuple[int, int], ...] = SPEED_SHAPES
    check: tuple[int, int] = CHECK_SHAPE
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.repeats * (len(self.shapes) + 1)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cell_summary(input_tokens: int, output_tokens: int, records: list[RequestRecord]) -> dict[str, Any]:
    """One cell's medians, speeds per METRICS.md, and its requests (CSV-ready rows)."""
    ok = [r for r in records if r.success]
    duration = sum((r.e2el or 0) for r in ok)
    summary = summarize(records, duration=duration)
    prefill = [r.prefill_speed for r in ok if r.prefill_speed]
    decode = [r.decode_speed for r in ok if r.decode_speed]
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "completed": summary["completed"],
        "failed": summary["failed"],
        "errors": [r.error for r in records if r.error],
        "median_ttft_ms": summary["median_ttft_ms"],
        "median_tpot_ms": summary["median_tpot_ms"],
        "median_e2el_ms": summary["median_e2el_ms"],
        "median_decode_ms": _median([(r.decode_time or 0) * 1000 for r in ok]),
        "median_prompt_tokens": _median([float(r.prompt_tokens or 0) for r in ok]),
        "median_cached_tokens": _median([float(r.cached_tokens or 0) for r in ok]),
        "median_server_prefill_ms": _median([r.prefill_time_server * 1000 for r in ok if r.prefill_time_server]),
        "median_server_queue_ms": _median([r.queue_time_server * 1000 for r in ok if r.queue_time_server is not None]),
        "prefill_speed": _median(prefill),
        "decode_speed": _median(decode),
        "requests": [request_row(r) for r in records],
    }


@dataclass
class SpeedResult:
    cells: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False

    def as_dict(self) -> dict[str, Any]:
        cells = [c for c in self.cells if c["completed"]]
        long_input = max(cells, key=lambda c: c["input_tokens"] / c["output_tokens"], default=None)
        long_output = max(cells, key=lambda c: c["output_tokens"] / c["input_tokens"], default=None)
        prefill_speed = long_input["prefill_speed"] if long_input else None
        decode_speed = long_output["decode_speed"] if long_output else None
        check = None
        checked = [c for c in cells if c.get("check")]
        if checked and prefill_speed and decode_speed:
            cell = checked[0]
            prefill_s, decode_s = gen_seconds(cell["input_tokens"], cell["output_tokens"], prefill_speed, decode_speed)
            measured = (cell["median_e2el_ms"] or 0) / 1000
            check = {
                "input_tokens": cell["input_tokens"],
                "output_tokens": cell["output_tokens"],
                "estimate_s": round(prefill_s + decode_s, 3),
                "measured_s": round(measured, 3),
                "error_pct": round(100 * abs(prefill_s + decode_s - measured) / measured, 1) if measured else None,
            }
        return {
            "cells": self.cells,
            "prefill_speed": prefill_speed,
            "decode_speed": decode_speed,
            "check": check,
            "cancelled": self.cancelled,
        }


@dataclass(frozen=True)
class Cell:
    input_tokens: int
    output_tokens: int
    tags: tuple[tuple[str, Any], ...] = ()  # e.g. (("check", True),) or (("sweep", "input"),)

    @property
    def label(self) -> str:
        extra = "".join(f" ({value if isinstance(value, str) else key})" for key, value in self.tags if value)
        return f"{self.input_tokens} in / {self.output_tokens} out{extra}"


@contextlib.contextmanager
def keeps_partial(build: Callable[[], dict[str, Any]]) -> Iterator[None]:
    """If the block raises, the exception carries what was measured so far as
    ``partial_results`` (the job then fails with its reason and keeps those cells)."""
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, "partial_results"):
            with contextlib.suppress(Exception):
                exc.partial_results = build()  # type: ignore[attr-defined]
        raise


async def warm_up(*, base_url: str, model: str, seed: int) -> None:
    """One short request, not measured: the first request after a quiet engine is slow."""
    warm = runner.RequestSpec(prompt=f"warm-up {seed}", max_tokens=4)
    await runner.run([], base_url=base_url, model=model, shape=runner.LoadShape(concurrency=1), warmup=[warm])


async def measure_cells(
    cells: list[Cell], *, repeats: int, seed: int, base_url: str, model: str, progress: Progress
) -> SpeedResult:
    """Each cell ``repeats`` times, one request at a time, token-exact prompts with unique openings."""
    result = SpeedResult()
    total = repeats * len(cells)
    done = 0
    with keeps_partial(lambda: result.as_dict()):
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            await warm_up(base_url=base_url, model=model, seed=seed)
            for number, cell in enumerate(cells):
                if not await progress(done, total, cell.label):
                    result.cancelled = True
                    return result
                prompts = await synthetic_prompts(
                    repeats, cell.input_tokens, seed=seed * 100 + number, model=model, client=http
                )
                records: list[RequestRecord] = []
                async with server_metrics.watched(http) as server:
                    for prompt in prompts:
                        spec = runner.RequestSpec(prompt=prompt, max_tokens=cell.output_tokens)
                        shape = runner.LoadShape(concurrency=1)
                        run = await runner.run([spec], base_url=base_url, model=model, shape=shape)
                        records += run.records
                        done += 1
                        if not await progress(done, total, cell.label):
                            result.cancelled = True
                            break
                summary = cell_summary(cell.input_tokens, cell.output_tokens, records)
                result.cells.append(summary | dict(cell.tags) | {"server": server})
                await report_partial({"cells": result.cells, "partial": True})
                if result.cancelled:
                    return result
    return result


async def speed_probe(config: SpeedConfig, *, base_url: str, model: str, progress: Progress) -> SpeedResult:
    """Lab 1: the estimator table's shapes, then the unseen check shape."""
    cells = [Cell(i, o, (("check", False),)) for i, o in config.shapes] + [Cell(*config.check, (("check", True),))]
    return await measure_cells(
        cells, repeats=config.repeats, seed=config.seed, base_url=base_url, model=model, progress=progress
    )


# --- Lab 2: length sweeps ---------------------------------------------------------------


@dataclass(frozen=True)
class SweepConfig:
    repeats: int = 1
    input_lengths: tuple[int, ...] = (100, 400, 800, 1600)
    fixed_output: int = 16
    output_lengths: tuple[int, ...] = (16, 64, 128, 256)
    fixed_input: int = 100
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.repeats * (len(self.input_lengths) + len(self.output_lengths))


def line_fit(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least-squares line y = slope·x + intercept and its r²; None with fewer than two x values."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for y in ys)
    residual = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    return {"slope": slope, "intercept": intercept, "r2": 1.0 - residual / total if total else 1.0}


def sweep_fits(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """TTFT against input length (slope = 1/prefill speed) and decode time against output length (slope = TPOT)."""
    inputs = [c for c in cells if c.get("sweep") == "input" and c["completed"]]
    outputs = [c for c in cells if c.get("sweep") == "output" and c["completed"]]
    ttft = line_fit([c["input_tokens"] for c in inputs], [c["median_ttft_ms"] for c in inputs])
    decode = line_fit([c["output_tokens"] - 1 for c in outputs], [c["median_decode_ms"] or 0 for c in outputs])
    return {
        "ttft_vs_input": ttft,
        "decode_vs_output": decode,
        "prefill_speed": 1000 / ttft["slope"] if ttft and ttft["slope"] > 0 else None,
        "tpot_ms": decode["slope"] if decode else None,
        # Short contexts: decode per token hardly changes with the input length.
        "tpot_by_input": {str(c["input_tokens"]): c["median_tpot_ms"] for c in inputs},
    }


async def length_sweep(config: SweepConfig, *, base_url: str, model: str, progress: Progress) -> SpeedResult:
    cells = [Cell(i, config.fixed_output, (("sweep", "input"),)) for i in config.input_lengths]
    cells += [Cell(config.fixed_input, o, (("sweep", "output"),)) for o in config.output_lengths]
    return await measure_cells(
        cells, repeats=config.repeats, seed=config.seed, base_url=base_url, model=model, progress=progress
    )


# --- Lab 3: serving under load ----------------------------------------------------------


WORKLOADS = ("synthetic", "shared_prefix", "rag", "custom")


@dataclass(frozen=True)
class LoadConfig:
    repeats: int = 1  # requests per level = repeats × 8 (custom: every prompt of the file, once)
    mode: str = "concurrency"  # or "rate": requests per second with gamma gaps
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    rates: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    burstiness: float = 1.0
    input_tokens: int = 256
    output_tokens: int = 32
    slo_ttft_ms: float = 3000.0
    slo_tpot_ms: float = 200.0
    seed: int = 0
    meets_share: float = 0.9  # a level "meets the SLO" when this share of its requests do
    workload: str = "synthetic"
    prefixes: int = 2  # shared_prefix: this many openings of prefix_tokens, input_tokens of unique tail each
    prefix_tokens: int = 512
    top_k: int = 3  # rag: the evaluation questions with this retrieval setting
    chunk_size: int = 500
    custom: tuple[configs.CustomPrompt, ...] = ()

    @property
    def levels(self) -> tuple[float, ...]:
        return tuple(self.concurrencies) if self.mode == "concurrency" else tuple(self.rates)

    @property
    def per_level(self) -> int:
        return len(self.custom) if self.workload == "custom" else 8 * self.repeats

    @property
    def total_requests(self) -> int:
        return self.per_level * len(self.levels)

    def level_label(self, level: float) -> str:
        return f"concurrency {level:g}" if self.mode == "concurrency" else f"rate {level:g} req/s"

    def shape(self, level: float, number: int) -> runner.LoadShape:
        if self.mode == "concurrency":
            return runner.LoadShape(concurrency=int(level))
        return runner.LoadShape(request_rate=level, burstiness=self.burstiness, seed=self.seed * 100 + number)


async def load_specs(
    config: LoadConfig, number: int, *, model: str, http: httpx.AsyncClient
) -> list[runner.RequestSpec]:
    """One level's requests, fresh for each level so no level reuses another's cached prompts."""
    seed = config.seed * 100 + number
    out = config.output_tokens
    if config.workload == "shared_prefix":
        per_prefix = -(-config.per_level // config.prefixes)
        pairs = await shared_prefix_prompts(
            config.prefixes,
            per_prefix,
            prefix_tokens=config.prefix_tokens,
            suffix_tokens=config.input_tokens,
            seed=seed,
            model=model,
            client=http,
        )
        # The level number goes first so that each level starts cold; prefixes repeat within it.
        return [runner.RequestSpec(prompt=nonce_line(seed) + p, max_tokens=out) for _, p in pairs[: config.per_level]]
    if config.workload == "rag":
        questions = rag_questions(config.per_level, seed=config.seed)
        rag = await sync_to_async(rag_prompts, thread_sensitive=False)(
            questions, top_k=config.top_k, chunk_size=config.chunk_size
        )
        texts = [rag[i % len(rag)].text for i in range(config.per_level)]
        return [runner.RequestSpec(prompt=nonce_line(seed, i) + t, max_tokens=out) for i, t in enumerate(texts)]
    if config.workload == "custom":
        return [
            runner.RequestSpec(prompt=nonce_line(seed, i) + c.prompt, max_tokens=c.max_tokens or out)
            for i, c in enumerate(config.custom)
        ]
    prompts = await synthetic_prompts(config.per_level, config.input_tokens, seed=seed, model=model, client=http)
    return [runner.RequestSpec(prompt=p, max_tokens=out) for p in prompts]


async def load_sweep(config: LoadConfig, *, base_url: str, model: str, progress: Progress) -> SpeedResult:
    """Each load level in turn with fresh prompts; a cancel takes effect between levels."""
    result = SpeedResult()
    slo = SLO(ttft_ms=config.slo_ttft_ms, tpot_ms=config.slo_tpot_ms)
    done = 0
    with keeps_partial(lambda: {"cells": result.cells, "cancelled": False} | load_summary(result.cells, config)):
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            await warm_up(base_url=base_url, model=model, seed=config.seed)
            for number, level in enumerate(config.levels):
                label = config.level_label(level)
                if not await progress(done, config.total_requests, label):
                    result.cancelled = True
                    return result
                specs = await load_specs(config, number, model=model, http=http)
                base_done = done

                async def on_done(
                    finished: int, total: int, record: RequestRecord, base_done: int = base_done, label: str = label
                ) -> None:
                    await progress(base_done + finished, config.total_requests, label)

                async with server_metrics.watched(http) as server:
                    run = await runner.run(
                        specs, base_url=base_url, model=model, shape=config.shape(level, number), on_done=on_done
                    )
                done += len(specs)
                summary = summarize(
                    run.records, duration=run.duration, slo=slo, max_concurrent_requests=run.max_concurrent
                )
                cell = {key: summary[key] for key in LEVEL_KEYS} | {
                    "level": level,
                    "load_mode": config.mode,
                    "workload": config.workload,
                    "input_tokens": config.input_tokens,
                    "output_tokens": config.output_tokens,
                    "errors": [r.error for r in run.records if r.error],
                    "server": server,
                    "run_started": run.started,
                    "requests": [request_row(r) for r in run.records],
                }
                cell |= {"concurrency": int(level)} if config.mode == "concurrency" else {"request_rate": level}
                cell["meets_slo"] = bool(
                    summary["request_throughput"]
                    and summary["request_goodput"] >= config.meets_share * summary["request_throughput"]
                )
                result.cells.append(cell)
                await report_partial({"cells": result.cells, "partial": True})
    return result


def request_row(record: RequestRecord) -> dict[str, Any]:
    """A request as a job stores it: every METRICS.md field, the gaps (ITL) but not each chunk's clock."""
    return record.as_dict() | {"text_chunk_at": None}


LEVEL_KEYS = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_e2el_ms",
    "max_concurrent_requests",
    "mean_client_queue_ms",
    "p99_client_queue_ms",
)


def load_summary(cells: list[dict[str, Any]], config: LoadConfig) -> dict[str, Any]:
    meeting = [c["level"] for c in cells if c.get("meets_slo")]
    return {
        "slo": {"ttft_ms": config.slo_ttft_ms, "tpot_ms": config.slo_tpot_ms, "share": config.meets_share},
        "load_mode": config.mode,
        "best_level": max(meeting) if meeting else None,
        "best_concurrency": max(meeting) if meeting and config.mode == "concurrency" else None,
        "peak_output_throughput": max((c["output_throughput"] for c in cells), default=None),
    }


JobConfig = Any  # one of the *Config classes here or in bench.jobs_rag; each has total_requests


def config_for(kind: str, raw: dict[str, Any], *, max_model_len: int | None = None) -> JobConfig:
    """The configuration of a job kind from its form or saved settings.

    Raises ``configs.ConfigError`` naming the field of the first bad value, including
    a request longer than the engine's ``max_model_len`` when that is given.
    """
    from bench import jobs_rag

    c = configs
    repeats, seed = c.integer(raw, "repeats", 1, 1, 20), c.integer(raw, "seed", 0, 0, 1 << 31)
    if kind == "speed":
        config: JobConfig = SpeedConfig(repeats=repeats, seed=seed)
    elif kind == "sweep":
        config = SweepConfig(
            repeats=repeats,
            seed=seed,
            input_lengths=c.integers(raw, "input_lengths", SweepConfig.input_lengths, 1, 1 << 20),
            output_lengths=c.integers(raw, "output_lengths", SweepConfig.output_lengths, 2, 1 << 16),
            fixed_output=c.integer(raw, "fixed_output", SweepConfig.fixed_output, 2, 1 << 16),
            fixed_input=c.integer(raw, "fixed_input", SweepConfig.fixed_input, 1, 1 << 20),
        )
    elif kind == "load":
        workload = c.choice(raw, "workload", "synthetic", WORKLOADS)
        custom = c.custom_from_raw(raw)
        if workload == "custom" and not custom:
            raise configs.ConfigError("custom_file", _("사용자 작업량에는 JSONL 파일이 필요합니다"))
        config = LoadConfig(
            repeats=repeats,
            seed=seed,
            mode=c.choice(raw, "mode", "concurrency", ("concurrency", "rate")),
            concurrencies=c.integers(raw, "concurrencies", LoadConfig.concurrencies, 1, 512),
            rates=c.reals(raw, "rates", LoadConfig.rates, 0.01, 1000),
            burstiness=c.real(raw, "burstiness", 1.0, 0.05, 100),
            input_tokens=c.integer(raw, "input_tokens", LoadConfig.input_tokens, 1, 1 << 20),
            output_tokens=c.integer(raw, "output_tokens", LoadConfig.output_tokens, 1, 1 << 16),
            slo_ttft_ms=c.real(raw, "slo_ttft_ms", LoadConfig.slo_ttft_ms, 1, 3_600_000),
            slo_tpot_ms=c.real(raw, "slo_tpot_ms", LoadConfig.slo_tpot_ms, 0.1, 600_000),
            workload=workload,
            prefixes=c.integer(raw, "prefixes", LoadConfig.prefixes, 1, 64),
            prefix_tokens=c.integer(raw, "prefix_tokens", LoadConfig.prefix_tokens, 16, 1 << 20),
            top_k=c.integer(raw, "top_k", LoadConfig.top_k, 0, 10),
            chunk_size=int(c.choice(raw, "chunk_size", str(LoadConfig.chunk_size), CHUNK_CHOICES)),
            custom=custom if workload == "custom" else (),
        )
    elif kind in jobs_rag.KINDS:
        config = jobs_rag.config_for(kind, raw, repeats=repeats, seed=seed)
    else:
        raise configs.ConfigError("kind", _("알 수 없는 작업 종류: %(kind)s") % {"kind": kind})
    if max_model_len:
        length_check(config, max_model_len)
    return config


CHUNK_CHOICES = tuple(str(size) for size in CHUNK_SIZES)  # the indexed sizes, as form values


def longest_requests(config: JobConfig) -> list[tuple[str, int]]:
    """(field to blame, prompt + output tokens) of the config's longest requests known before it runs."""
    if hasattr(config, "shapes"):  # SpeedConfig
        return [("repeats", i + o) for i, o in (*config.shapes, config.check)]
    if isinstance(config, SweepConfig):
        return [
            ("input_lengths", max(config.input_lengths) + config.fixed_output),
            ("output_lengths", config.fixed_input + max(config.output_lengths)),
        ]
    if isinstance(config, LoadConfig):
        if config.workload == "synthetic":
            return [("output_tokens", config.input_tokens + config.output_tokens)]
        if config.workload == "shared_prefix":
            return [("prefix_tokens", config.prefix_tokens + config.input_tokens + config.output_tokens + 16)]
        return [("output_tokens", config.output_tokens + 1)]
    longest: list[tuple[str, int]] = getattr(config, "longest_requests", list)()
    return longest


def length_check(config: JobConfig, max_model_len: int) -> None:
    for field_name, tokens in longest_requests(config):
        if tokens > max_model_len:
            raise configs.ConfigError(
                field_name,
                _("요청 하나가 %(tokens)d 토큰(프롬프트 + 출력)으로 엔진의 최대 길이 %(limit)d 토큰을 넘습니다")
                % {"tokens": tokens, "limit": max_model_len},
            )
    if isinstance(config, LoadConfig) and config.workload == "custom":
        for number, item in enumerate(config.custom, start=1):
            if (item.max_tokens or config.output_tokens) >= max_model_len:
                raise configs.ConfigError(
                    "custom_file",
                    _("%(line)d번째 프롬프트: max_tokens가 엔진의 최대 길이 %(limit)d 토큰 이상입니다")
                    % {"line": number, "limit": max_model_len},
                )


async def job_measure(
    config: JobConfig, *, base_url: str, model: str, progress: Progress
) -> tuple[dict[str, Any], bool]:
    """Run a job of any kind; its results (with the kind's fits or summary) and whether it was cancelled."""
    results, cancelled = await _measure(config, base_url=base_url, model=model, progress=progress)
    return results | {"model": model}, cancelled


async def _measure(config: JobConfig, *, base_url: str, model: str, progress: Progress) -> tuple[dict[str, Any], bool]:
    from bench import jobs_rag

    if isinstance(config, LoadConfig):
        loaded = await load_sweep(config, base_url=base_url, model=model, progress=progress)
        results = {"cells": loaded.cells, "cancelled": loaded.cancelled} | load_summary(loaded.cells, config)
        return results, loaded.cancelled
    if isinstance(config, SweepConfig):
        swept = await length_sweep(config, base_url=base_url, model=model, progress=progress)
        return swept.as_dict() | {"fits": sweep_fits(swept.cells)}, swept.cancelled
    if isinstance(config, jobs_rag.RetrievalConfig | jobs_rag.PrefixConfig | jobs_rag.ShortConfig):
        return await jobs_rag.job_measure(config, base_url=base_url, model=model, progress=progress)
    probed = await speed_probe(config, base_url=base_url, model=model, progress=progress)
    return probed.as_dict(), probed.cancelled
