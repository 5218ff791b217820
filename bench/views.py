"""Benchmark job pages: start, watch progress, cancel, see the charts, compare, export."""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from bench import access, charts, comparison, configs, engines, exports, plotting, pools, provenance, services, stats
from bench.forms import ImportForm, JobForm
from bench.imports import NotImportable
from bench.imports import registry as importers
from bench.kinds import registry
from bench.models import BenchJob
from labapp import request_numbers
from rag.vllm import client as vllm_client


def engine_max_model_len() -> int:
    """The engine's own limit when it answers, else the configured one."""
    try:
        return int(vllm_client.engine_info(timeout=2.0).max_model_len or settings.VLLM_MAX_MODEL_LEN)
    except vllm_client.EngineUnavailable:
        return int(settings.VLLM_MAX_MODEL_LEN)


@login_required
def bench_list(request: HttpRequest) -> HttpResponse:
    services.jobs_reap_stale()
    form = JobForm(
        request.POST or None, request.FILES or None, shown=request.GET.get("kind"), max_model_len=engine_max_model_len
    )
    if request.method == "POST" and form.is_valid():
        try:
            registry.get(form.cleaned_data["kind"]).check_engines(engines.chosen_url(request.session))
            job = services.job_submit(
                owner=request.user,  # type: ignore[arg-type]
                kind=form.cleaned_data["kind"],
                config=form.cleaned_data["config"],
                engine_url=engines.chosen_url(request.session),
                pinned=request.POST.get("pinned") == "on",  # else any free measuring engine of its pool
            )
            return redirect("bench_detail", job_id=job.pk)
        except configs.ConfigError as exc:  # e.g. too few engines in the pool for this kind
            form.add_error(None, exc.message)
        except services.JobsBusy as exc:
            form.add_error(None, str(exc))  # nothing is made: one of theirs has to end first
    mine = access.jobs_of(request.user)[:50]
    # The runs an upload just made (a GuideLLM sweep's), listed and ticked for comparing; only the user's own.
    just = request_numbers.wholes(request.GET.getlist("imported"))[: importers.MAX_RUNS]
    found = access.jobs_of(request.user).filter(pk__in=just).order_by("pk") if just else []
    imported = [job for job in found if not job.runnable]
    options = engines.choices()
    queue_rows = [
        {"job": j, "mine": access.owns(request.user, j), "place": at, "engine": engines.name_of(j.engine_url, options)}
        for j, at in pools.board()
    ]
    engine = engines.chosen_url(request.session)
    queue = pools.queue_of(engine)
    context = {"form": form, "jobs": mine, "queue": queue_rows, "engine_name": engines.name_of(engine, options)}
    context |= {"imported": imported, "imported_ids": {job.pk for job in imported}}
    # Pinning means something only when another measuring engine could take the job instead.
    context["pin_choice"] = len(pools.measurers(queue, options)) > 1
    return render(request, "bench/list.html", context | {"engine_url": engine, "queue_of": queue})


def _charts(kind: str, jobs_: list[BenchJob]) -> list[dict[str, Any]]:
    return charts.charts(kind, [(f"#{j.pk}", j.results or {}) for j in jobs_])


@login_required
def bench_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    services.jobs_reap_stale()
    job = access.job_for(request.user, job_id)
    context: dict[str, Any] = {"job": job, "place": pools.place(job), "charts": _charts(job.kind, [job])}
    context["engine_name"] = engines.name_of(job.engine_url)
    template = "bench/job_panel.html" if request.headers.get("HX-Request") == "true" else "bench/detail.html"
    return render(request, template, context)


SettingRow = tuple[str, list[str]]  # (label, the value of each job)


def _setting_values(job: BenchJob) -> dict[str, str]:
    """A job's settings as the form shows them (its defaults filled in), by field name."""
    kind = registry.find(job.kind)
    if kind is None:
        return {}
    config = kind.saved_config(job.config or {})
    values: dict[str, str] = {}
    for field in kind.fields:
        if config is None:  # saved settings that no longer read: what was stored
            values[field.name] = str((job.config or {}).get(field.name, "—"))
        elif field.widget == "jsonl":
            values[field.name] = str(len(getattr(config, field.attribute) or ())) + " " + str(gettext_lazy("프롬프트"))
        else:
            values[field.name] = field.shown(getattr(config, field.attribute))
    if config is not None and hasattr(config, "seed"):
        values["seed"] = str(config.seed)
    return values


def settings_diff(jobs: list[BenchJob]) -> tuple[list[SettingRow], list[SettingRow]]:
    """The compared jobs' settings side by side: (the rows that differ, the rows every job shares)."""
    kind = registry.find(jobs[0].kind) if jobs else None
    labels = {field.name: str(field.label) for field in (kind.fields if kind else ())}
    labels["seed"] = str(gettext_lazy("시드"))
    per_job = [_setting_values(job) for job in jobs]
    rows: list[SettingRow] = [(labels[name], [values.get(name, "—") for values in per_job]) for name in labels]
    rows.append((str(gettext_lazy("엔진")), [engines.name_of(job.engine_url) for job in jobs]))
    rows.append((str(gettext_lazy("모델")), [str((job.results or {}).get("model") or "—") for job in jobs]))
    differ = [row for row in rows if len(set(row[1])) > 1]
    same = [row for row in rows if len(set(row[1])) <= 1]
    return differ, same


