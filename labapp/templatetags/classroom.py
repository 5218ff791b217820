"""Template helpers of the classroom pages."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings

register = template.Library()


@register.simple_tag
def lab_mode() -> str:
    """``local`` or ``class`` (read per request, so tests can switch it)."""
    return str(settings.LAB_MODE)


@register.filter
def number(value: Any) -> str:
    """A key number as the gradebook shows it: up to two decimals, — when missing."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def key_label(key: Any) -> str:
    """A stored key number's label in the reader's language ("prefill tok/s" → "프리필 속도 (tok/s)")."""
    from bench.kinds.checks import key_label as label

    return label(str(key))
