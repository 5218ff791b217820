"""Labs 4-6: jobs over real RAG prompts (the chat's retrieval and template).

- Lab 4, retrieval size: top-k × chunk size → retrieved tokens → prompt tokens → TTFT.
- Lab 5, prefix cache: the same long context cold, warm, with another question and
  with its chunks reordered; cached tokens and hit rate from the engine.
- Lab 6, short answers: the same questions with and without "answer briefly" and a
  ``max_tokens`` cap; output tokens and decode time, and whether the answer still
  holds the evidence.

Every request except Lab 5's deliberate repeats starts with its own first line, so
no request profits from another's cached prefix (Lab 5 resets the cache as well
where the engine allows it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from django.utils.translation import gettext as _

from bench import configs, runner
from bench.jobs import CHUNK_CHOICES, keeps_partial, report_partial
from bench.workloads import RagPrompt, answer_coverage, nonce_line, rag_prompts, rag_questions
from rag import prompting
from rag.chunking import CHUNK_SIZES
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

KINDS = ("retrieval", "prefix", "short")


@dataclass(frozen=True)
class RetrievalConfig:
    questions: int = 2
    top_ks: tuple[int, ...] = (1, 3, 5)
    chunk_sizes: tuple[int, ...] = CHUNK_SIZES
    max_tokens: int = 24
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.questions * len(self.top_ks) * len(self.chunk_sizes)

    def longest_requests(self) -> list[tuple[str, int]]:
        # Korean text: at most about one token per character, plus the template.
        return [("top_ks", max(self.top_ks) * max(self.chunk_sizes) + 200 + self.max_tokens)]


@dataclass(frozen=True)
class PrefixConfig:
    contexts: int = 2  # how many long contexts, each asked four ways
    top_k: int = 5
    chunk_size: int = 1000
    max_tokens: int = 8
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.contexts * len(PREFIX_CELLS)

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("top_k", self.top_k * self.chunk_size + 200 + self.max_tokens)]


@dataclass(frozen=True)
class ShortConfig:
    questions: int = 3
    normal_tokens: int = 160
    cap_tokens: int = 32
    top_k: int = 3
    chunk_size: int = 500
    seed: int = 0

    @property
    def total_requests(self) -> int:
        return self.questions * len(SHORT_CELLS)

    def longest_requests(self) -> list[tuple[str, int]]:
        return [("normal_tokens", self.top_k * self.chunk_size + 200 + self.normal_tokens)]


PREFIX_CELLS = ("cold", "warm", "other_question", "reordered")
SHORT_CELLS = ("normal", "brief", "cap", "brief_cap")


def config_for(kind: str, raw: dict[str, Any], *, repeats: int, seed: int) -> Any:
    c = configs
    chunk = CHUNK_CHOICES
    if kind == "retrieval":
        sizes = c.integers(raw, "chunk_sizes", CHUNK_SIZES, 1, 100_000)
        for size in sizes:
            if size not in CHUNK_SIZES:
                raise configs.ConfigError(
                    "chunk_sizes", _("색인된 청크 크기는 200, 500, 1000자입니다 (받은 값 %(size)d)") % {"size": size}
                )
        return RetrievalConfig(
            questions=c.integer(raw, "questions", RetrievalConfig.questions, 1, 20),
            seed=seed,
            top_ks=c.integers(raw, "top_ks", RetrievalConfig.top_ks, 0, 10),
            chunk_sizes=sizes,
            max_tokens=c.integer(raw, "max_tokens", RetrievalConfig.max_tokens, 1, 4096),
        )
    if kind == "prefix":
        return PrefixConfig(
            contexts=c.integer(raw, "contexts", PrefixConfig.contexts, 1, 10),
            seed=seed,
            top_k=c.integer(raw, "top_k", PrefixConfig.top_k, 2, 10),
            chunk_size=int(c.choice(raw, "chunk_size", str(PrefixConfig.chunk_size), chunk)),
            max_tokens=c.integer(raw, "max_tokens", PrefixConfig.max_tokens, 1, 4096),
        )
    normal = c.integer(raw, "normal_tokens", ShortConfig.normal_tokens, 2, 4096)
    cap = c.integer(raw, "cap_tokens", ShortConfig.cap_tokens, 1, 4096)
    if cap >= normal:
        raise configs.ConfigError("cap_tokens", _("상한은 보통 답변의 max_tokens보다 작아야 합니다"))
    return ShortConfig(
        questions=c.integer(raw, "questions", ShortConfig.questions, 1, 20),
        seed=seed,
        normal_tokens=normal,
        cap_tokens=cap,
        top_k=c.integer(raw, "top_k", ShortConfig.top_k, 0, 10),
        chunk_size=int(c.choice(raw, "chunk_size", str(ShortConfig.chunk_size), chunk)),
    )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    from bench.jobs import request_row

    return [request_row(r) for r in records]


def cell_of(records: list[RequestRecord], **fields: Any) -> dict[str, Any]:
    """One cell of a lab 4-6 job: medians over its successful requests, and the requests."""
    ok = [r for r in records if r.success]

    def med(values: list[float | None], scale: float = 1.0) -> float | None:
        return _median([v * scale for v in values if v is not None])

    return fields | {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": [r.error for r in records if r.error],
        "median_ttft_ms": med([r.ttft for r in ok], 1000),
        "median_tpot_ms": med([r.tpot for r in ok], 1000),
        "median_e2el_ms": med([r.e2el for r in ok], 1000),
        "median_decode_ms": med([r.decode_time for r in ok], 1000),
        "median_server_queue_ms": med([r.queue_time_server for r in ok], 1000),
        "median_server_prefill_ms": med([r.prefill_time_server for r in ok], 1000),
        "median_prompt_tokens": med([float(r.prompt_tokens or 0) for r in ok]),
        "median_output_tokens": med([float(r.output_tokens or 0) for r in ok]),
        "median_cached_tokens": med([float(r.cached_tokens or 0) for r in ok]),
        "decode_speed": med([r.decode_speed for r in ok]),
        "requests": _rows(records),
    }


class _Session:
    """Sends one request at a time with progress after each; counts toward the job's total."""

    def __init__(self, *, base_url: str, model: str, total: int, progress: Any, http: httpx.AsyncClient) -> None:
        self.base_url, self.model, self.total, self.progress, self.http = base_url, model, total, progress, http
        self.done = 0
        self.cancelled = False

    async def start_cell(self, label: str) -> bool:
        if not await self.progress(self.done, self.total, label):
            self.cancelled = True
        return not self.cancelled

    async def send(self, spec: runner.RequestSpec, label: str) -> tuple[RequestRecord, dict[str, Any]]:
        async with server_metrics.watched(self.http) as server:
            run = await runner.run([spec], base_url=self.base_url, model=self.model, shape=runner.LoadShape(1))
        self.done += 1
        if not await self.progress(self.done, self.total, label):
            self.cancelled = True
        return run.records[0], server


