"""Our client's own overhead per request, against a scripted server that is never slow.

    python manage.py bench_client_overhead --levels 1,8,64,256,1024 --ttft-ms 50 --itl-ms 10

Starts ``labapp.ops.scripted`` in a child process (so it does not share this
process's event loop or CPU thread), which writes the first token exactly
``--ttft-ms`` after it has read a request and one more every ``--itl-ms``.
For each concurrency level L our load generator (``bench.runner.run``, as the
jobs use it) runs 2·L requests at concurrency L, as many times as it takes to
measure at least ``--requests-per-level`` requests of each wave:

* the first wave: L requests sent at once, each opening a new connection (what
  the first L requests of every run pay; a run of one request pays it always).
  Nothing waits for a slot, so ``client_queue_time`` is only the time our event
  loop took to get round to sending the request.
* the second wave: each request takes the slot of one that finished (the steady
  state of a long run), and its connection if the client kept it alive (the
  server's connection count shows whether it did). Its ``client_queue_time`` is
  mostly the wait for a slot, so the queue shown is the slot → send lag instead:
  its send time minus the end of the request whose slot it took (the
  semaphore wakes waiters in order).

Per level and wave: measured TTFT − scripted TTFT (our overhead on TTFT),
measured TPOT − scripted ITL, the queue above; per level the runner's peak in
flight, the server's peak of concurrent streams and connections, requests/s and
the ideal (L / scripted E2EL). The server's timestamps (``time.perf_counter``,
one CLOCK_MONOTONIC for every process on Linux) split the TTFT overhead into
send → server read, the server's timer lateness and server write → client read.
The verdict names the first level whose median TTFT overhead exceeds 5 ms or
10 % of the scripted TTFT, whichever is smaller (or that had failures).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import runner
from bench.metrics import percentile
from labapp.ops import scripted
from labapp.ops.report import emit
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord

DEFAULT_LEVELS = "1,8,64,256,1024"
PROMPT_WORDS = 256
THRESHOLD_MS = 5.0
THRESHOLD_SHARE = 0.10
WAVES = {"first": "first wave (all sent at once)", "second": "second wave (each in a finished request's slot)"}


def threshold_ms(ttft_ms: float) -> float:
    """Overhead that counts as distorting TTFT: 5 ms or 10 % of the scripted TTFT, the smaller."""
    return min(THRESHOLD_MS, THRESHOLD_SHARE * ttft_ms) if ttft_ms > 0 else THRESHOLD_MS


def _p(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3)}


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--levels must be comma-separated integers, not {text!r}") from exc
    if not levels or any(level < 1 for level in levels):
        raise CommandError("--levels needs at least one level, each at least 1")
    return sorted(set(levels))


class Command(BaseCommand):
    help = "Measure the load generator's own overhead per request against a fast scripted server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--levels", default=DEFAULT_LEVELS, help=f"concurrency levels (default {DEFAULT_LEVELS})")
        parser.add_argument(
            "--requests-per-level",
            type=int,
            default=64,
            help="measure at least this many requests of each wave per level (default 64)",
        )
        parser.add_argument("--ttft-ms", type=float, default=50.0, help="the server's scripted TTFT")
        parser.add_argument("--itl-ms", type=float, default=10.0, help="the server's scripted gap between tokens")
        parser.add_argument("--output-tokens", type=int, default=8)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        levels = _levels(options["levels"])
        if options["requests_per_level"] < 1:
            raise CommandError("--requests-per-level must be at least 1")
        if options["output_tokens"] < 2:
            raise CommandError("--output-tokens must be at least 2 (TPOT needs two tokens)")
        if options["ttft_ms"] < 0 or options["itl_ms"] < 0:
            raise CommandError("--ttft-ms and --itl-ms must not be negative")
        scripted.raise_open_file_limit()
        try:
            with scripted.spawn(ttft_ms=options["ttft_ms"], itl_ms=options["itl_ms"]) as url:
                report = asyncio.run(
                    measure(
                        url,
                        levels=levels,
                        requests_per_level=options["requests_per_level"],
                        ttft_ms=options["ttft_ms"],
                        itl_ms=options["itl_ms"],
                        output_tokens=options["output_tokens"],
                    )
                )
        except (RuntimeError, httpx.HTTPError, vllm_client.EngineUnavailable) as exc:
            raise CommandError(f"{type(exc).__name__}: {exc}") from exc
        emit(self.stdout, report, json_wanted=options["json"], lines=lambda: report_lines(report))


async def _server_stats(http: httpx.AsyncClient) -> dict[str, Any]:
    """What the scripted server saw since the last call (which this call clears)."""
    response = await http.get("/stats", params={"reset": "1"})
    response.raise_for_status()
    stats: dict[str, Any] = response.json()
    return stats


def _slot_lags(records: list[RequestRecord], level: int) -> list[float]:
    """Second wave: each request's send time minus the end of the request whose slot it took.

    The runner's semaphore wakes waiters in order, and a request ends and frees
    its slot with no await in between, so the j-th waiter (request level + j)
    gets the slot of the j-th request to end.
    """
    ends = sorted(r.t_end for r in records if r.t_end is not None)
    return [
        (record.t_send - ends[j]) * 1000 for j, record in enumerate(records[level:]) if j < len(ends) and record.t_send
    ]


@dataclass(frozen=True)
class Scripted:
    """What the scripted server was told, and the filler every prompt carries."""

    ttft: float  # s
    itl: float  # s
    output_tokens: int
    filler: str
    shared_clock: bool


async def measure(
    url: str, *, levels: list[int], requests_per_level: int, ttft_ms: float, itl_ms: float, output_tokens: int
) -> dict[str, Any]:
    scripted = Scripted(
        ttft=ttft_ms / 1000,
        itl=itl_ms / 1000,
        output_tokens=output_tokens,
        filler=" ".join(f"w{i % 97}" for i in range(PROMPT_WORDS - 1)),
        shared_clock="CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation,
    )
    model = await vllm_client.engine_model(url)
    async with vllm_client.connect(url, timeout=30) as http:
        # Warm-up, not measured: the first requests in a process pay for imports and first-call caches.
        warm = [runner.RequestSpec(prompt=f"warmup{i} {scripted.filler}", max_tokens=output_tokens) for i in range(8)]
        await runner.run(warm, base_url=url, model=model, shape=runner.LoadShape(concurrency=4), timeout=60)
        await _server_stats(http)
        rows = [await _level(http, url, model, level, requests_per_level, scripted) for level in levels]
    limit = threshold_ms(ttft_ms)

    def first_distorted(wave: str) -> int | None:
        return next(
            (
                row["concurrency"]
                for row in rows
                if (row[wave]["ttft_overhead_ms"]["p50"] or 0.0) > limit or row[wave]["failed"]
            ),
            None,
        )

    return {
        "scripted": {
            "ttft_ms": ttft_ms,
            "itl_ms": itl_ms,
            "output_tokens": output_tokens,
            "prompt_words": PROMPT_WORDS,
        },
        "requests_per_level": requests_per_level,
        "threshold_ms": limit,
        "shared_clock": scripted.shared_clock,
        "levels": rows,
        "distorts_at": {wave: first_distorted(wave) for wave in WAVES},
    }


async def _level(
    http: httpx.AsyncClient, url: str, model: str, level: int, requests_per_level: int, scripted: Scripted
) -> dict[str, Any]:
    """One concurrency level: runs of 2·L requests at concurrency L until each wave has enough requests."""
    ttft, itl, output_tokens = scripted.ttft, scripted.itl, scripted.output_tokens
    runs = math.ceil(max(level, requests_per_level) / level)
    waves: dict[str, list[tuple[str, RequestRecord]]] = {"first": [], "second": []}
    lags: dict[str, list[float]] = {"first": [], "second": []}
    busy, peak, total = 0.0, 0, 0
    for r in range(runs):
        keys = [f"L{level}r{r}i{i}" for i in range(2 * level)]
        specs = [runner.RequestSpec(prompt=f"{key} {scripted.filler}", max_tokens=output_tokens) for key in keys]
        result = await runner.run(
            specs, base_url=url, model=model, shape=runner.LoadShape(concurrency=level), timeout=60
        )
        pairs = list(zip(keys, result.records, strict=True))
        waves["first"] += pairs[:level]
        waves["second"] += pairs[level:]
        lags["first"] += [q * 1000 for rec in result.records[:level] if (q := rec.client_queue_time) is not None]
        lags["second"] += _slot_lags(result.records, level)
        busy += result.duration
        peak = max(peak, result.max_concurrent)
        total += len(result.records)
    server = await _server_stats(http)
    seen = {entry["key"]: entry for entry in server.get("requests", []) if entry.get("first") is not None}
    completed = sum(1 for pairs in waves.values() for _, r in pairs if r.success)
    return {
        "concurrency": level,
        "runs": runs,
        "requests": total,
        "failed": total - completed,
        "max_concurrent": peak,
        "server_peak_streams": int(server.get("peak_streams", 0)),
        "server_connections": int(server.get("connections", 0)),
        "requests_per_s": round(completed / busy, 1) if busy > 0 else 0.0,
        "ideal_requests_per_s": round(level / (ttft + (output_tokens - 1) * itl), 1) if ttft or itl else None,
    } | {
        wave: _wave(
            waves[wave],
            lags[wave],
            seen if scripted.shared_clock else {},
            ttft=ttft,
            itl=itl,
            output_tokens=output_tokens,
        )
        for wave in WAVES
    }


def _wave(
    pairs: list[tuple[str, RequestRecord]],
    queue: list[float],
    seen: dict[str, dict[str, Any]],
    *,
    ttft: float,
    itl: float,
    output_tokens: int,
) -> dict[str, Any]:
    ok = [(key, r) for key, r in pairs if r.success]
    failed = [r for _, r in pairs if not r.success]
    send: list[float] = []
    late: list[float] = []
    receive: list[float] = []
    for key, r in ok:
        entry = seen.get(key)
        if entry is not None and r.text_chunk_at:
            send.append((entry["arrival"] - r.t_send) * 1000)
            late.append((entry["first"] - entry["arrival"] - ttft) * 1000)
            receive.append((r.text_chunk_at[0] - entry["first"]) * 1000)
    return {
        "requests": len(pairs),
        "failed": len(failed),
        "first_error": failed[0].error if failed else None,
        "wrong_token_count": sum(1 for _, r in ok if r.output_tokens != output_tokens),
        "ttft_overhead_ms": _p([(r.ttft - ttft) * 1000 for _, r in ok if r.ttft is not None]),
        "tpot_overhead_ms": _p([(r.tpot - itl) * 1000 for _, r in ok if r.tpot is not None]),
        "client_queue_ms": _p(queue),
        "breakdown_ms": {
            "matched": len(send),
            "send_to_server_read": _p(send),
            "server_late": _p(late),
            "server_write_to_client_read": _p(receive),
        },
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pair(stats: dict[str, float | None]) -> str:
    return f"{_fmt(stats['p50'])} {_fmt(stats['p99'])}"


def _wave_lines(report: dict[str, Any], wave: str, title: str) -> list[str]:
    """One wave's table: per level, the TTFT and TPOT overheads and the queue (and the TTFT split)."""
    split = report["shared_clock"]
    queue = "queue" if wave == "first" else "slot->send"
    lines = [
        "",
        f"{title}: ms, p50 p99; TTFT+ = measured TTFT - scripted, TPOT+ = measured TPOT - scripted ITL"
        + ("; TTFT+ = send->srv + srv late + srv->client" if split else ""),
        f"{'conc':>5} | {'TTFT+':>15} | {'TPOT+':>13} | {queue:>15}"
        + (f" | {'send->srv':>15} | {'srv late':>11} | {'srv->client':>13}" if split else ""),
    ]
    for row in report["levels"]:
        w = row[wave]
        line = (
            f"{row['concurrency']:>5} | {_pair(w['ttft_overhead_ms']):>15} | {_pair(w['tpot_overhead_ms']):>13} | "
            f"{_pair(w['client_queue_ms']):>15}"
        )
        if split:
            b = w["breakdown_ms"]
            line += (
                f" | {_pair(b['send_to_server_read']):>15} | {_pair(b['server_late']):>11} | "
                f"{_pair(b['server_write_to_client_read']):>13}"
            )
        lines.append(line)
    return lines


