from django.apps import AppConfig


class LabappConfig(AppConfig):
    name = "labapp"
    verbose_name = "vLLM Serving Lab"

    def ready(self) -> None:
        from labapp import addresses, session_ends, sockets  # noqa: F401 - connect the signals that end sessions and sockets

        addresses.install_log_scrub()  # no log line of any process writes an address's password
