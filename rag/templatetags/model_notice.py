"""The base-model notice: whether the configured model is the packaged Gemma 3 270M base model."""

from __future__ import annotations

from django import template
from django.conf import settings

from rag.prompting import is_packaged_base_model

register = template.Library()


@register.simple_tag
def configured_model() -> str:
    """The configured model's name: ``VLLM_MODEL``, else the embedded engine's; "" when an
    external server's first model is meant (unknown without asking it, so no notice)."""
    if settings.VLLM_MODEL:
        return str(settings.VLLM_MODEL)
    return "gemma-3-270m" if settings.VLLM_EMBEDDED else ""


@register.simple_tag
def base_model_in_use() -> bool:
    return is_packaged_base_model(configured_model())
