"""Our runner against `vllm bench serve` on the scripted server: each client's own TTFT overhead per level.

    python manage.py bench_client_race --levels 1,4,16,64,256 --requests 256 --rounds 2

Starts ``labapp.ops.scripted`` in a child process: the first token exactly ``--ttft-ms`` after it
read a request, then one every ``--itl-ms``, ``--output-tokens`` in all. At each concurrency level L
both clients send the same number of requests (``--requests``, at least 2·L), all due at once with at
most L in flight, each prompt starting with its own key so the server's log finds it. Who goes first
alternates by level and round.

Per level and client: the median and p99 of measured TTFT − scripted TTFT (the client's added
TTFT), split by the server's timestamps (one CLOCK_MONOTONIC for every process on Linux) into
send → server read, the server's own lateness and server write → client read, and the client's
CPU seconds during its run. The ratio is ours / vLLM's median added TTFT: at or under 1 means our
runner distorts TTFT no more than vLLM's own client does on the same machine in the same run.
"""

from __future__ import annotations

import asyncio
import cProfile
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import runner
from labapp.ops import scripted
from labapp.ops.measures import reference
from labapp.ops.measures.bench_client_overhead import _levels, _p
from labapp.ops.report import emit
from labapp.ops.stack.components import embedded_model_dir
from rag.vllm import client as vllm_client

DEFAULT_LEVELS = "1,4,16,64,256"
PROMPT_WORDS = 200
CLIENTS = ("ours", "vllm")


def split(
    sent: dict[str, tuple[float, float]], seen: dict[str, dict[str, Any]], *, ttft_s: float
) -> dict[str, dict[str, float | None]]:
    """Each request's added TTFT in three parts, from ``sent`` (key → (send time, TTFT) on the client)
    and the server's log (key → arrival, first token written): ms, median and p99 of each part."""
    added, to_server, late, to_client = [], [], [], []
    for key, (t_send, ttft) in sent.items():
        added.append((ttft - ttft_s) * 1000)
        entry = seen.get(key)
        if entry is None or entry.get("first") is None:
            continue
        to_server.append((entry["arrival"] - t_send) * 1000)
        late.append((entry["first"] - entry["arrival"] - ttft_s) * 1000)
        to_client.append((t_send + ttft - entry["first"]) * 1000)
    return {
        "added_ttft_ms": _p(added),
        "send_to_server_read_ms": _p(to_server),
        "server_late_ms": _p(late),
        "server_write_to_client_read_ms": _p(to_client),
    }


