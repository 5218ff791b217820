"""``Answer.beat_at``: the liveness stamp of a streaming answer (``rag.keeper``). Rows made before it
take their creation time, so an answer left streaming by an old process reads as long gone."""

import django.utils.timezone
from django.db import migrations, models


def stamp_as_created(apps, schema_editor):  # type: ignore[no-untyped-def]
    Answer = apps.get_model("rag", "Answer")
    Answer.objects.update(beat_at=models.F("created_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("rag", "0004_error_said"),
    ]

    operations = [
        migrations.AddField(
            model_name="answer",
            name="beat_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.RunPython(stamp_as_created, migrations.RunPython.noop),
    ]
