"""Benchmark job pages: start, watch progress, cancel, see the charts, compare, export."""

from __future__ import annotations

import csv
import io
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from bench import charts, configs, engines, exports, jobs, services
from bench.models import BenchJob
from rag.vllm import client as vllm_client

# Every setting a job kind reads, with the kinds it belongs to (the page shows the
# selected kind's fields). Empty = the kind's default; the job's config_for checks them.
FIELDS: list[tuple[str, Any, str, str]] = [
    ("repeats", gettext_lazy("반복 횟수"), "speed sweep load", "1"),
    ("input_lengths", gettext_lazy("입력 길이들 (토큰, 쉼표로)"), "sweep", "100, 400, 800, 1600"),
    ("output_lengths", gettext_lazy("출력 길이들 (토큰, 쉼표로)"), "sweep", "16, 64, 128, 256"),
    ("mode", gettext_lazy("부하 방식 (concurrency 또는 rate)"), "load", "concurrency"),
    ("concurrencies", gettext_lazy("동시성 단계들"), "load", "1, 2, 4, 8"),
    ("rates", gettext_lazy("요청률 단계들 (req/s)"), "load", "0.5, 1, 2, 4"),
    ("burstiness", gettext_lazy("버스트 정도 (1 = 포아송)"), "load", "1"),
    ("workload", gettext_lazy("작업량 (synthetic, shared_prefix, rag, custom)"), "load", "synthetic"),
    ("input_tokens", gettext_lazy("입력 토큰"), "load", "256"),
    ("output_tokens", gettext_lazy("출력 토큰"), "load", "32"),
    ("prefixes", gettext_lazy("공유 프리픽스 개수"), "load", "2"),
    ("prefix_tokens", gettext_lazy("프리픽스 길이 (토큰)"), "load", "512"),
    ("slo_ttft_ms", gettext_lazy("SLO: TTFT 상한 (ms)"), "load", "3000"),
    ("slo_tpot_ms", gettext_lazy("SLO: TPOT 상한 (ms)"), "load", "200"),
    ("questions", gettext_lazy("질문 수"), "retrieval short", "2"),
    ("contexts", gettext_lazy("문맥 수"), "prefix", "2"),
    ("top_ks", gettext_lazy("top-k 값들"), "retrieval", "1, 3, 5"),
    ("chunk_sizes", gettext_lazy("청크 크기들 (자)"), "retrieval", "200, 500, 1000"),
    ("top_k", gettext_lazy("top-k"), "load prefix short", "3"),
    ("chunk_size", gettext_lazy("청크 크기 (자)"), "load prefix short", "500"),
    ("max_tokens", gettext_lazy("최대 출력 토큰"), "retrieval prefix", "24"),
    ("normal_tokens", gettext_lazy("보통 답변의 max_tokens"), "short", "160"),
    ("cap_tokens", gettext_lazy("짧은 답변의 상한"), "short", "32"),
]


