"""Template helpers of the classroom pages."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

register = template.Library()


@register.simple_tag
def lab_mode() -> str:
    """``local`` or ``class`` (read per request, so tests can switch it)."""
    return str(settings.LAB_MODE)


# Words a key number may hold instead of a number (the prefix lab's "cache reset"), as a reader sees them.
KEY_WORDS = {"ok": gettext_lazy("비움"), "unsupported": gettext_lazy("엔진이 지원하지 않음")}


def rounded(value: Any) -> Any:
    """A key number as the gradebook shows it, still a number where it is one (the CSV keeps it summable):
    up to two decimals, a stored word or yes/no in words, None when missing."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return str(_("예") if value else _("아니오"))
    if isinstance(value, str) and value in KEY_WORDS:
        return str(KEY_WORDS[value])
    if isinstance(value, float):
        two = round(value, 2)
        return int(two) if two.is_integer() else two
    return value


@register.filter
def number(value: Any) -> str:
    """A key number as the gradebook shows it: up to two decimals, — when missing."""
    shown = rounded(value)
    return "—" if shown is None else str(shown)


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def key_label(key: Any) -> str:
    """A stored key number's label in the reader's language ("prefill tok/s" → "프리필 속도 (tok/s)")."""
    from bench.kinds.registry import key_label as label

    return label(str(key))


@register.filter
def kind_checks(results: Any, kind: Any) -> list[Any]:
    """A job kind's own checks of its results (``JobKind.checks``), in the reader's language."""
    from bench.kinds import registry

    found = registry.find(str(kind))
    return found.own_checks(results) if found is not None and isinstance(results, dict) else []


@register.filter
def cell_label(cell: Any, kind: Any) -> str:
    """A result cell's name in the reader's language, as its job kind shows it ("cold" → "콜드")."""
    from bench.kinds import registry

    found = registry.find(str(kind))
    if not isinstance(cell, dict):
        return str(cell)
    return found.shown_cell(cell) if found is not None else str(cell.get("cell", ""))


@register.filter
def cell_value(value: Any) -> str:
    """A stored value of a result cell: yes/no in words, stored names (``cold``, ``synthetic``) as code."""
    if isinstance(value, bool):
        return _("예") if value else _("아니오")
    if isinstance(value, str) and value:
        return format_html("<code>{}</code>", value)
    return number(value)


@register.filter
def check_mark(check: Any) -> str:
    """✓ passed, ✗ failed, – not applicable (a ``Check`` or a hand-in's stored dict)."""
    get = check.get if isinstance(check, dict) else lambda name, default=None: getattr(check, name, default)
    if not get("applies", True):
        return "–"
    return "✓" if get("passed", False) else "✗"


@register.filter
def check_state(check: Any) -> str:
    """``pass``, ``fail`` or ``na``: the check's class and ``data-passed`` value on a page."""
    return {"✓": "pass", "✗": "fail", "–": "na"}[check_mark(check)]


@register.filter
def settings_text(config: Any) -> str:
    """A job's saved settings as "key=value …" without its seed ("" when that is all it has)."""
    if not isinstance(config, dict):
        return ""
    return " ".join(f"{key}={value}" for key, value in config.items() if key != "seed")
