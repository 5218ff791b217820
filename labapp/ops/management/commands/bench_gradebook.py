"""``python manage.py bench_gradebook``: the measurement in labapp/ops/measures/bench_gradebook.py."""

from labapp.ops.measures.bench_gradebook import Command

__all__ = ["Command"]
