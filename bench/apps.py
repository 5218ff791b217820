from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BenchConfig(AppConfig):
    name = "bench"
    verbose_name = _("벤치마크")

    def ready(self) -> None:
        from bench import engines
        from bench.kinds import router_policy

        router_policy.pool_lookup = engines.chatting_in_pool  # the kind may not import bench.engines
