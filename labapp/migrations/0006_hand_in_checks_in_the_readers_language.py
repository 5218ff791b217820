"""Hand-ins kept their checks as Korean sentences; they now keep msgids and values (``labapp.said``)
so that each reader reads them in their own language.

An older hand-in whose job still has its results gets its checks made again from those results by
today's code, in the stored form, when they give the same verdicts as the ones handed in (the
grade does not move). Any other keeps its sentences, which are shown as they were.
"""

from typing import Any

from django.db import migrations


def _made_again(lab: int, results: dict[str, Any], config: dict[str, Any], kept: list[Any]) -> list[Any] | None:
    from django.utils import translation

    from labapp.labs.catalog import LABS

    if lab not in LABS:
        return None
    with translation.override("ko"):
        checks = [c.as_dict() for c in LABS[lab].checks(results, config)]
    verdicts = [(bool(c.get("passed")), bool(c.get("applies", True))) for c in kept if isinstance(c, dict)]
    return checks if verdicts == [(c["passed"], c["applies"]) for c in checks] else None


def keep_keys(apps: Any, schema_editor: Any) -> None:
    submission_model = apps.get_model("labapp", "LabSubmission")
    for submission in submission_model.objects.filter(job__isnull=False).select_related("job"):
        kept = submission.checks or []
        if not any(isinstance(c, dict) and isinstance(c.get("name"), str) for c in kept):
            continue  # already keys, or nothing kept
        try:
            made = _made_again(submission.lab, submission.job.results or {}, submission.job.config or {}, kept)
        except Exception:  # noqa: S112 - results today's code cannot read: the sentences stay
            continue
        if made is not None:
            submission.checks = made
            submission.save(update_fields=["checks"])


class Migration(migrations.Migration):
    dependencies = [
        ("labapp", "0005_lab_jobs_from_hand_ins"),
        ("bench", "0007_job_error_text"),
    ]

    operations = [migrations.RunPython(keep_keys, migrations.RunPython.noop)]
