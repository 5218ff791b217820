"""The measuring loop of the kinds that send one request at a time (all but the load sweep).

A ``Session`` sends each request on its own, watches the engine's /metrics around
it (or around a whole cell: ``cells.watched_cell`` marks a cell during which other
traffic ran on the engine), and reports progress after every request, counting
toward the job's total; once the reporter says stop it is ``cancelled`` and the
kind returns what it measured. ``measure_shapes`` is that loop over token-exact
synthetic prompts (Labs 1 and 2).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from bench import runner
from bench.kinds.cells import cell_summary, watched_cell
from bench.reporting import Reporter
from bench.workloads import synthetic_prompts
from labapp import said
from labapp.said import gettext as _
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

CLIENT_TIMEOUT_S = 60  # the client the kinds use for /tokenize, /metrics and cache resets


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


class Session:
    """One request at a time on one engine, with progress after each."""

    def __init__(self, http: httpx.AsyncClient, *, base_url: str, model: str, total: int, reporter: Reporter) -> None:
        self.http, self.base_url, self.model, self.total, self.reporter = http, base_url, model, total, reporter
        self.done = 0
        self.cancelled = False

    async def start_cell(self, label: str) -> bool:
        """Report the cell about to be measured; False (and ``cancelled``) when the job is to stop."""
        if not await self.reporter.progress(self.done, self.total, label):
            self.cancelled = True
        return not self.cancelled

    async def _one(self, spec: runner.RequestSpec, label: str) -> RequestRecord:
        run = await runner.run([spec], base_url=self.base_url, model=self.model, shape=runner.LoadShape(1))
        self.done += 1
        if not await self.reporter.progress(self.done, self.total, label):
            self.cancelled = True
        return run.records[0]

    async def send(self, spec: runner.RequestSpec, label: str) -> tuple[RequestRecord, dict[str, Any]]:
        """One request and the engine's /metrics around it."""
        async with server_metrics.watched(self.http) as server:
            record = await self._one(spec, label)
        return record, server

    async def send_all(self, specs: list[runner.RequestSpec], label: str) -> tuple[list[RequestRecord], dict[str, Any]]:
        """The requests one after another (until a cancel) and the engine's /metrics around them all."""
        records: list[RequestRecord] = []
        async with server_metrics.watched(self.http) as server:
            for spec in specs:
                records.append(await self._one(spec, label))
                if self.cancelled:
                    break
        return records, server


@dataclass(frozen=True)
class Shape:
    """A cell of token-exact prompts: input and output length, and tags stored on the cell."""

    input_tokens: int
    output_tokens: int
    tags: tuple[tuple[str, Any], ...] = ()  # e.g. (("check", True),) or (("sweep", "input"),)

    @property
    def label(self) -> str:
        label = _("입력 %(input)d / 출력 %(output)d") % {"input": self.input_tokens, "output": self.output_tokens}
        notes = {"check": _("검증"), "input": _("입력 스윕"), "output": _("출력 스윕")}
        named = [notes.get(value if isinstance(value, str) else key, key) for key, value in self.tags if value]
        extra = said.join("", (" (" + note + ")" for note in named))
        return label + extra


async def measure_shapes(
    shapes: list[Shape],
    *,
    repeats: int,
    seed: int,
    base_url: str,
    model: str,
    reporter: Reporter,
    results: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> tuple[list[dict[str, Any]], bool]:
    """Each shape ``repeats`` times, one request at a time, prompts with unique openings: (cells, cancelled).

    ``results`` turns the cells measured so far into the job's results (kept on an error).
    """
    cells: list[dict[str, Any]] = []
    with keeps_partial(lambda: results(cells)):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            session = Session(http, base_url=base_url, model=model, total=repeats * len(shapes), reporter=reporter)
            await warm_up(base_url=base_url, model=model, seed=seed)
            for number, shape in enumerate(shapes):
                if not await session.start_cell(shape.label):
                    break
                prompts = await synthetic_prompts(
                    repeats, shape.input_tokens, seed=seed * 100 + number, model=model, client=http
                )
                specs = [runner.RequestSpec(prompt=p, max_tokens=shape.output_tokens) for p in prompts]
                records, server = await session.send_all(specs, shape.label)
                fields = {"input_tokens": shape.input_tokens, "output_tokens": shape.output_tokens}
                cells.append(watched_cell(cell_summary(records, **fields) | dict(shape.tags), server))
                await reporter.partial({"cells": cells, "partial": True})
                if session.cancelled:
                    break
    return cells, session.cancelled
