"""``python manage.py bench_fidelity``: the measurement in labapp/ops/measures/bench_fidelity.py."""

from labapp.ops.measures.bench_fidelity import Command

__all__ = ["Command"]
