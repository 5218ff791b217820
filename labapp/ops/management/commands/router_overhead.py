"""``python manage.py router_overhead``: the measurement in labapp/ops/measures/router_overhead.py."""

from labapp.ops.measures.router_overhead import Command

__all__ = ["Command"]