async def _prompts(questions: list[Any], **settings: Any) -> list[RagPrompt]:
    return list(await sync_to_async(rag_prompts, thread_sensitive=False)(questions, **settings))


async def _warm(base_url: str, model: str, seed: int) -> None:
    from bench.jobs import warm_up

    await warm_up(base_url=base_url, model=model, seed=seed)


# --- Lab 4 ------------------------------------------------------------------------------


async def retrieval_sweep(config: RetrievalConfig, *, base_url: str, model: str, progress: Any) -> dict[str, Any]:
    questions = await sync_to_async(rag_questions)(config.questions, seed=config.seed)
    cells: list[dict[str, Any]] = []
    with keeps_partial(lambda: {"cells": cells, "cancelled": False, "fits": retrieval_fits(cells)}):
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            session = _Session(
                base_url=base_url, model=model, total=config.total_requests, progress=progress, http=http
            )
            await _warm(base_url, model, config.seed)
            bare = await _prompts(questions, top_k=0, chunk_size=CHUNK_SIZES[0])  # the same prompts without material
            # One retrieval first, not measured: loading the embedding model is not retrieval time.
            await _prompts(questions[:1], top_k=1, chunk_size=config.chunk_sizes[0])
            for size in config.chunk_sizes:
                for top_k in config.top_ks:
                    label = f"chunk {size} / top-k {top_k}"
                    if not await session.start_cell(label):
                        return {"cells": cells, "cancelled": True}
                    prompts = await _prompts(questions, top_k=top_k, chunk_size=size)
                    records: list[RequestRecord] = []
                    answers = []
                    context_tokens: list[float] = []
                    for number, prompt in enumerate(prompts):
                        nonce = nonce_line(config.seed, size, top_k, number)
                        spec = runner.RequestSpec(
                            prompt=nonce + prompt.text, max_tokens=config.max_tokens, ignore_eos=False, stop=prompt.stop
                        )
                        record, _server = await session.send(spec, label)
                        records.append(record)
                        if record.prompt_tokens is not None:
                            # Retrieved tokens: this prompt minus the same prompt with no material.
                            (zero,) = await vllm_client.count_tokens(
                                [nonce + bare[number].text], model=model, client=http
                            )
                            context_tokens.append(max(0, record.prompt_tokens - zero))
                        answers.append(_answer(prompt, record))
                        if session.cancelled:
                            break
                    cells.append(
                        cell_of(
                            records,
                            chunk_size=size,
                            top_k=top_k,
                            answers=answers,
                            median_retrieval_ms=_median([p.retrieval_ms for p in prompts]),
                            median_context_tokens=_median(context_tokens),
                            median_context_chars=_median([float(p.context_chars) for p in prompts]),
                            evidence_retrieved=_share([p.evidence_retrieved for p in prompts]),
                            answer_coverage=_median([a["coverage"] for a in answers]),
                        )
                    )
                    await report_partial({"cells": cells, "partial": True})
                    if session.cancelled:
                        return {"cells": cells, "cancelled": True}
    return {"cells": cells, "cancelled": False, "fits": retrieval_fits(cells)}


