from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BenchConfig(AppConfig):
    name = "bench"
    verbose_name = _("벤치마크")
