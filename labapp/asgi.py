"""ASGI entry point: Django for HTTP, Channels for websockets (served by Daphne)."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labapp.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs the app registry
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from bench.consumers import JobProgressConsumer  # noqa: E402
from bench.selectors import chat_engine, chat_speeds  # noqa: E402
from labapp.consumers import PingConsumer  # noqa: E402
from labapp.origins import SameOriginValidator  # noqa: E402
from labapp.request_threads import KeptRequestThreads  # noqa: E402
from rag.consumers import ChatConsumer  # noqa: E402

if settings.WEB_WARM_UP:
    # Before Daphne listens (it imports this module first): the Korean analyser and the embedding model.
    # Loaded on first use instead, on a thread, they held the interpreter's lock for seconds and stalled
    # every socket of the process (a just-started web process's first answer was 7.7 s late, docs/performance.md).
    from rag import embeddings, lexical

    lexical.warm()
    embeddings.warm()

websocket_urlpatterns = [
    path("ws/ping/", PingConsumer.as_asgi()),
    path("ws/chat/", ChatConsumer.as_asgi(speeds=chat_speeds, engine=chat_engine)),
    path("ws/bench/<int:job_id>/", JobProgressConsumer.as_asgi()),
]

# Pages run their synchronous work on kept threads, not two new threads per request (WEB_REQUEST_THREADS).
http_app = KeptRequestThreads(django_asgi_app, settings.WEB_REQUEST_THREADS) if settings.WEB_REQUEST_THREADS else None

application = ProtocolTypeRouter(
    {
        "http": http_app or django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
