"""The Celery app: broker and queues come from Django settings (CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")

app = Celery("labapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
