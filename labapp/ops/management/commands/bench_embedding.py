"""``python manage.py bench_embedding``: the measurement in labapp/ops/measures/bench_embedding.py."""

from labapp.ops.measures.bench_embedding import Command

__all__ = ["Command"]
