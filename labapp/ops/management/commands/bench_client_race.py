"""``python manage.py bench_client_race``: the measurement in labapp/ops/measures/bench_client_race.py."""

from labapp.ops.measures.bench_client_race import Command

__all__ = ["Command"]