NOISE_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))


def noise_rows(jobs: list[BenchJob]) -> list[dict[str, Any]]:
    """Per cell the jobs share (by name) and per median: each job's median with its 95 % interval, and
    whether every later job's interval overlaps the first's (a difference inside the noise)."""
    kind = jobs[0].kind
    by_job = [{exports.cell_name(kind, c): c for c in plotting.cells(job.results or {})} for job in jobs]
    rows = []
    for name in [n for n in by_job[0] if all(n in cells for cells in by_job[1:])]:
        for metric, label in NOISE_METRICS:
            found = [(cells[name].get(f"median_{metric}_ms"), cells[name].get(f"ci_{metric}_ms")) for cells in by_job]
            if any(median is None for median, _ci in found):
                continue
            verdicts = [stats.overlaps(found[0][1], ci) for _median, ci in found[1:]]
            inside = None if None in verdicts else all(verdicts)
            found_kind = registry.find(kind)
            cell = found_kind.shown_cell(by_job[0][name]) if found_kind is not None else name
            rows.append({"cell": cell, "metric": label, "values": found, "inside_noise": inside})
    return rows


@login_required
def bench_import(request: HttpRequest) -> HttpResponse:
    """Another tool's result file (or the files of one run, AIPerf's two) read into done jobs of the learner's
    (``bench.imports``); one job's page after, or the list with every job a file made (a GuideLLM sweep)."""
    form = ImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        files = [(str(upload.name), upload.read()) for upload in form.cleaned_data["result_file"]]
        try:
            made = services.job_import(owner=request.user, files=files)  # type: ignore[arg-type]
            if len(made) == 1:
                return redirect("bench_detail", job_id=made[0].pk)
            return redirect(reverse("bench_list") + "?" + urlencode([("imported", job.pk) for job in made]))
        except NotImportable as exc:
            form.add_error("result_file", exc.message)  # nothing was saved
    status = 400 if request.method == "POST" else 200
    return render(request, "bench/import.html", {"form": form, "tools": importers.all_importers()}, status=status)


@login_required
@require_POST
def bench_delete(request: HttpRequest, job_id: int) -> HttpResponse:
    """The owner's imported run removed (``access.job_to_delete``: a run measured here is not found)."""
    services.job_delete(job=access.job_to_delete(request.user, job_id))
    return redirect("bench_list")


@login_required
def bench_compare(request: HttpRequest) -> HttpResponse:
    """Two or more of the learner's jobs: of one kind, drawn over each other with how their settings differ;
    of several kinds, what every kind measures alike and a comparison of each kind's own jobs."""
    ids = request_numbers.wholes(request.GET.getlist("ids"))
    chosen = access.jobs_for(request.user, ids)  # another user's id among them: 404
    if len(chosen) < 2:
        error = str(gettext_lazy("비교하려면 작업을 두 개 이상 고르세요."))
        return render(request, "bench/compare.html", {"jobs": chosen, "error": error}, status=400)
    context: dict[str, Any] = {"provenance_diff": provenance.differences([j.provenance for j in chosen])}
    if len({j.kind for j in chosen}) > 1 or not all(j.runnable for j in chosen):
        rows = [comparison.pooled(j) for j in chosen]
        context |= {"jobs": chosen, "groups": comparison.kind_groups(chosen), "metrics": comparison.COMMON_METRICS}
        context |= {"pooled": rows, "verdicts": comparison.verdicts(rows)}
        return render(request, "bench/compare_kinds.html", context)
    differ, same = settings_diff(chosen)
    context |= {"jobs": chosen, "charts": _charts(chosen[0].kind, chosen), "differ": differ, "same": same}
    return render(request, "bench/compare.html", context | {"noise": noise_rows(chosen)})


@login_required
@require_POST
def bench_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    services.job_cancel(job=access.job_for(request.user, job_id))
    return redirect("bench_detail", job_id=job_id)


@login_required
def bench_export(request: HttpRequest, job_id: int, fmt: str) -> HttpResponse:
    job = access.job_for(request.user, job_id)
    if fmt == "json":
        data = exports.job_json(job, model=str((job.results or {}).get("model", "")))
        response: HttpResponse = JsonResponse(data, json_dumps_params={"ensure_ascii": False, "indent": 1})
    else:
        out = io.StringIO()
        if fmt == "engine.csv":
            exports.write_engine_csv(out, exports.engine_rows(job.kind, job.results or {}), provenance=job.provenance)
        else:
            exports.write_csv(out, exports.csv_rows(job.kind, job.results), provenance=job.provenance)
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    name = f"bench-{job.pk}-engine.csv" if fmt == "engine.csv" else f"bench-{job.pk}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
