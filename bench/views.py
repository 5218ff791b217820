"""Benchmark job pages: start, watch progress, cancel, see the chart, export."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from bench import jobs, services
from bench.models import BenchJob


class JobForm(forms.Form):
    kind = forms.ChoiceField(label=gettext_lazy("작업"), choices=BenchJob.Kind.choices, initial=BenchJob.Kind.SPEED)
    repeats = forms.IntegerField(label=gettext_lazy("모양마다 반복 횟수"), min_value=1, max_value=5, initial=1)


def job_for(request: HttpRequest, job_id: int) -> BenchJob:
    job = BenchJob.objects.filter(pk=job_id, owner_id=request.user.pk).first()
    if job is None:
        raise Http404("job not found")
    return job


@login_required
def bench_list(request: HttpRequest) -> HttpResponse:
    form = JobForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        kind, config = form.cleaned_data["kind"], {"repeats": form.cleaned_data["repeats"]}
        job = services.job_create(owner=request.user, kind=kind, config=config)  # type: ignore[arg-type]
        return redirect("bench_detail", job_id=job.pk)
    jobs = BenchJob.objects.filter(owner_id=request.user.pk)[:50]
    return render(request, "bench/list.html", {"form": form, "jobs": jobs})


def _load_chart(cells: list[dict[str, Any]]) -> dict[str, Any]:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    levels = [c["concurrency"] for c in cells]
    figure = make_subplots(rows=1, cols=2, subplot_titles=("throughput and goodput", "TTFT and TPOT"))
    figure.add_trace(go.Scatter(x=levels, y=[c["request_throughput"] for c in cells], name="req/s"), row=1, col=1)
    figure.add_trace(go.Scatter(x=levels, y=[c["request_goodput"] for c in cells], name="goodput req/s"), row=1, col=1)
    for key, name in (("median_ttft_ms", "TTFT p50"), ("p99_ttft_ms", "TTFT p99"), ("median_tpot_ms", "TPOT p50")):
        figure.add_trace(go.Scatter(x=levels, y=[c[key] for c in cells], name=f"{name} (ms)"), row=1, col=2)
    figure.update_xaxes(title_text="concurrency", type="log")
    figure.update_layout(height=380, margin={"t": 40, "l": 50, "r": 20, "b": 40})
    return dict(json.loads(figure.to_json()))


def _chart(job: BenchJob) -> dict[str, Any] | None:
    cells = [c for c in (job.results or {}).get("cells", []) if c.get("completed")]
    if not cells:
        return None
    if "concurrency" in cells[0]:
        return _load_chart(cells)
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, subplot_titles=("TTFT vs input tokens", "decode time vs output tokens"))
    figure.add_trace(
        go.Scatter(
            x=[c["input_tokens"] for c in cells],
            y=[c["median_ttft_ms"] for c in cells],
            mode="markers",
            name="median TTFT (ms)",
        ),
        row=1,
        col=1,
    )
    figure.add_trace(
        go.Scatter(
            x=[c["output_tokens"] for c in cells],
            y=[c["median_decode_ms"] for c in cells],
            mode="markers",
            name="median decode time (ms)",
        ),
        row=1,
        col=2,
    )
    fits = (job.results or {}).get("fits") or {}
    for column, key, xs in (
        (1, "ttft_vs_input", [c["input_tokens"] for c in cells]),
        (2, "decode_vs_output", [c["output_tokens"] - 1 for c in cells]),
    ):
        fit = fits.get(key)
        if fit and xs:
            ends = [min(xs), max(xs)]
            line = go.Scatter(
                x=[x + (1 if column == 2 else 0) for x in ends],
                y=[fit["slope"] * x + fit["intercept"] for x in ends],
                mode="lines",
                name=f"fit (r² {fit['r2']:.3f})",
            )
            figure.add_trace(line, row=1, col=column)
    figure.update_xaxes(title_text="input tokens", row=1, col=1)
    figure.update_xaxes(title_text="output tokens", row=1, col=2)
    figure.update_yaxes(title_text="ms")
    figure.update_layout(height=380, margin={"t": 40, "l": 50, "r": 20, "b": 40}, showlegend=False)
    return dict(json.loads(figure.to_json()))


@login_required
def bench_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_for(request, job_id)
    context = {"job": job, "position": services.queue_position(job), "chart": _chart(job)}
    template = "bench/job_panel.html" if request.headers.get("HX-Request") == "true" else "bench/detail.html"
    return render(request, template, context)


@login_required
@require_POST
def bench_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    services.job_cancel(job=job_for(request, job_id))
    return redirect("bench_detail", job_id=job_id)


@login_required
def bench_export(request: HttpRequest, job_id: int, fmt: str) -> HttpResponse:
    job = job_for(request, job_id)
    if fmt == "json":
        data = {"id": job.pk, "kind": job.kind, "status": job.status, "config": job.config,
                "engine_url": job.engine_url, "results": job.results}  # fmt: skip
        response: HttpResponse = JsonResponse(data, json_dumps_params={"ensure_ascii": False, "indent": 1})
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=jobs.CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(jobs.csv_rows(job.results))
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="bench-{job.pk}.{fmt}"'
    return response
