"""The report of a load run: numbers, a printed table, and what counts as a failure."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from bench.metrics import percentile
from labapp.ops.loadtest.cast import Cast
from labapp.ops.loadtest.plan import PONG_WAIT_S, LoadPlan, RoundResult
from labapp.ops.report import aligned

LAB_PAGE = re.compile(r"^/labs/\d+/$")


def _pcts(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "n": 0}
    return {"p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1), "n": len(values)}


def _admission(asks: list[Any]) -> dict[str, Any]:
    """The chat's admission: asks turned away (line full) and asked again after the retry time, and
    how long the admitted ones waited in its line."""
    return {
        "refused": sum(a.refused for a in asks),
        "refused_asks": sum(a.refused > 0 for a in asks),
        "queued_ms": _pcts([a.queued_ms for a in asks if a.queued_ms is not None]),
    }


def _token_delays(asks: list[Any]) -> dict[str, Any]:
    """The websocket's delay of each answer's first and last token (client's time less the server's)."""
    return {
        "first": _pcts([a.first_delay_ms for a in asks if a.first_delay_ms is not None]),
        # the first token's delay split: the question's way in (client → server) and the token's way out
        "first_inbound": _pcts([a.inbound_ms for a in asks if a.inbound_ms is not None]),
        "first_outbound": _pcts(
            [a.first_delay_ms - a.inbound_ms for a in asks if a.inbound_ms is not None and a.first_delay_ms is not None]
        ),
        "last": _pcts([a.last_delay_ms for a in asks if a.last_delay_ms is not None]),
        "slowest": _slowest_delays(asks),
    }


def _slowest_delays(asks: list[Any], count: int = 8) -> list[dict[str, Any]]:
    """The asks with the longest first-token websocket delay, with what else happened to them: to read
    where a p95 comes from (a refusal and its ask again, a wait in the line, a slow ask)."""
    timed = sorted((a for a in asks if a.first_delay_ms is not None), key=lambda a: -a.first_delay_ms)
    return [
        {
            "ask": a.client_id,
            "first_ms": a.first_delay_ms,
            "inbound_ms": a.inbound_ms,
            "last_ms": a.last_delay_ms,
            "refused": a.refused,
            "queued_ms": a.queued_ms,
            "ttft_ms": a.ttft_ms,
        }
        for a in timed[:count]
    ]


def report_build(
    plan: LoadPlan,
    cast: Cast,
    rounds: list[RoundResult],
    rss: dict[str, list[float | None]],
    jobs: list[dict[str, Any]],
    saved: dict[str, Any],
    first_question: dict[str, Any] | None = None,
) -> dict[str, Any]:
    asks = [a for r in rounds for a in r.asks]
    pages = [p for r in rounds for p in r.pages]
    growth: dict[str, float | None] = {}
    for name, values in rss.items():
        before, last = values[-2], values[-1]
        growth[name] = None if before is None or last is None else round(last - before, 1)
    return {
        "run": cast.run,
        "plan": asdict(plan),
        "sockets": plan.sockets,
        "users": {"chat": len(cast.chatters), "browsers": len(cast.browsers)},
        "answers": {
            "asked": len(asks),
            "done": sum(a.status == "done" for a in asks),
            "failed": [f"{a.client_id}: {a.status} {a.error[:160]}" for a in asks if a.status != "done"],
            "tokens": _pcts([float(a.tokens) for a in asks]),
            **_admission(asks),
        },
        "misdelivered": [m for r in rounds for m in r.misdelivered],
        "socket_errors": [e for r in rounds for e in r.socket_errors],
        "refused_handshakes": [e for r in rounds for e in r.refused_handshakes],
        "pages": {
            "requests": len(pages),
            "5xx": sum(status >= 500 for _, status, _ in pages),
            "other_not_200": sorted(
                {f"{path} {status}" for path, status, _ in pages if status != 200 and status < 500}
            ),
            "latency_ms": _pcts([ms for *_, ms in pages]),
            "gradebook_ms": _pcts([ms for path, _, ms in pages if path.endswith("/results/")]),
            "lab_page_ms": _pcts([ms for path, _, ms in pages if LAB_PAGE.match(path)]),
        },
        "token_delay_ms": _token_delays(asks),
        "ping_ms": {
            "inbound": _pcts([ms for r in rounds for ms in r.ping_in_ms]),
            "outbound": _pcts([ms for r in rounds for ms in r.ping_out_ms]),
            "pongs_lost": sum(r.pongs_lost for r in rounds),
            "pongs_late_ms": [ms for r in rounds for ms in r.pongs_late],
        },
        "client_loop_lag_ms": _pcts([ms for r in rounds for ms in r.client_lag_ms]),
        "client_ttft_ms": _pcts([a.ttft_ms for a in asks if a.ttft_ms is not None]),
        "client_token_gap_ms": _pcts([g for a in asks for g in a.gaps_ms]),
        "round_seconds": [r.seconds for r in rounds],
        "rss_mib": rss,
        "rss_last_round_growth_mib": growth,
        "rss_flat": all(g is not None and g < plan.rss_bound_mib for g in growth.values()),
        "jobs": jobs,
        "job": jobs[-1] if jobs else None,
        "saved": saved,
        "first_question": first_question,
    }


def _ratios(over: dict[str, Any], under: dict[str, Any]) -> str:
    """``over`` / ``under`` at p50 and p95 (the gradebook's goal: within 2x an ordinary lab page)."""
    parts = [f"{over[q] / under[q]:.2f}" if over[q] and under[q] else "—" for q in ("p50", "p95")]
    return " / ".join(parts)


def table(report: dict[str, Any]) -> str:
    def p(stats: dict[str, Any]) -> str:
        return f"{stats['p50']} / {stats['p95']} (n={stats['n']})"

    a, pages, plan, saved = report["answers"], report["pages"], report["plan"], report["saved"]
    delays = report["token_delay_ms"]
    rows = [
        ("sockets (two-tab users) / browsers", f"{plan['sockets']} ({plan['tab_pairs']}) / {plan['browsers']}"),
        (
            "rounds × asks per socket, max_tokens, top-k",
            f"{plan['rounds']} × {plan['asks']}, {plan['max_tokens']}, {plan['top_k']}",
        ),
        ("round wall time, s", ", ".join(str(s) for s in report["round_seconds"])),
        ("answers done / failed", f"{a['done']} / {len(a['failed'])} of {a['asked']}"),
        (
            "chat admission: asks refused (line full), then asked again / waited in line p50 / p95, ms",
            f"{a['refused_asks']} ({a['refused']} refusals) / {p(a['queued_ms'])}",
        ),
        (
            "answers saved with all timings",
            f"{saved['asked'] - len(saved['problems'])} of {saved['asked']} (problems: {len(saved['problems'])})",
        ),
        ("misdelivered frames", str(len(report["misdelivered"]))),
        ("socket errors", str(len(report["socket_errors"]))),
        ("handshakes refused, then tried again after 2 s", str(len(report["refused_handshakes"]))),
        (
            "page requests / 5xx / other non-200",
            f"{pages['requests']} / {pages['5xx']} / {len(pages['other_not_200'])}",
        ),
        ("page latency p50 / p95, ms", p(pages["latency_ms"])),
        ("  gradebook page p50 / p95, ms", p(pages["gradebook_ms"])),
        ("  a lab page (/labs/N/) p50 / p95, ms", p(pages["lab_page_ms"])),
        ("  gradebook / lab page, p50 and p95", _ratios(pages["gradebook_ms"], pages["lab_page_ms"])),
        ("websocket token delay, first token p50 / p95, ms", p(delays["first"])),
        ("  of it the question's way in (client → server) p50 / p95, ms", p(delays["first_inbound"])),
        ("  and the first token's way out (server → client) p50 / p95, ms", p(delays["first_outbound"])),
        ("websocket token delay, last token p50 / p95, ms", p(delays["last"])),
        ("  the load client's own event-loop lag (20 ms ticks) p50 / p95, ms", p(report["client_loop_lag_ms"])),
        ("  a ping every 250 ms, client → server p50 / p95, ms", p(report["ping_ms"]["inbound"])),
        ("  the same, server → Redis → client p50 / p95, ms", p(report["ping_ms"]["outbound"])),
        ("  pongs that never came back", str(report["ping_ms"].get("pongs_lost", 0))),
        (f"  pongs back after more than {PONG_WAIT_S:g} s, ms", str(report["ping_ms"].get("pongs_late_ms", []))),
        ("client TTFT p50 / p95, ms", p(report["client_ttft_ms"])),
        ("client gap between token frames p50 / p95, ms", p(report["client_token_gap_ms"])),
    ]
    for name, values in report["rss_mib"].items():
        shown = " → ".join("?" if v is None else f"{v:.0f}" for v in values)
        rows.append((f"RSS {name}, MiB (before → after each round)", shown))
    growth = ", ".join(f"{k} {v}" for k, v in report["rss_last_round_growth_mib"].items())
    flat = "flat" if report["rss_flat"] else "NOT flat"
    rows.append((f"RSS growth in the last round, MiB (bound {plan['rss_bound_mib']:g})", f"{growth}: {flat}"))
    jobs = report["jobs"]
    described = [f"{j['status']} ({j['requests']} requests, {j['seconds']} s) {j['error']}".strip() for j in jobs]
    rows.append(("benchmark job, one per round", "; ".join(described) if jobs else "none"))
    rows.append(_first_question_row(report["first_question"]))
    return aligned(rows)


def _first_question_row(first: dict[str, Any] | None) -> tuple[str, str]:
    if first is None:
        return ("a new process's first question at size", "not asked")
    what = f"a new process's first question at {first['chunks']} chunks, s"
    if first["error"]:
        return (what, f"failed: {first['error']}")
    when = "during the last round" if first["under_load"] else "after the last round, which ended first"
    made = f"its lexical index made current before the rounds: {first['lexical_build_s']} s"
    return (what, f"{first['seconds']} {when} ({made})")


def failures(report: dict[str, Any]) -> list[str]:
    """What makes the run a failure; empty when it passed."""
    found = []
    if report["answers"]["failed"]:
        found.append(f"answers not done: {report['answers']['failed'][:5]}")
    if report["misdelivered"]:
        found.append(f"misdelivered frames: {report['misdelivered'][:5]}")
    if report["socket_errors"]:
        found.append(f"socket errors: {report['socket_errors'][:5]}")
    if report["pages"]["5xx"] or report["pages"]["other_not_200"]:
        found.append(f"pages: {report['pages']['5xx']} 5xx, other: {report['pages']['other_not_200'][:5]}")
    if report["saved"]["problems"]:
        found.append(f"saved answers: {report['saved']['problems'][:5]}")
    for job in report["jobs"]:
        if job["status"] != "done":
            found.append(f"benchmark job: {job}")
    first = report.get("first_question")
    if first is not None and first["error"]:
        found.append(f"first question: {first['error']}")
    if not report["rss_flat"]:
        found.append(f"memory not flat: {report['rss_last_round_growth_mib']}")
    return found
