"""The team demo page: a big-screen sweep of retrieval size with its chart filling in live,
and the same question asked at two settings side by side with their timing panels."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from bench import access, charts, engines, services
from bench.kinds import retrieval
from rag.chunking import CHUNK_SIZES
from rag.views import chat_context

DEMO_KIND = retrieval.KIND.name  # the demo sweeps retrieval size: Lab 4's job kind

TOP_KS = (1, 2, 4, 6, 8, 10)


def sweep_settings(top_k_max: int, chunk_size_max: int) -> dict[str, str]:
    """The sweep the two sliders ask for: top-k from 1 up to the first, every indexed chunk size up to the second."""
    top_k_max = min(max(1, top_k_max), 10)
    top_ks = sorted({k for k in TOP_KS if k <= top_k_max} | {top_k_max})
    sizes = [s for s in CHUNK_SIZES if s <= chunk_size_max] or [CHUNK_SIZES[0]]
    return {
        "questions": "1",
        "top_ks": ", ".join(map(str, top_ks)),
        "chunk_sizes": ", ".join(map(str, sizes)),
        "max_tokens": "8",
    }


@login_required
def demo(request: HttpRequest) -> HttpResponse:
    job = None
    if request.GET.get("job", "").isdigit():
        job = access.owned_job(request.user, int(request.GET["job"]), kind=DEMO_KIND)  # another's: no chart
    context = chat_context(request, None) | {"job": job, "chunk_sizes": CHUNK_SIZES}
    return render(request, "demo.html", context)


@login_required
@require_POST
def demo_sweep(request: HttpRequest) -> HttpResponse:
    def number(key: str, default: int) -> int:
        value = request.POST.get(key, "")
        return int(value) if value.isdigit() else default

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
    """What the live chart needs: progress and the chart of the cells finished so far."""
    job = access.job_for(request.user, job_id, kind=DEMO_KIND)
    figures = charts.charts(DEMO_KIND, [(f"#{job.pk}", job.results or {})])
    return JsonResponse(
        {
            "status": job.status,
            "status_label": job.get_status_display(),
            "done": job.done_requests,
            "total": job.total_requests,
            "cell": job.current_cell,
            "cells": len((job.results or {}).get("cells", [])),
            "error": job.error,
            "figure": figures[0]["figure"] if figures else None,
        }
    )
