"""``python manage.py bench_retrieval_scale``: the measurement in labapp/ops/measures/bench_retrieval_scale.py."""

from labapp.ops.measures.bench_retrieval_scale import Command

__all__ = ["Command"]
