"""``python manage.py bench_decode_bound``: the measurement in labapp/ops/measures/bench_decode_bound.py."""

from labapp.ops.measures.bench_decode_bound import Command

__all__ = ["Command"]
