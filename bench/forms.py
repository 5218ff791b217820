"""The job form of /bench/: one field per setting of the registry's kinds, each shown for the kinds that read it.

A field left empty runs with the kind's default, which is the one the field shows
(its placeholder, or the selected option of a choice): both come from the kind's
config dataclass. A field read by several kinds carries every kind's default in
``data-defaults``; the page shows the chosen kind's (``lab/bench.js``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy

from bench import configs, kinds
from bench.imports import registry as importers
from bench.kinds import registry
from bench.kinds.registry import Field, JobKind

# What each number means and its unit, for a setting whose kind gives no help text of its own.
HELP: dict[str, Any] = {
    "repeats": gettext_lazy(
        "같은 측정을 몇 번 되풀이할지. 많을수록 중앙값이 안정됩니다 (부하 스윕: 단계마다 8 × 반복 횟수 요청)."
    ),
    "mode": gettext_lazy(
        "동시성: 늘 정해진 수만큼 요청을 띄워 둡니다. "
        "요청률: 초당 정해진 수만큼 보내고, 밀리면 클라이언트에서 기다립니다. "
        "램프: 한 번의 실행 안에서 요청률을 시작 값에서 끝 값까지 올립니다."
    ),
    "at_saturation": gettext_lazy(
        "요청률 단계에서 TTFT와 진행 중인 요청 수가 단계 안에서 함께 늘면 엔진이 포화된 것입니다. "
        "멈추면 그보다 높은 단계는 재지 않습니다."
    ),
    "ramp_strategy": gettext_lazy("선형: 요청마다 같은 양씩, 지수: 요청마다 같은 비율로 요청률이 오릅니다."),
    "ramp_start_rps": gettext_lazy("램프의 첫 요청이 따르는 요청률, req/s."),
    "ramp_end_rps": gettext_lazy("램프의 마지막 요청이 따르는 요청률, req/s (시작보다 커야 합니다)."),
    "ramp_requests": gettext_lazy("램프 한 번에 보내는 요청 수. 많을수록 포화 지점이 또렷합니다."),
    "concurrencies": gettext_lazy("동시에 진행시킬 요청 수의 단계들, 쉼표로 (예: 1, 2, 4, 8). 단계마다 따로 잽니다."),
    "rates": gettext_lazy("초당 보내는 요청 수(req/s)의 단계들, 쉼표로. 요청 사이 간격은 감마 분포에서 뽑습니다."),
    "burstiness": gettext_lazy(
        "요청 간격이 얼마나 몰리는지. 1 = 포아송(무작위), 1보다 작으면 몰려서, 크면 고르게 도착합니다."
    ),
    "workload": gettext_lazy("보낼 프롬프트의 종류."),
    "input_tokens": gettext_lazy("요청 하나의 프롬프트 길이, 토큰 (서버가 돌려준 사용량(usage)으로 확인합니다)."),
    "output_tokens": gettext_lazy("요청 하나가 생성할 토큰 수 (max_tokens, 중간에 멈추지 않게 합니다)."),
    "prefixes": gettext_lazy("공유 프리픽스 작업량에서 서로 다른 공통 머리말의 개수."),
    "prefix_tokens": gettext_lazy("공통 머리말 하나의 길이, 토큰."),
    "slo_ttft_ms": gettext_lazy(
        "첫 토큰까지 시간(TTFT)의 목표 상한, 밀리초. TTFT와 TPOT를 모두 지킨 요청만 굿풋에 셉니다."
    ),
    "slo_tpot_ms": gettext_lazy("첫 토큰 뒤 출력 토큰 하나당 시간(TPOT)의 목표 상한, 밀리초."),
    "top_k": gettext_lazy("질문마다 검색해 프롬프트에 넣는 청크 수 (0 = 검색 없이)."),
    "chunk_size": gettext_lazy("문서를 자른 청크 하나의 크기, 글자 수 (색인된 크기 중에서)."),
    "questions": gettext_lazy("평가 질문 몇 개로 잴지. 경우마다 같은 질문을 씁니다."),
    "top_ks": gettext_lazy("비교할 top-k 값들, 쉼표로 (0 = 검색 없이)."),
    "max_tokens": gettext_lazy("답 하나의 최대 출력 토큰 (max_tokens)."),
    "contexts": gettext_lazy("캐시 실험에 쓰는 서로 다른 긴 문맥의 수."),
    "input_lengths": gettext_lazy("입력 스윕에서 잴 프롬프트 길이들, 토큰, 쉼표로."),
    "fixed_output": gettext_lazy("입력 스윕 동안 고정하는 출력 길이, 토큰."),
    "output_lengths": gettext_lazy("출력 스윕에서 잴 출력 길이들, 토큰, 쉼표로."),
    "fixed_input": gettext_lazy("출력 스윕 동안 고정하는 입력 길이, 토큰."),
    "normal_tokens": gettext_lazy("짧게 하라는 지시도 상한도 없는 보통 답변의 max_tokens, 토큰."),
    "caps": gettext_lazy("짧은 답변에 걸어 볼 max_tokens 상한들, 토큰, 쉼표로."),
}
RADIOS_MOST = 4  # a choice of at most this many options shows every option at once (radios)


def help_text(field: Field) -> Any:
    """The field's own help text, else what ``HELP`` says about its setting."""
    return field.help_text or HELP.get(field.name, "")


def form_fields(every: list[JobKind]) -> dict[str, tuple[Field, list[JobKind]]]:
    """Each setting's name → (its field as the first kind declares it, every kind that reads it)."""
    out: dict[str, tuple[Field, list[JobKind]]] = {}
    for kind in every:
        for field in kind.fields:
            first, users = out.get(field.name, (field, []))
            out[field.name] = (first, [*users, kind])
    return out


