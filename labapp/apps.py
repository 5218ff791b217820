from django.apps import AppConfig


class LabappConfig(AppConfig):
    name = "labapp"
    verbose_name = "vLLM Serving Lab"

    def ready(self) -> None:
        from labapp import session_ends, sockets  # noqa: F401 - connect the signals that end sessions and sockets
