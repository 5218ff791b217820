"""The models and their migrations agree: a model change without its migration fails here, not on a class server."""

from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration() -> None:
    try:
        call_command("makemigrations", "--check", "--dry-run", verbosity=0)
    except SystemExit as missing:  # --check exits 1 when a migration would be written
        pytest.fail(f"a model changed without its migration: run manage.py makemigrations ({missing})")
