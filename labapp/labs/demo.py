"""The team demo page: a big-screen sweep of retrieval size with its chart filling in live,
and the same question asked at two settings side by side, summed up as two large numbers.

After a sweep the page is ``/demo/?job=N``: its sliders are set from that job's saved
config, so the controls on the projector always show the settings that made the chart.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from bench import access, charts, configs, engines, kinds, palette, plotting, services
from bench.kinds import retrieval
from bench.models import BenchJob
from labapp import request_numbers
from rag.chunking import CHUNK_SIZES
from rag.views import chat_context

DEMO_KIND = retrieval.KIND.name  # the demo sweeps retrieval size: Lab 4's job kind

TOP_KS = (1, 2, 4, 6, 8, 10)
# Each point the median of this many questions, with its 95 % interval: one question per point
# made the TPOT panel zigzag (80–160 ms) on a CPU. Lab 4's own default, so the two agree.
QUESTIONS = retrieval.RetrievalConfig().questions
SAME_WITHIN = 0.15  # two medians closer than this (as a share) read as "about the same"
DEFAULT_SLIDERS = {"top_k_max": 6, "chunk_size_max": 1000}


def sweep_settings(top_k_max: int, chunk_size_max: int) -> dict[str, str]:
    """The sweep the two sliders ask for: top-k from 1 up to the first, every indexed chunk size up to the second."""
    top_k_max = min(max(1, top_k_max), 10)
    top_ks = sorted({k for k in TOP_KS if k <= top_k_max} | {top_k_max})
    sizes = [s for s in CHUNK_SIZES if s <= chunk_size_max] or [CHUNK_SIZES[0]]
    return {
        "questions": str(QUESTIONS),
        "top_ks": ", ".join(map(str, top_ks)),
        "chunk_sizes": ", ".join(map(str, sizes)),
        "max_tokens": "8",
    }


def swept(job: BenchJob | None) -> dict[str, Any]:
    """The slider positions that produced ``job`` (the defaults without a job), and what it measured."""
    if job is None:
        return {**DEFAULT_SLIDERS, "top_ks": (), "chunk_sizes": ()}
    try:
        config = kinds.config_for(DEMO_KIND, job.config)
    except configs.ConfigError:
        return {**DEFAULT_SLIDERS, "top_ks": (), "chunk_sizes": ()}
    return {
        "top_k_max": max(config.top_ks, default=DEFAULT_SLIDERS["top_k_max"]),
        "chunk_size_max": max(config.chunk_sizes, default=DEFAULT_SLIDERS["chunk_size_max"]),
        "top_ks": tuple(config.top_ks),
        "chunk_sizes": tuple(config.chunk_sizes),
    }


def state_words(job: BenchJob) -> str:
    """The job's state as a sentence for the room: "측정 중 · 15개 중 6개"."""
    counts = {"done": job.done_requests, "total": job.total_requests}
    sentences = {
        BenchJob.Status.QUEUED: _("대기 중 · 엔진이 비기를 기다립니다"),
        BenchJob.Status.RUNNING: _("측정 중 · %(total)d개 중 %(done)d개") % counts,
        BenchJob.Status.DONE: _("완료 · %(total)d개 모두 측정") % counts,
        BenchJob.Status.FAILED: _("실패 · %(total)d개 중 %(done)d개에서 멈춤") % counts,
        BenchJob.Status.CANCELLED: _("취소됨 · %(total)d개 중 %(done)d개 측정") % counts,
    }
    return sentences.get(BenchJob.Status(job.status), job.get_status_display())


def times(ratio: float) -> str:
    """A ratio for the back of a room: "16배", "2.4배" (never "+1484%")."""
    shown = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}".removesuffix(".0")
    return _("%(n)s배") % {"n": shown}


def change_words(before: float, after: float) -> str:
    """How ``after`` compares with ``before``, read from the numbers: "거의 그대로", "3.2배로 늘어남", "2배 줄어듦"."""
    if before <= 0 or after <= 0 or abs(after - before) <= SAME_WITHIN * before:
        return _("거의 그대로")
    if after > before:
        return _("%(times)s로 늘어남") % {"times": times(after / before)}
    return _("%(times)s 줄어듦") % {"times": times(before / after)}


def ms_words(value: float) -> str:
    """A time as the A/B numbers show it: "292 ms", "3.9 s"."""
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.0f} ms"