def report_lines(report: dict[str, Any]) -> list[str]:
    s = report["scripted"]
    lines = [
        f"Scripted server: TTFT {s['ttft_ms']:g} ms, ITL {s['itl_ms']:g} ms, {s['output_tokens']} output tokens, "
        f"{s['prompt_words']}-word prompts; at each level L, runs of 2·L requests at concurrency L.",
        "",
        f"{'conc':>5} {'requests':>8} {'failed':>6} {'in flight':>9} {'srv peak':>8} {'srv conns':>9} "
        f"{'req/s':>8} {'ideal':>8}",
    ]
    for row in report["levels"]:
        lines.append(
            f"{row['concurrency']:>5} {row['requests']:>8} {row['failed']:>6} {row['max_concurrent']:>9} "
            f"{row['server_peak_streams']:>8} {row['server_connections']:>9} {row['requests_per_s']:>8.1f} "
            f"{_fmt(row['ideal_requests_per_s']):>8}"
        )
    if all(row["server_connections"] >= row["requests"] for row in report["levels"]):
        lines.append("No connection was reused: the server accepted at least one connection per request.")
    for wave, title in WAVES.items():
        lines += _wave_lines(report, wave, title)
    for row in report["levels"]:
        for wave in WAVES:
            if row[wave]["failed"]:
                lines.append(
                    f"concurrency {row['concurrency']}, {wave} wave: {row[wave]['failed']} failed, "
                    f"e.g. {row[wave]['first_error']}"
                )
    lines.append("")
    limit = report["threshold_ms"]
    for wave, title in WAVES.items():
        at = report["distorts_at"][wave]
        if at is None:
            lines.append(
                f"{title}: no level distorts TTFT (median TTFT overhead within {limit:g} ms "
                f"up to concurrency {report['levels'][-1]['concurrency']})."
            )
        else:
            lines.append(
                f"{title}: client queueing starts to distort TTFT at concurrency {at} "
                f"(median TTFT overhead above {limit:g} ms, or failed requests)."
            )
    return lines
