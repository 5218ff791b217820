"""``python manage.py chat_overhead``: the measurement in labapp/ops/measures/chat_overhead.py."""

from labapp.ops.measures.chat_overhead import Command

__all__ = ["Command"]
