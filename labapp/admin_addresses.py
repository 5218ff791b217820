"""Django's admin shows addresses as every other page does: through ``labapp.addresses``.

A model admin whose model holds addresses that may carry credentials (an engine's ``base_url``,
a hand-in's ``engine_url``) derives from ``AddressesShownAdmin`` and names them in
``address_fields``. Then, for staff as for everyone:

- the list shows each through ``addresses.shown`` (scheme, host, port, path);
- the change form's field holds the shown address: saved unchanged, the stored address (its
  credentials included) is kept; a new address typed in replaces it whole;
- a read-only address field is shown the same way;
- no query-string lookup reads them (``?base_url__contains=s`` would tell a password letter by
  letter), and ``check`` refuses them in ``search_fields`` and ``list_filter``.

What names a row (``__str__``: the history, the messages after a save, the delete pages) is the
model's: ``bench.models.Engine.__str__`` shows its address through ``shown``.
``tests/site/test_address_secrets.py`` walks every admin page of every registered model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.core import checks
from django.db.models import Model
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from labapp import addresses

KEPT_HELP = _(
    "인증 정보(비밀번호, 토큰)는 보이지 않습니다. 그대로 두면 저장된 주소가 인증 정보와 함께 유지되고, "
    "새 주소를 적으면 그 주소로 통째로 바뀝니다."
)


class AddressesShownForm(forms.ModelForm):  # type: ignore[type-arg]
    """A change form whose address fields hold their address as shown; unchanged, the stored one is kept."""

    address_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.address_fields:
            if name in self.fields:
                self.fields[name].help_text = KEPT_HELP
                if self.instance.pk is not None:
                    self.initial[name] = addresses.shown(str(getattr(self.instance, name) or ""))

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        for name in self.address_fields:
            if self.instance.pk is not None and name in cleaned and cleaned[name] == self.initial.get(name):
                cleaned[name] = getattr(self.instance, name)  # as shown, unchanged: the stored address
        return cleaned


def shown_column(name: str, label: str) -> Callable[[Model], str]:
    """A list or read-only column: the field ``name`` through ``addresses.shown``."""

    @admin.display(description=label)
    def column(obj: Model) -> str:
        return addresses.shown(str(getattr(obj, name) or ""))

    return column


class AddressesShownAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    address_fields: ClassVar[tuple[str, ...]] = ()
    form = AddressesShownForm

    def __init__(self, model: type[Model], admin_site: Any) -> None:
        super().__init__(model, admin_site)
        for name in self.address_fields:  # the columns, named as the admin's lists and read-only fields want
            label = str(getattr(model._meta.get_field(name), "verbose_name", name))
            setattr(self, f"{name}_shown", shown_column(name, label))

    def _shown(self, names: Sequence[Any]) -> list[Any]:
        return [f"{name}_shown" if name in self.address_fields else name for name in names]

    def get_list_display(self, request: HttpRequest) -> Any:
        return self._shown(super().get_list_display(request))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self._shown(super().get_readonly_fields(request, obj))

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        read_only = set(super().get_readonly_fields(request, obj)) & set(self.address_fields)
        return [*(super().get_exclude(request, obj) or ()), *sorted(read_only)]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        form.address_fields = self.address_fields  # type: ignore[attr-defined]  # a class made for this call
        return form

    def lookup_allowed(self, lookup: str, value: str, request: Any = None) -> bool:
        if lookup.split("__")[0] in self.address_fields:
            return False
        return bool(super().lookup_allowed(lookup, value, request))

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        errors: list[checks.CheckMessage] = super().check(**kwargs)
        named = [*self.search_fields, *(f if isinstance(f, str) else "" for f in self.list_filter)]
        for name in named:
            if name.lstrip("^=@").split("__")[0] in self.address_fields:
                message = f"{type(self).__name__}: the address field {name!r} may not be searched or filtered on"
                errors.append(checks.Error(message, obj=type(self), id="labapp.E001"))
        return errors