class JobForm(forms.Form):
    kind = forms.ChoiceField(label=gettext_lazy("작업"), choices=BenchJob.Kind.choices, initial=BenchJob.Kind.SPEED)
    custom_file = forms.FileField(label=gettext_lazy('사용자 작업량 (JSONL, 한 줄에 {"prompt": …})'), required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, label, kinds, placeholder in FIELDS:
            field = forms.CharField(label=label, required=False, max_length=200)
            field.widget.attrs.update({"placeholder": placeholder, "data-kinds": kinds})
            self.fields[name] = field
        self.fields["custom_file"].widget.attrs["data-kinds"] = "load"
        self.order_fields(["kind", *[name for name, *_ in FIELDS], "custom_file"])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("kind")
        if not kind:
            return data
        raw: dict[str, Any] = {name: data[name].strip() for name, *_ in FIELDS if data.get(name)}
        try:
            upload = data.get("custom_file")
            if upload is not None and raw.get("workload") == "custom":
                raw["custom"] = [
                    {"prompt": c.prompt, "max_tokens": c.max_tokens} for c in configs.jsonl_parse(upload.read())
                ]
            jobs.config_for(kind, raw, max_model_len=engine_max_model_len())
        except configs.ConfigError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
            return data
        data["config"] = raw
        return data


def engine_max_model_len() -> int:
    """The engine's own limit when it answers, else the configured one."""
    try:
        return int(vllm_client.engine_info(timeout=2.0).max_model_len or settings.VLLM_MAX_MODEL_LEN)
    except vllm_client.EngineUnavailable:
        return int(settings.VLLM_MAX_MODEL_LEN)


def job_for(request: HttpRequest, job_id: int) -> BenchJob:
    job = BenchJob.objects.filter(pk=job_id, owner_id=request.user.pk).first()
    if job is None:
        raise Http404("job not found")
    return job


@login_required
def bench_list(request: HttpRequest) -> HttpResponse:
    services.jobs_reap_stale()
    form = JobForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.job_submit(
                owner=request.user,  # type: ignore[arg-type]
                kind=form.cleaned_data["kind"],
                config=form.cleaned_data["config"],
                engine_url=engines.chosen_url(request.session),
            )
            return redirect("bench_detail", job_id=job.pk)
        except services.JobsBusy as exc:
            form.add_error(None, str(exc))  # nothing is made: one of theirs has to end first
    mine = BenchJob.objects.filter(owner_id=request.user.pk)[:50]
    queue = BenchJob.objects.filter(status__in=[BenchJob.Status.QUEUED, BenchJob.Status.RUNNING]).order_by("pk")
    queue_rows = [
        {"job": j, "mine": j.owner_id == request.user.pk, "position": services.queue_position(j)} for j in queue
    ]
    engine = engines.chosen_url(request.session)
    context = {"form": form, "jobs": mine, "queue": queue_rows, "engine_name": engines.name_of(engine)}
    return render(request, "bench/list.html", context | {"engine_url": engine})


def _charts(kind: str, jobs_: list[BenchJob]) -> list[dict[str, Any]]:
    return charts.charts(kind, [(f"#{j.pk}", j.results or {}) for j in jobs_])


@login_required
def bench_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    services.jobs_reap_stale()
    job = job_for(request, job_id)
    context = {"job": job, "position": services.queue_position(job), "charts": _charts(job.kind, [job])}
    context["engine_name"] = engines.name_of(job.engine_url)
    template = "bench/job_panel.html" if request.headers.get("HX-Request") == "true" else "bench/detail.html"
    return render(request, template, context)


@login_required
def bench_compare(request: HttpRequest) -> HttpResponse:
    """Two or more of the learner's finished jobs of one kind, drawn over each other."""
    ids = [int(i) for i in request.GET.getlist("ids") if i.isdigit()]
    chosen = list(BenchJob.objects.filter(owner_id=request.user.pk, pk__in=ids).order_by("pk"))
    error = ""
    if len(chosen) < 2:
        error = str(gettext_lazy("비교하려면 작업을 두 개 이상 고르세요."))
    elif len({j.kind for j in chosen}) > 1:
        error = str(gettext_lazy("같은 종류의 작업끼리만 겹쳐 그릴 수 있습니다."))
    figures = [] if error else _charts(chosen[0].kind, chosen)
    status = 400 if error else 200
    return render(request, "bench/compare.html", {"jobs": chosen, "charts": figures, "error": error}, status=status)


@login_required
@require_POST
def bench_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    services.job_cancel(job=job_for(request, job_id))
    return redirect("bench_detail", job_id=job_id)


@login_required
def bench_export(request: HttpRequest, job_id: int, fmt: str) -> HttpResponse:
    job = job_for(request, job_id)
    if fmt == "json":
        data = exports.job_json(job, model=str((job.results or {}).get("model", "")))
        response: HttpResponse = JsonResponse(data, json_dumps_params={"ensure_ascii": False, "indent": 1})
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=exports.CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(exports.csv_rows(job.results))
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="bench-{job.pk}.{fmt}"'
    return response
