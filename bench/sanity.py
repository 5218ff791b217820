"""Whether a load run can be trusted, as pure code: Little's law, saturation, preemptions.

Every figure here comes from a level's own request records and the engine's /metrics
samples taken while it ran (``rag.vllm.server_metrics``); nothing reads a clock.

- **Little's law.** In a steady system the mean number of requests in flight L equals
  the throughput λ times the mean time in the system W. The client's λ·W is compared
  with what should have been in flight: the concurrency it was asked to keep, and the
  mean the engine itself reported (running + waiting). A large error means requests
  waited somewhere neither side counts (the client's own queue, the network), other
  traffic shared the engine, or the level was too short to be steady.
- **Saturation.** Past the rate the engine can serve, its queue grows for as long as
  requests keep arriving: later requests wait longer (TTFT rises through the level)
  and more of them are in flight when each new one is sent.
- **Preemptions.** vLLM evicts a running request's KV cache when it runs out of blocks
  and recomputes it later: the run measured recomputation, not only serving.
"""

from __future__ import annotations

import statistics
from typing import Any

from rag.vllm.records import RequestRecord

LITTLE_TOLERANCE_PCT = 20.0  # |λ·W − L| / L above this is flagged
MIN_ENGINE_SAMPLES = 5  # fewer /metrics samples inside a level give no engine mean (one sample is 1/5 of it)
RISE_FACTOR = 1.5  # the second half's median TTFT this many times the first's ...
RISE_MIN_S = 0.05  # ... and at least this much more: a rise, not noise
KNEE_FACTOR = 2.0  # a ramp's rolling TTFT this many times its first requests' median: past saturation


def _finished(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.success and r.t_end is not None]


def in_flight_when_sent(records: list[RequestRecord]) -> list[int]:
    """For each successful request in send order: how many others were in flight when it was sent."""
    done = sorted(_finished(records), key=lambda r: r.t_send)
    return [sum(1 for o in done if o is not r and o.t_send <= r.t_send < (o.t_end or 0.0)) for r in done]


def engine_in_flight(timeline: dict[str, list[float]] | None, start: float, end: float) -> float | None:
    """The engine's mean requests held (running + waiting) over its samples inside (start, end); None with fewer
    than ``MIN_ENGINE_SAMPLES`` (the samples at a level's very edges see it empty)."""
    if not timeline or not timeline.get("t"):
        return None
    held = [
        running + waiting
        for at, running, waiting in zip(timeline["t"], timeline["running"], timeline["waiting"], strict=True)
        if start < at < end
    ]
    return statistics.fmean(held) if len(held) >= MIN_ENGINE_SAMPLES else None


def little(
    records: list[RequestRecord], *, duration: float, target: float | None, timeline: dict[str, list[float]] | None
) -> dict[str, Any]:
    """λ·W from the records against the concurrency asked for (``target``) and the engine's own mean.

    W is each request's time in the system (send to end of stream), λ the completed requests per
    second of the level. Errors are percentages of the compared figure; ``ok`` is False when one
    of them is beyond ``LITTLE_TOLERANCE_PCT``.
    """
    done = _finished(records)
    if not done or duration <= 0:
        return {"lambda_w": None, "ok": None}
    rate = len(done) / duration
    mean_w = statistics.fmean((r.t_end or r.t_send) - r.t_send for r in done)
    lambda_w = rate * mean_w
    start, end = min(r.t_send for r in done), max(r.t_end or r.t_send for r in done)
    engine = engine_in_flight(timeline, start, end)
    out: dict[str, Any] = {"throughput": rate, "mean_w_s": mean_w, "lambda_w": lambda_w, "target": target}
    out["engine_in_flight"] = engine
    for key, compared in (("target", target), ("engine", engine)):
        error = 100 * (lambda_w - compared) / compared if compared else None
        out[f"error_vs_{key}_pct"] = error
        out[f"{key}_ok"] = None if error is None else abs(error) <= LITTLE_TOLERANCE_PCT
    # The client's own check where it was asked for a concurrency, else the engine's count.
    out["ok"] = out["target_ok"] if target else out["engine_ok"]
    return out


def rising(records: list[RequestRecord]) -> dict[str, Any]:
    """Whether the queue grew through the level: TTFT and in-flight-at-send both higher in its second half."""
    done = sorted((r for r in _finished(records) if r.ttft is not None), key=lambda r: r.t_send)
    if len(done) < 4:
        return {"saturated": None}
    half = len(done) // 2
    ttft = [float(r.ttft or 0.0) for r in done]
    busy = in_flight_when_sent(done)
    first_ttft, second_ttft = statistics.median(ttft[:half]), statistics.median(ttft[half:])
    first_busy, second_busy = statistics.fmean(busy[:half]), statistics.fmean(busy[half:])
    ttft_rose = second_ttft > max(RISE_FACTOR * first_ttft, first_ttft + RISE_MIN_S)
    return {
        "saturated": bool(ttft_rose and second_busy > first_busy),
        "ttft_first_half_ms": 1000 * first_ttft,
        "ttft_second_half_ms": 1000 * second_ttft,
        "in_flight_first_half": first_busy,
        "in_flight_second_half": second_busy,
    }


def level(
    records: list[RequestRecord],
    *,
    duration: float,
    mode: str,
    level: float,
    server: dict[str, Any],
) -> dict[str, Any]:
    """A level's sanity: Little's law, (at a request rate) saturation and the rate achieved, preemptions."""
    timeline = server.get("timeline")
    target = level if mode == "concurrency" else None
    out: dict[str, Any] = {"little": little(records, duration=duration, target=target, timeline=timeline)}
    out["preemptions"] = server.get("preemptions")
    if mode == "rate":
        out["rising"] = rising(records)
        achieved = out["little"].get("throughput")
        out["achieved_share"] = achieved / level if achieved is not None and level else None
    return out


def ramp_knee(records: list[RequestRecord], rates: list[float], *, window: int = 5, base: int = 8) -> float | None:
    """The target rate (req/s) at which a ramp's TTFT left its starting level: the first request whose
    last ``window`` TTFTs have a median ``KNEE_FACTOR`` times the first ``base`` requests' median (and
    ``RISE_MIN_S`` more); None when it never did."""
    ordered = sorted(
        ((r, rate) for r, rate in zip(records, rates, strict=True) if r.success and r.ttft is not None),
        key=lambda pair: pair[0].t_send,
    )
    if len(ordered) < base + window:
        return None
    ttft = [float(r.ttft or 0.0) for r, _rate in ordered]
    start = statistics.median(ttft[:base])
    for i in range(base + window - 1, len(ordered)):
        recent = statistics.median(ttft[i - window + 1 : i + 1])
        if recent > max(KNEE_FACTOR * start, start + RISE_MIN_S):
            return ordered[i][1]
    return None


def run_summary(cells: list[dict[str, Any]], *, mode: str) -> dict[str, Any]:
    """The job's sanity line: levels that broke Little's law, the first saturated level, preemptions."""
    littles = [(c["level"], (c.get("sanity") or {}).get("little") or {}) for c in cells]
    broken = [level for level, little in littles if little.get("ok") is False]
    apart = [level for level, little in littles if little.get("engine_ok") is False]
    saturated = [c["level"] for c in cells if (((c.get("sanity") or {}).get("rising") or {}).get("saturated"))]
    preempted = [p for c in cells if (p := (c.get("sanity") or {}).get("preemptions")) is not None]
    return {
        "little_broken_levels": broken,
        "engine_apart_levels": apart,
        "saturated_level": min(saturated) if saturated and mode == "rate" else None,
        "preemptions": sum(preempted) if preempted else None,
    }
