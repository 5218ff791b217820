"""``python manage.py eval_retrieval``: the measurement in labapp/ops/measures/eval_retrieval.py."""

from labapp.ops.measures.eval_retrieval import Command

__all__ = ["Command"]