def shown_default(kind: JobKind, name: str) -> str:
    """How the form shows ``kind``'s default of the setting ``name``."""
    field = next(f for f in kind.fields if f.name == name)
    return field.shown(getattr(kind.default(), field.attribute))


def _widget_attrs(fields: list[Field]) -> dict[str, Any]:
    """A number input's bounds: the widest of the kinds' (each kind checks its own)."""
    field = fields[0]
    if field.widget not in ("integer", "real"):
        return {}
    step = "1" if field.widget == "integer" else "any"
    return {"min": f"{min(f.low for f in fields):g}", "max": f"{max(f.high for f in fields):g}", "step": step}


def form_field(name: str, field: Field, users: list[JobKind], shown: str) -> forms.Field:
    """The form field of one setting; it shows the default of ``shown`` (a kind's name) when that kind reads it."""
    defaults = {kind.name: shown_default(kind, name) for kind in users}
    default = defaults.get(shown, next(iter(defaults.values())))
    attrs = {"data-kinds": " ".join(defaults), "data-defaults": json.dumps(defaults)}
    declared = {kind.name: next(f for f in kind.fields if f.name == name) for kind in users}
    when = {k: {"field": f.when[0], "values": list(f.when[1])} for k, f in declared.items() if f.when}
    if when:  # shown only while the setting it depends on has one of these values (bench.js)
        attrs["data-when"] = json.dumps(when)
    common: dict[str, Any] = {"label": field.label, "required": False, "help_text": help_text(field)}
    made: forms.Field
    widget: forms.Widget
    if field.widget == "jsonl":
        made = forms.FileField(**common)
    elif field.widget == "choice":
        options = [(str(value), label) for value, label in field.choices]
        widget = forms.RadioSelect(choices=options) if len(options) <= RADIOS_MOST else forms.Select(choices=options)
        made = forms.CharField(widget=widget, initial=default, **common)
    else:
        attrs["placeholder"] = default
        same = [next(f for f in kind.fields if f.name == name) for kind in users]
        widget = forms.NumberInput(_widget_attrs(same)) if field.widget in ("integer", "real") else forms.TextInput()
        made = forms.CharField(widget=widget, max_length=200, **common)
    made.widget.attrs.update(attrs)
    return made


class JobForm(forms.Form):
    """``kind`` picks a registered kind; ``shown`` is the kind whose defaults an unbound form shows."""

    def __init__(
        self,
        data: Any = None,
        files: Any = None,
        *,
        shown: str | None = None,
        max_model_len: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__(data, files)
        every = registry.runnable_kinds()
        names = [kind.name for kind in every]
        chosen = (data or {}).get("kind") or shown
        shown = chosen if chosen in names else names[0]
        self.max_model_len = max_model_len
        self.settings = form_fields(every)
        self.fields["kind"] = forms.ChoiceField(
            label=gettext_lazy("작업"), choices=[(k.name, k.label) for k in every], initial=shown
        )
        for name, (field, users) in self.settings.items():
            self.fields[name] = form_field(name, field, users, shown)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("kind")
        if not kind:
            return data
        raw: dict[str, Any] = {}
        try:
            for field in registry.get(kind).fields:
                value = data.get(field.name)
                if field.widget == "jsonl" and value is not None:
                    prompts = configs.jsonl_parse(value.read(), field=field.name)
                    raw[field.stores] = [{"prompt": c.prompt, "max_tokens": c.max_tokens} for c in prompts]
                elif isinstance(value, str) and value.strip():
                    raw[field.name] = value.strip()
            kinds.config_for(kind, raw, max_model_len=self.max_model_len())
        except configs.ConfigError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
            return data
        data["config"] = raw
        return data


class _ManyFiles(forms.FileInput):
    allow_multiple_selected = True


class _ResultFilesField(forms.FileField):
    """One file, or the files of one run a tool wrote apart (AIPerf's two): a list of uploads."""

    widget = _ManyFiles

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        one = super().clean
        items = list(data) if isinstance(data, list | tuple) else [data]
        return [one(item, initial) for item in items or [None]]  # no file at all: "required", as one field


class ImportForm(forms.Form):
    """Other tools' result files (``bench.imports``): JSON or JSON Lines, one file, or the files of one run
    a tool wrote apart (``importers.MAX_FILES``), together at most ``MAX_BYTES``."""

    result_file = _ResultFilesField(
        label=gettext_lazy("결과 파일 (JSON 또는 JSONL)"),
        help_text=gettext_lazy(
            "vllm bench serve --save-result의 JSON, GuideLLM의 JSON 보고서(--output kind=json,path=x.json), "
            "AIPerf의 profile_export_aiperf.json 또는 profile_export.jsonl. AIPerf는 한 실행의 두 파일을 함께 "
            "고르면 요청별 값과 설정을 한 실행으로 가져옵니다."
        ),
    )

    def clean_result_file(self) -> list[Any]:
        uploads: list[Any] = self.cleaned_data["result_file"]
        if len(uploads) > importers.MAX_FILES:
            raise forms.ValidationError(
                gettext_lazy("한 번에 파일을 %(most)d개까지 올릴 수 있습니다") % {"most": importers.MAX_FILES}
            )
        for upload in uploads:
            if not str(upload.name or "").lower().endswith((".json", ".jsonl")):
                raise forms.ValidationError(gettext_lazy("JSON 파일(.json 또는 .jsonl)만 가져올 수 있습니다"))
        if any(upload.size is None for upload in uploads) or sum(u.size for u in uploads) > importers.MAX_BYTES:
            raise forms.ValidationError(
                gettext_lazy("파일이 너무 큽니다 (최대 %(mb)d MB)") % {"mb": importers.MAX_BYTES // (1024 * 1024)}
            )
        return uploads
