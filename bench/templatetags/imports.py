"""``{% load imports %}``: an imported run's source, missing figures and notes for its pages."""

from __future__ import annotations

from typing import Any

from django import template

from bench.imports import shown

register = template.Library()


@register.filter
def imported_view(results: Any) -> shown.Shown:
    return shown.shown(results if isinstance(results, dict) else {})
