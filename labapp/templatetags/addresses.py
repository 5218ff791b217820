"""Addresses and errors in templates, through ``labapp.addresses`` (never with credentials):
``{{ job.engine_url|address }}``, ``{{ error|scrubbed }}`` (a row's saved error: ``error_shown``)."""

from __future__ import annotations

from django import template

from labapp import addresses

register = template.Library()


@register.filter
def address(url: object) -> str:
    return addresses.shown(str(url or ""))


@register.filter
def scrubbed(text: object) -> str:
    return addresses.scrubbed(str(text or ""))
