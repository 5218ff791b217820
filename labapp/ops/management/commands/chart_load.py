"""``python manage.py chart_load``: the measurement in labapp/ops/measures/chart_load.py."""

from labapp.ops.measures.chart_load import Command

__all__ = ["Command"]
