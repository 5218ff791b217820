"""Engines in Django's admin: addresses shown without their credentials (``labapp.admin_addresses``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from bench import engines
from bench.models import Engine
from labapp.admin_addresses import AddressesShownAdmin, AddressesShownForm


class EngineForm(AddressesShownForm):
    def clean_base_url(self) -> str:
        """A web address, as the engines page asks (``bench.engines.engine_add``); the shown one passes too."""
        url = str(self.cleaned_data["base_url"]).strip().rstrip("/")
        if not engines.is_web_address(url):
            raise forms.ValidationError(engines.NOT_A_WEB_ADDRESS)
        return url


@admin.register(Engine)
class EngineAdmin(AddressesShownAdmin):
    address_fields = ("base_url",)
    form = EngineForm
    list_display = ["name", "base_url", "model", "hardware", "pool", "role", "added_by", "created_at"]
    search_fields = ["name", "model", "hardware"]
    readonly_fields = ["added_by", "created_at"]

    def save_model(self, request: HttpRequest, obj: Engine, form: Any, change: bool) -> None:
        if not change:
            obj.added_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
