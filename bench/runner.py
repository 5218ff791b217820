"""The load generator: streams requests to an OpenAI-compatible server under a load shape.

Two shapes, as in docs/metrics.md: a fixed concurrency (a semaphore), or a request rate
with gamma-distributed gaps (``burstiness`` 1 = Poisson), seeded so a run can be
repeated. Each request is streamed and measured by the vLLM boundary
(``rag.vllm.client.stream_request``) into a RequestRecord; this module only decides
when it is sent. A failed request is a record with its error, never an exception out
of the run.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from rag.vllm import client as vllm_client
from rag.vllm.client import RequestSpec as RequestSpec  # the runner's input: one request, as the boundary sends it
from rag.vllm.records import RequestRecord

OnDone = Callable[[int, int, RequestRecord], Awaitable[None]]

# Every request of a run may be in flight at once; idle connections are dropped before
# the engine's keep-alive (uvicorn, 5 s) would close them under a request about to be sent.
RUN_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=2.0)


@dataclass(frozen=True)
class LoadShape:
    concurrency: int | None = None  # None: no cap
    request_rate: float = math.inf  # requests per second; inf: all due at once
    burstiness: float = 1.0
    seed: int = 0
    # vllm bench serve's ramp-up: (strategy "linear" | "exponential", start req/s, end req/s) over the run.
    ramp: tuple[str, float, float] | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not self.request_rate > 0:
            raise ValueError("request rate must be positive (inf = all at once)")
        if not self.burstiness > 0:
            raise ValueError("burstiness must be positive")
        if self.ramp is not None and (self.ramp[0] not in RAMPS or not (self.ramp[1] > 0 and self.ramp[2] > 0)):
            raise ValueError("a ramp is (linear|exponential, start > 0, end > 0)")


RAMPS = ("linear", "exponential")


def ramp_rate(ramp: tuple[str, float, float], index: int, total: int) -> float:
    """The request rate due at request ``index`` of ``total`` on a ramp, as vllm bench serve computes it:
    from start to end in equal steps (linear) or by a constant factor (exponential)."""
    strategy, start, end = ramp
    progress = index / max(total - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    return float(start * (end / start) ** progress)


def arrival_offsets(n: int, shape: LoadShape) -> list[float]:
    """Seconds after the start at which each of ``n`` requests is due.

    Gaps are gamma-distributed with mean 1/rate and shape ``burstiness`` (the
    scale is chosen so the mean stays 1/rate): 1 is a Poisson process, smaller
    is burstier, larger is more even.
    """
    if math.isinf(shape.request_rate) and shape.ramp is None:
        return [0.0] * n
    rng = random.Random(shape.seed)
    offsets: list[float] = []
    at = 0.0
    for index in range(n):
        offsets.append(at)
        # A ramp (vllm bench serve's --ramp-up-strategy) changes the rate from one request to the next.
        rate = ramp_rate(shape.ramp, index, n) if shape.ramp is not None else shape.request_rate
        at += rng.gammavariate(shape.burstiness, 1.0 / (rate * shape.burstiness))
    return offsets


@dataclass
class RunResult:
    records: list[RequestRecord]
    started: float  # perf_counter at the first dispatch
    ended: float  # end of the last request
    max_concurrent: int
    warmup: list[RequestRecord] = field(default_factory=list)
    client_cpu_s: float = 0.0  # this process's CPU time over the measured requests (not the warm-up)

    @property
    def duration(self) -> float:
        return max(0.0, self.ended - self.started)


async def run(
    specs: list[RequestSpec],
    *,
    base_url: str,
    model: str,
    shape: LoadShape,
    warmup: list[RequestSpec] | None = None,
    timeout: float = 600.0,
    on_done: OnDone | None = None,
) -> RunResult:
    """Send ``warmup`` one by one (kept apart, not measured), then ``specs`` under ``shape``."""
    async with vllm_client.connect(base_url, timeout=timeout, limits=RUN_LIMITS) as client:
        warm = [
            await vllm_client.stream_request(spec, model=model, client=client, timeout=timeout) for spec in warmup or []
        ]
        semaphore = asyncio.Semaphore(shape.concurrency) if shape.concurrency else None
        offsets = arrival_offsets(len(specs), shape)
        records = [RequestRecord() for _ in specs]
        in_flight = 0
        peak = 0
        done = 0
        cpu_started = time.process_time()
        started = time.perf_counter()

        async def send(index: int) -> None:
            nonlocal in_flight, peak, done
            record = records[index]
            record.t_scheduled = started + offsets[index]
            delay = record.t_scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if semaphore is not None:
                await semaphore.acquire()
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await vllm_client.stream_request(
                    specs[index], model=model, client=client, timeout=timeout, record=record
                )
            finally:
                in_flight -= 1
                if semaphore is not None:
                    semaphore.release()
            done += 1
            if on_done is not None:
                await on_done(done, len(specs), record)

        await asyncio.gather(*(send(i) for i in range(len(specs))))
        cpu_s = time.process_time() - cpu_started
    ended = max((r.t_end for r in records if r.t_end is not None), default=started)
    return RunResult(
        records=records, started=started, ended=ended, max_concurrent=peak, warmup=warm, client_cpu_s=cpu_s
    )
