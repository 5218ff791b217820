"""``python manage.py bench_client_overhead``: the measurement in labapp/ops/measures/bench_client_overhead.py."""

from labapp.ops.measures.bench_client_overhead import Command

__all__ = ["Command"]
