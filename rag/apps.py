from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"
