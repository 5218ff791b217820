"""``python manage.py compare_tokenizers``: the measurement in labapp/ops/measures/compare_tokenizers.py."""

from labapp.ops.measures.compare_tokenizers import Command

__all__ = ["Command"]
