from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The operations tooling as an app of its own: its management commands (the measurements of
    the lab itself, ``make perf``'s and ``make load``'s) live here, apart from the site's."""

    name = "labapp.ops"
    label = "ops"
