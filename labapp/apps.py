from django.apps import AppConfig


class LabappConfig(AppConfig):
    name = "labapp"
    verbose_name = "vLLM Serving Lab"
