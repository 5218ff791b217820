"""``python manage.py lab_reliability``: the measurement in labapp/ops/measures/lab_reliability.py."""

from labapp.ops.measures.lab_reliability import Command

__all__ = ["Command"]