def caption(results: dict[str, Any]) -> list[str]:
    """What the chart shows, computed from its points (the smallest and largest retrieved context):
    ["문맥 90 → 2,400 토큰: TTFT 292 ms → 4.1 s (14배로 늘어남)", "TPOT 95 ms → 101 ms (거의 그대로)"].
    One line per panel; none until two points of different context are measured: no claim the
    data have not made."""
    points = [
        c
        for c in results.get("cells", [])
        if c.get("completed") and c.get("median_context_tokens") is not None and c.get("median_ttft_ms")
    ]
    if len(points) < 2:
        return []
    small = min(points, key=lambda c: c["median_context_tokens"])
    large = max(points, key=lambda c: c["median_context_tokens"])
    if large["median_context_tokens"] <= small["median_context_tokens"]:
        return []
    ttft = _("문맥 %(small)s → %(large)s 토큰: TTFT %(a)s → %(b)s (%(change)s)") % {
        "small": f"{small['median_context_tokens']:,.0f}",
        "large": f"{large['median_context_tokens']:,.0f}",
        "a": ms_words(small["median_ttft_ms"]),
        "b": ms_words(large["median_ttft_ms"]),
        "change": change_words(small["median_ttft_ms"], large["median_ttft_ms"]),
    }
    a, b = small.get("median_tpot_ms"), large.get("median_tpot_ms")
    if not (a and b):
        return [ttft]
    return [
        ttft,
        _("TPOT %(a)s → %(b)s (%(change)s)") % {"a": ms_words(a), "b": ms_words(b), "change": change_words(a, b)},
    ]


def demo_labels() -> dict[str, str]:
    """The demo script's words (the A/B result), translated here like the chat's."""
    return {
        "setting_a": _("설정 A"),
        "setting_b": _("설정 B"),
        "ttft": _("첫 토큰까지"),
        "total": _("전체"),
        "retrieval": _("검색"),
        "prefill": _("프리필"),
        "decode": _("디코드"),
        "waiting": _("답변을 기다리는 중…"),
        "chunk": _("청크 %(size)s자"),
        "slower": _("B가 A보다 %(pct)s 느림"),
        "faster": _("B가 A보다 %(pct)s 빠름"),
        "times": _("%(n)s배"),
        "slower_times": _("B가 A보다 %(n)s배 느림"),
        "faster_times": _("B가 A보다 %(n)s배 빠름"),
        "same": _("A와 B가 거의 같음"),
        "total_diff": _("전체 시간: %(a)s → %(b)s (%(pct)s)"),
        "sizes_in": _("이번 스윕에 들어갈 청크 크기"),
    }


def sweep_figure(job: BenchJob) -> dict[str, Any] | None:
    """The sweep's chart so far (the kind's chart from the registry, drawn for a projector), None before its
    first point."""
    figures = charts.charts(DEMO_KIND, [(f"#{job.pk}", job.results or {})])
    return plotting.projector(figures[0]["figure"]) if figures else None


@login_required
def demo(request: HttpRequest) -> HttpResponse:
    job = None
    if (job_id := request_numbers.whole(request.GET.get("job"))) is not None:
        job = access.owned_job(request.user, job_id, kind=DEMO_KIND)  # another's: no chart
    context = chat_context(request, None) | {
        "job": job,
        "job_state": state_words(job) if job else "",
        "caption": caption(job.results or {}) if job else [],
        "figure": sweep_figure(job) if job else None,  # drawn at load, before the first poll answers
        "questions": QUESTIONS,
        "swept": swept(job),
        "chunk_sizes": CHUNK_SIZES,
        "chunk_colours": [(size, palette.chunk_colour(size)) for size in CHUNK_SIZES],
        "demo_labels": demo_labels(),
        "palette": {str(size): colour for size, colour in palette.CHUNK_COLOURS.items()},
    }
    return render(request, "demo.html", context)


@login_required
@require_POST
def demo_sweep(request: HttpRequest) -> HttpResponse:
    def number(key: str, default: int) -> int:
        found = request_numbers.whole(request.POST.get(key))
        return default if found is None else found

    config = sweep_settings(number("top_k_max", 6), number("chunk_size_max", 1000))
    try:
        job = services.job_submit(
            owner=request.user,  # type: ignore[arg-type]
            kind=DEMO_KIND,
            config=config,
            engine_url=engines.chosen_url(request.session),
        )
    except services.JobsBusy as exc:
        messages.error(request, str(exc))
        return redirect("demo")
    return redirect(f"/demo/?job={job.pk}")


@login_required
def demo_sweep_state(request: HttpRequest, job_id: int) -> JsonResponse:
    """What the live chart needs: progress in words and the chart of the cells finished so far."""
    job = access.job_for(request.user, job_id, kind=DEMO_KIND)
    return JsonResponse(
        {
            "status": job.status,
            "status_label": job.get_status_display(),
            "state_text": state_words(job),
            "done": job.done_requests,
            "total": job.total_requests,
            "cell": job.current_cell,
            "cells": len((job.results or {}).get("cells", [])),
            "error": job.error_shown,
            "figure": sweep_figure(job),
            "caption": caption(job.results or {}),
        }
    )
