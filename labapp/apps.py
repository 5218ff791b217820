from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LabappConfig(AppConfig):
    name = "labapp"
    verbose_name = _("vLLM 서빙 실습실")

    def ready(self) -> None:
        from labapp import addresses, session_ends, sockets  # noqa: F401 - connect the signals that end sessions and sockets

        addresses.install_log_scrub()  # no log line of any process writes an address's password
