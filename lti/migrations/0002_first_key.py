"""The tool's first signing key, so a fresh install can answer an LMS before anyone runs
``manage.py rotate_keys`` (django-lti signs with its newest active key and fails without one)."""

from typing import Any

from django.db import migrations


def first_key(apps: Any, schema_editor: Any) -> None:
    from jwcrypto.jwk import JWK

    Key = apps.get_model("lti_tool", "Key")
    if Key.objects.filter(is_active=True).exists():
        return
    key = JWK.generate(kty="RSA", size=2048)
    Key.objects.create(
        public_key=key.export_to_pem().decode(),
        private_key=key.export_to_pem(private_key=True, password=None).decode(),
    )


class Migration(migrations.Migration):
    dependencies = [("lti", "0001_initial"), ("lti_tool", "0008_ltideployment_pns_url_and_more")]

    operations = [migrations.RunPython(first_key, migrations.RunPython.noop)]
