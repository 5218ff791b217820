from django.apps import AppConfig


class LabappConfig(AppConfig):
    name = "labapp"
    verbose_name = "vLLM Serving Lab"

    def ready(self) -> None:
        from labapp import addresses, sockets  # noqa: F401 - sockets connects the sign-out signal that closes open sockets

        addresses.install_log_scrub()  # no log line of any process writes an address's password
