"""A job's error form becomes ``labapp.said``'s, the one every kept text has: ``{"msgid", "params"}``
becomes ``{"said": [[msgid, params]]}`` (no params: ``[[msgid, None]]``, the msgid said unformatted).
Backwards, a one-piece form goes back; any other is dropped and the row shows its ``error`` as written."""

from typing import Any

from django.db import migrations


def _said_form(old: Any) -> Any:
    if isinstance(old, dict) and isinstance(old.get("msgid"), str):
        return {"said": [[old["msgid"], old.get("params") or None]]}
    return old


def _old_form(new: Any) -> Any:
    pieces = new.get("said") if isinstance(new, dict) else None
    if not isinstance(pieces, list):
        return new
    if len(pieces) == 1 and isinstance(pieces[0], list):
        msgid, params = pieces[0]
        return {"msgid": msgid, "params": params or {}}
    return {}


def _rewrite(apps: Any, change: Any) -> None:
    job_model = apps.get_model("bench", "BenchJob")
    for job in job_model.objects.exclude(error_text={}).only("pk", "error_text"):
        made = change(job.error_text)
        if made != job.error_text:
            job_model.objects.filter(pk=job.pk).update(error_text=made)


def forwards(apps: Any, schema_editor: Any) -> None:
    _rewrite(apps, _said_form)


def backwards(apps: Any, schema_editor: Any) -> None:
    _rewrite(apps, _old_form)


class Migration(migrations.Migration):
    dependencies = [("bench", "0008_engine_pools")]

    operations = [migrations.RunPython(forwards, backwards)]
