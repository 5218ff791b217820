"""Mark the jobs that hand-ins stand on as made for their lab (``BenchJob.lab``, new in bench 0005).

Older jobs do not say which page made them: a job a hand-in names was surely used for that
lab, so it gets the lab; every other existing job keeps ``lab`` empty and no longer counts
towards a lab's status (a learner runs the lab again from its page).
"""

from typing import Any

from django.db import migrations


def mark_handed_in_jobs(apps: Any, schema_editor: Any) -> None:
    submission_model = apps.get_model("labapp", "LabSubmission")
    job_model = apps.get_model("bench", "BenchJob")
    for job_id, lab in submission_model.objects.filter(job__isnull=False).values_list("job_id", "lab"):
        job_model.objects.filter(pk=job_id, lab__isnull=True).update(lab=lab)


class Migration(migrations.Migration):
    dependencies = [
        ("labapp", "0004_class_join_controls_temporary_passwords"),
        ("bench", "0005_job_lab_prediction"),
    ]

    operations = [migrations.RunPython(mark_handed_in_jobs, migrations.RunPython.noop)]
