from __future__ import annotations

import socket
import time

from celery import shared_task


@shared_task(name="labapp.ping")
def ping(sent: float) -> dict[str, object]:
    """A round trip through the broker and a worker (used by tests and the status page)."""
    return {"sent": sent, "worker_time": time.time(), "worker_host": socket.gethostname()}