def retrieval_fits(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """TTFT against context tokens, one line per chunk size (slope ≈ 1 / prefill speed)."""
    from bench.jobs import line_fit

    out: dict[str, Any] = {}
    for size in sorted({c["chunk_size"] for c in cells}):
        points = [
            c for c in cells if c["chunk_size"] == size and c["completed"] and c["median_context_tokens"] is not None
        ]
        out[str(size)] = line_fit([c["median_context_tokens"] for c in points], [c["median_ttft_ms"] for c in points])
    return out


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _answer(prompt: RagPrompt, record: RequestRecord) -> dict[str, Any]:
    return {
        "question": prompt.question,
        "answer": record.generated_text.strip(),
        "coverage": answer_coverage(record.generated_text, prompt.evidence),
        "output_tokens": record.output_tokens,
        "finish_reason": record.finish_reason,
    }


# --- Lab 5 ------------------------------------------------------------------------------


async def prefix_cache(config: PrefixConfig, *, base_url: str, model: str, progress: Any) -> dict[str, Any]:
    """Per context: reset, cold, the same prompt again, another question, the chunks reordered."""
    questions = await sync_to_async(rag_questions)(config.contexts * 2, seed=config.seed)
    firsts, others = questions[: config.contexts], questions[config.contexts :]
    by_cell: dict[str, list[tuple[RequestRecord, dict[str, Any]]]] = {name: [] for name in PREFIX_CELLS}
    resets: list[str] = []
    cancelled = False
    with keeps_partial(lambda: {"cells": prefix_cells(by_cell), "cancelled": False}):
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            session = _Session(
                base_url=base_url, model=model, total=config.total_requests, progress=progress, http=http
            )
            await _warm(base_url, model, config.seed)
            prompts = await _prompts(firsts, top_k=config.top_k, chunk_size=config.chunk_size)
            for number, (prompt, other) in enumerate(zip(prompts, others or firsts, strict=False)):
                if not await session.start_cell(f"context {number + 1}"):
                    cancelled = True
                    break
                resets.append(await vllm_client.reset_prefix_cache(http))
                nonce = nonce_line(config.seed, number)
                chunks = list(prompt.context)
                texts = {
                    "cold": prompt.text,
                    "warm": prompt.text,
                    "other_question": prompting.prompt_build(other.question, chunks, brief=False).text,
                    "reordered": prompting.prompt_build(
                        prompt.question, list(reversed(chunks)), brief=False, keep_order=True
                    ).text,
                }
                for name in PREFIX_CELLS:
                    spec = runner.RequestSpec(prompt=nonce + texts[name], max_tokens=config.max_tokens)
                    by_cell[name].append(await session.send(spec, f"context {number + 1}: {name}"))
                    if session.cancelled:
                        break
                if session.cancelled:
                    cancelled = True
                    break
    cells = prefix_cells(by_cell)
    reset = "ok" if resets and all(r == "ok" for r in resets) else (resets[0] if resets else None)
    return {"cells": cells, "cancelled": cancelled, "cache_reset": reset} | prefix_summary(cells)


def prefix_cells(by_cell: dict[str, list[tuple[RequestRecord, dict[str, Any]]]]) -> list[dict[str, Any]]:
    cells = []
    for name, measured in by_cell.items():
        if not measured:
            continue
        records = [record for record, _ in measured]
        cell = cell_of(records, cell=name, server=server_metrics.merged([server for _, server in measured]))
        prompt_total = sum(r.prompt_tokens or 0 for r in records if r.success)
        cached_total = sum(r.cached_tokens or 0 for r in records if r.success)
        cell["hit_rate"] = cached_total / prompt_total if prompt_total else None
        cells.append(cell)
    return cells


def prefix_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    ttft = {c["cell"]: c["median_ttft_ms"] for c in cells}
    cold, warm = ttft.get("cold"), ttft.get("warm")
    return {"warm_speedup": cold / warm if cold and warm else None}


# --- Lab 6 ------------------------------------------------------------------------------


async def short_answers(config: ShortConfig, *, base_url: str, model: str, progress: Any) -> dict[str, Any]:
    questions = await sync_to_async(rag_questions)(config.questions, seed=config.seed)
    variants = {
        "normal": (False, config.normal_tokens),
        "brief": (True, config.normal_tokens),
        "cap": (False, config.cap_tokens),
        "brief_cap": (True, config.cap_tokens),
    }
    measured: dict[str, list[tuple[RequestRecord, dict[str, Any]]]] = {name: [] for name in SHORT_CELLS}
    cancelled = False
    with keeps_partial(lambda: {"cells": short_cells(measured, variants), "cancelled": False}):
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            session = _Session(
                base_url=base_url, model=model, total=config.total_requests, progress=progress, http=http
            )
            await _warm(base_url, model, config.seed)
            plain = await _prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size)
            brief = await _prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size, brief=True)
            for number, question in enumerate(questions):
                if not await session.start_cell(f"question {number + 1}"):
                    cancelled = True
                    break
                for name in SHORT_CELLS:
                    is_brief, limit = variants[name]
                    prompt = (brief if is_brief else plain)[number]
                    nonce = nonce_line(config.seed, number, name)
                    spec = runner.RequestSpec(
                        prompt=nonce + prompt.text, max_tokens=limit, ignore_eos=False, stop=prompt.stop
                    )
                    record, _server = await session.send(spec, f"question {number + 1}: {name}")
                    measured[name].append((record, _answer(prompt, record) | {"id": question.id}))
                    if session.cancelled:
                        break
                if session.cancelled:
                    cancelled = True
                    break
    cells = short_cells(measured, variants)
    return {"cells": cells, "cancelled": cancelled} | short_summary(cells)