async def _stats(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    """The server's log since the last call (which this call clears): key → its entry."""
    response = await http.get("/stats", params={"reset": "1"})
    response.raise_for_status()
    return {e["key"]: e for e in response.json().get("requests", []) if e.get("key")}


def _prompts(prefix: str, n: int) -> list[str]:
    filler = " ".join(f"w{i % 89}" for i in range(PROMPT_WORDS - 1))
    return [f"{prefix}i{i} {filler}" for i in range(n)]


async def _ours(url: str, model: str, prompts: list[str], *, level: int, output_tokens: int) -> dict[str, Any]:
    specs = [runner.RequestSpec(prompt=p, max_tokens=output_tokens) for p in prompts]
    result = await runner.run(specs, base_url=url, model=model, shape=runner.LoadShape(concurrency=level), timeout=120)
    failed = [r for r in result.records if not r.success]
    sent = {
        p.split(" ", 1)[0]: (r.t_send, r.ttft)
        for p, r in zip(prompts, result.records, strict=True)
        if r.success and r.t_send is not None and r.ttft is not None
    }
    return {
        "sent": sent,
        "failed": len(failed),
        "error": failed[0].error if failed else None,
        "cpu_s": result.client_cpu_s,
    }


def _theirs(url: str, model: str, prompts: list[str], *, level: int, output_tokens: int) -> dict[str, Any]:
    saved, cpu_s = reference.run(
        prompts, base=url, model=model, tokenizer=str(embedded_model_dir()), output_len=output_tokens, concurrency=level
    )
    starts, ttfts = saved.get("start_times") or [], saved.get("ttfts") or []
    errors = [e for e in saved.get("errors") or [] if e]
    sent = {
        p.split(" ", 1)[0]: (start, ttft)
        for p, start, ttft in zip(prompts, starts, ttfts, strict=False)
        if start is not None and ttft  # vLLM's client records a failed request's TTFT as 0
    }
    return {"sent": sent, "failed": len(prompts) - len(sent), "error": errors[0] if errors else None, "cpu_s": cpu_s}


async def _level(
    url: str, model: str, level: int, *, requests: int, round_: int, options: dict[str, Any]
) -> dict[str, Any]:
    n = max(requests, 2 * level)
    ttft_s, tokens = options["ttft_ms"] / 1000, options["output_tokens"]
    order = CLIENTS if (round_ + level) % 2 == 0 else CLIENTS[::-1]
    row: dict[str, Any] = {"concurrency": level, "requests": n, "first": order[0]}
    async with vllm_client.connect(url, timeout=30) as http:
        await _stats(http)
        for client in order:
            prompts = _prompts(f"r{round_}L{level}{client}", n)
            if client == "ours":
                ran = await _ours(url, model, prompts, level=level, output_tokens=tokens)
            else:
                ran = await asyncio.to_thread(_theirs, url, model, prompts, level=level, output_tokens=tokens)
            seen = await _stats(http)
            row[client] = split(ran.pop("sent"), seen, ttft_s=ttft_s) | ran
    return row


def _merged(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One level over its rounds: the median of each figure."""
    first = rows[0]
    merged: dict[str, Any] = {"concurrency": first["concurrency"], "requests": first["requests"], "rounds": len(rows)}
    for client in CLIENTS:
        side: dict[str, Any] = {}
        for part, stats in first[client].items():
            if isinstance(stats, dict):
                side[part] = {
                    q: (
                        statistics.median(vs)
                        if (vs := [r[client][part][q] for r in rows if r[client][part][q] is not None])
                        else None
                    )
                    for q in stats
                }
        side["cpu_s"] = statistics.median(r[client]["cpu_s"] for r in rows)
        side["failed"] = sum(r[client]["failed"] for r in rows)
        side["error"] = next((r[client]["error"] for r in rows if r[client]["error"]), None)
        merged[client] = side
    ours, theirs = merged["ours"]["added_ttft_ms"]["p50"], merged["vllm"]["added_ttft_ms"]["p50"]
    merged["ratio"] = round(ours / theirs, 3) if ours is not None and theirs else None
    return merged


async def race(url: str, options: dict[str, Any]) -> dict[str, Any]:
    model = await vllm_client.engine_model(url)
    # Warm-up, not measured: the first requests in a process pay for imports and first-call caches.
    warm = [runner.RequestSpec(prompt=p, max_tokens=options["output_tokens"]) for p in _prompts("warm", 8)]
    await runner.run(warm, base_url=url, model=model, shape=runner.LoadShape(concurrency=4), timeout=60)
    per_level: dict[int, list[dict[str, Any]]] = {level: [] for level in options["levels"]}
    for round_ in range(options["rounds"]):
        for level in options["levels"]:
            per_level[level].append(
                await _level(url, model, level, requests=options["requests"], round_=round_, options=options)
            )
    rows = [_merged(found) for found in per_level.values()]
    return {
        "scripted": {k: options[k] for k in ("ttft_ms", "itl_ms", "output_tokens")} | {"prompt_words": PROMPT_WORDS},
        "rounds": options["rounds"],
        "levels": rows,
        "ours_at_or_under_vllm": all((row["ratio"] or 0) <= 1 for row in rows),
    }


def _f(value: float | None, width: int = 7) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2f}"


def report_lines(report: dict[str, Any]) -> list[str]:
    s = report["scripted"]
    lines = [
        f"Scripted server: TTFT {s['ttft_ms']:g} ms, ITL {s['itl_ms']:g} ms, {s['output_tokens']} tokens, "
        f"{s['prompt_words']}-word prompts; medians over {report['rounds']} round(s).",
        "Added TTFT = measured TTFT - scripted TTFT (ms, p50); ratio = ours / vLLM's.",
        f"{'conc':>5} {'requests':>8} | {'ours':>7} {'vLLM':>7} {'ratio':>6} | {'ours p99':>8} {'vLLM p99':>8} "
        f"| {'CPU s ours':>10} {'vLLM':>6}",
    ]
    for row in report["levels"]:
        o, v = row["ours"], row["vllm"]
        lines.append(
            f"{row['concurrency']:>5} {row['requests']:>8} | {_f(o['added_ttft_ms']['p50'])} "
            f"{_f(v['added_ttft_ms']['p50'])} {_f(row['ratio'], 6)} | {_f(o['added_ttft_ms']['p99'], 8)} "
            f"{_f(v['added_ttft_ms']['p99'], 8)} | {_f(o['cpu_s'], 10)} {_f(v['cpu_s'], 6)}"
        )
    lines += ["", "Where the added TTFT goes (ms, p50): send -> server read, server late, server write -> client read"]
    for row in report["levels"]:
        parts = []
        for client in CLIENTS:
            side = row[client]
            parts.append(
                f"{client}: {_f(side['send_to_server_read_ms']['p50'], 6)} {_f(side['server_late_ms']['p50'], 6)} "
                f"{_f(side['server_write_to_client_read_ms']['p50'], 6)}"
            )
        lines.append(f"{row['concurrency']:>5} | " + " | ".join(parts))
    for row in report["levels"]:
        for client in CLIENTS:
            if row[client]["failed"]:
                lines.append(
                    f"concurrency {row['concurrency']}, {client}: {row[client]['failed']} failed, "
                    f"e.g. {row[client]['error']}"
                )
    verdict = "at or under" if report["ours_at_or_under_vllm"] else "ABOVE"
    lines.append(f"\nOur runner's added TTFT is {verdict} vllm bench serve's at every level.")
    return lines


class Command(BaseCommand):
    help = "Race our load generator against vllm bench serve on the scripted server, level by level."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--levels", default=DEFAULT_LEVELS, help=f"concurrency levels (default {DEFAULT_LEVELS})")
        parser.add_argument("--requests", type=int, default=128, help="requests per client and level (at least 2·L)")
        parser.add_argument("--rounds", type=int, default=1, help="repeat every level; figures are medians")
        parser.add_argument("--ttft-ms", type=float, default=50.0)
        parser.add_argument("--itl-ms", type=float, default=10.0)
        parser.add_argument("--output-tokens", type=int, default=8)
        parser.add_argument("--profile", type=Path, help="write a cProfile of the whole race (our side) here")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        options["levels"] = _levels(options["levels"])
        for name in ("requests", "rounds"):
            if options[name] < 1:
                raise CommandError(f"--{name} must be at least 1")
        if options["output_tokens"] < 2:
            raise CommandError("--output-tokens must be at least 2 (TPOT needs two tokens)")
        if not reference.available():
            raise CommandError("vllm bench serve needs the engine's virtualenv (.venv-engine); run `make engine`")
        if not embedded_model_dir().exists():
            raise CommandError(f"vllm bench serve needs a tokenizer: {embedded_model_dir()} is missing (make setup)")
        scripted.raise_open_file_limit()
        profile = cProfile.Profile() if options["profile"] else None
        started = time.monotonic()
        try:
            with scripted.spawn(ttft_ms=options["ttft_ms"], itl_ms=options["itl_ms"]) as url:
                if profile is not None:
                    profile.enable()
                report = asyncio.run(race(url, options))
        except (RuntimeError, httpx.HTTPError, vllm_client.EngineUnavailable) as exc:
            raise CommandError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if profile is not None:
                profile.disable()
                profile.dump_stats(str(options["profile"]))
        report["seconds"] = round(time.monotonic() - started, 1)
        emit(self.stdout, report, json_wanted=options["json"], lines=lambda: report_lines(report))
