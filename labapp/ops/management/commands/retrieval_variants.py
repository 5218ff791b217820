"""``python manage.py retrieval_variants``: the measurement in labapp/ops/measures/retrieval_variants.py."""

from labapp.ops.measures.retrieval_variants import Command

__all__ = ["Command"]