def short_cells(
    measured: dict[str, list[tuple[RequestRecord, dict[str, Any]]]], variants: dict[str, tuple[bool, int]]
) -> list[dict[str, Any]]:
    cells = []
    for name in SHORT_CELLS:
        if not measured[name]:
            continue
        is_brief, limit = variants[name]
        answers = [answer for _, answer in measured[name]]
        cells.append(
            cell_of(
                [record for record, _ in measured[name]],
                cell=name,
                brief=is_brief,
                max_tokens=limit,
                answers=answers,
                answer_coverage=_median([a["coverage"] for a in answers]),
                capped=sum(1 for a in answers if a["finish_reason"] == "length"),
            )
        )
    return cells


def short_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    by = {c["cell"]: c for c in cells}
    normal, best = by.get("normal"), by.get("brief_cap")
    if not normal or not best or not normal.get("median_e2el_ms") or best.get("median_e2el_ms") is None:
        return {"time_saved_pct": None}
    return {"time_saved_pct": 100 * (1 - best["median_e2el_ms"] / normal["median_e2el_ms"])}


async def job_measure(config: Any, *, base_url: str, model: str, progress: Any) -> tuple[dict[str, Any], bool]:
    if isinstance(config, RetrievalConfig):
        results = await retrieval_sweep(config, base_url=base_url, model=model, progress=progress)
    elif isinstance(config, PrefixConfig):
        results = await prefix_cache(config, base_url=base_url, model=model, progress=progress)
    else:
        results = await short_answers(config, base_url=base_url, model=model, progress=progress)
    return results, bool(results["cancelled"])
