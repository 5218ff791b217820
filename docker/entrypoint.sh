#!/bin/sh
# Container entrypoint for the web and worker services: wait for the database named
# by DATABASE_URL, apply migrations, then run the container's command.
# The web service (command `daphne ...`) also loads the chapter content and builds
# the retrieval index; the worker starts only once web is healthy, so migrations
# never run twice at the same time.
set -eu

python - <<'PY'
import os
import socket
import sys
import time
from urllib.parse import urlsplit

url = urlsplit(os.environ.get("DATABASE_URL", ""))
if url.scheme in ("postgres", "postgresql") and url.hostname:
    address = (url.hostname, url.port or 5432)
    deadline = time.monotonic() + 90
    while True:
        try:
            socket.create_connection(address, timeout=3).close()
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.exit(f"entrypoint: database {address[0]}:{address[1]} unreachable: {exc}")
            print(f"entrypoint: waiting for database {address[0]}:{address[1]} ...", flush=True)
            time.sleep(2)
PY

python manage.py migrate --noinput
# The bundled embedding model on ONNX Runtime (a no-op once this container has it).
python manage.py export_embedding_onnx

if [ "${1:-}" = "daphne" ]; then
    python manage.py load_chapter
    python manage.py build_index
    # nginx's page for a request a web process took and never answered (the web-down volume).
    python manage.py web_down_pages /srv/web-down
fi

exec "$@"
