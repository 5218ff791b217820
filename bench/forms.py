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
from bench.kinds import registry
from bench.kinds.registry import Field, JobKind


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
    common: dict[str, Any] = {"label": field.label, "required": False, "help_text": field.help_text}
    made: forms.Field
    widget: forms.Widget
    if field.widget == "jsonl":
        made = forms.FileField(**common)
    elif field.widget == "choice":
        widget = forms.Select(choices=[(str(value), label) for value, label in field.choices])
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
        every = registry.all_kinds()
        names = [kind.name for kind in every]
        chosen = (data or {}).get("kind") or shown
        shown = chosen if chosen in names else names[0]
        self.max_model_len = max_model_len
        self.settings = form_fields(every)
        self.fields["kind"] = forms.ChoiceField(label=gettext_lazy("작업"), choices=registry.choices(), initial=shown)
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
