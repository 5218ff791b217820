"""Django's admin speaks the reader's language too: every name it shows of the project's own models.

The admin builds its labels from the models: the app's ``verbose_name``, each model's
``verbose_name`` and plural, each field's ``verbose_name`` and each choice's label. A plain
string there is English on a Korean page (or Korean on an English one), so the test walks
every model the admin shows (registered ones and their inlines) of the project's apps and
asks each of those names to be a translation, then reads the pages in both languages.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin as django_admin
from django.contrib.auth.models import User
from django.db import models
from django.test import Client
from django.utils.functional import Promise

OURS = {"labapp", "bench", "rag"}


def shown_models() -> list[type[models.Model]]:
    found: set[type[models.Model]] = set()
    for model, model_admin in django_admin.site._registry.items():
        if model._meta.app_label in OURS:
            found.add(model)
            found.update(inline.model for inline in model_admin.inlines)
    return sorted(found, key=lambda m: m._meta.label)


def untranslated(model: type[models.Model]) -> list[str]:
    meta = model._meta
    missing = [f"{meta.label}.verbose_name"] if not isinstance(meta.verbose_name, Promise) else []
    if not isinstance(meta.verbose_name_plural, Promise):
        missing.append(f"{meta.label}.verbose_name_plural")
    for field in meta.get_fields():
        if field.auto_created or not field.concrete:
            continue
        if not isinstance(field.verbose_name, Promise):
            missing.append(f"{meta.label}.{field.name}")
        missing += [
            f"{meta.label}.{field.name}={v}" for v, label in field.flatchoices if not isinstance(label, Promise)
        ]
    return missing


def test_the_admin_shows_project_models_and_each_of_their_names_is_a_translation() -> None:
    models_ = shown_models()
    assert {m._meta.label for m in models_} >= {"bench.Engine", "labapp.Classroom", "labapp.LabSubmission"}
    assert [name for m in models_ for name in untranslated(m)] == []
    assert all(isinstance(apps.get_app_config(label).verbose_name, Promise) for label in ("labapp", "bench"))


@pytest.mark.django_db
def test_the_admins_engine_pages_read_in_korean_and_in_english() -> None:
    from bench.models import Engine

    boss = User.objects.create(username="boss", is_staff=True, is_superuser=True)
    engine = Engine.objects.create(name="cpu-a", base_url="http://cpu-a:8000", pool="class", role="measure")
    client = Client()
    client.force_login(boss)
    korean = client.get("/admin/bench/engine/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "등록한 사람" in korean and "역할" in korean and "측정" in korean and "Added by" not in korean
    change = client.get(f"/admin/bench/engine/{engine.pk}/change/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "하드웨어" in change and "Hardware:" not in change
    client.cookies["django_language"] = "en"
    english = client.get("/admin/bench/engine/").content.decode()
    assert "Added by" in english and "Engines" in english and "등록한 사람" not in english
