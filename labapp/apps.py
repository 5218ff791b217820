from django.apps import AppConfig


class LabappConfig(AppConfig):
    name = "labapp"
    verbose_name = "vLLM Serving Lab"

    def ready(self) -> None:
        from labapp import sockets  # noqa: F401 - connects the sign-out signal that closes open sockets
