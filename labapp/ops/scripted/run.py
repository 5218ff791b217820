"""Running the scripted server: in a thread of this process (tests) or in a child process (benchmarks)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import select
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from labapp.ops.scripted.prefix_cache import PrefixCache
from labapp.ops.scripted.script import Script, plain_words
from labapp.ops.scripted.server import READY_LINE, ScriptedServer, run_server

ROOT = Path(__file__).resolve().parents[3]


class ThreadedServer:
    """The server on its own event loop in a daemon thread of this process (for tests)."""

    def __init__(self, script: Script, host: str = "127.0.0.1") -> None:
        self.server = ScriptedServer(script)
        self.host = host
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-server", daemon=True)
        self._listener: asyncio.Server | None = None

    def start(self, port: int = 0) -> str:
        """Listen on ``port`` (0: a free one); the base URL."""
        self._thread.start()
        start = asyncio.start_server(self.server.handle, self.host, port, backlog=4096)
        self._listener = asyncio.run_coroutine_threadsafe(start, self._loop).result(timeout=10)
        self.url = f"http://{self.host}:{self._listener.sockets[0].getsockname()[1]}"
        return self.url

    def stop(self) -> None:
        """Stop listening and drop every connection (a request after this cannot connect).

        Callable from any thread but the server's, an event loop's included.
        """
        if self._listener is None:
            return
        listener, self._listener = self._listener, None

        async def close() -> None:
            listener.close()
            await self.server.close_connections()
            await listener.wait_closed()
            await self._loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@contextlib.contextmanager
def serve(script: Script) -> Iterator[str]:
    """Run the server in a thread of this process while the block runs; yields its base URL."""
    server = ThreadedServer(script)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


def raise_open_file_limit() -> None:
    """Every stream is a socket: lift the soft open-file limit to the hard one (Unix)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        infinite = resource.RLIM_INFINITY
        if soft != infinite and (hard == infinite or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != infinite else max(soft, 65536), hard))
    except (ImportError, ValueError, OSError):
        pass


@contextlib.contextmanager
def spawn(
    *, ttft_ms: float, itl_ms: float, host: str = "127.0.0.1", timeout: float = 15.0, max_streams: int = 0
) -> Iterator[str]:
    """Run ``Script.timed`` in a child process on a free port; yields its base URL once /health answers."""
    command = [
        sys.executable, "-m", "labapp.ops.scripted",
        "--host", host, "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
        "--max-streams", str(max_streams),
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + timeout
        readable, _, _ = select.select([process.stdout], [], [], timeout)
        line = process.stdout.readline() if readable else ""
        if not line.startswith(READY_LINE):
            raise RuntimeError(f"the scripted server did not start (exit status {process.poll()}): {line!r}")
        url = line[len(READY_LINE) :].strip()
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310 (our own URL)
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the scripted server at {url} did not answer /health") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The scripted OpenAI-compatible streaming server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0: any free port (printed on stdout)")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="request read → first token written")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="gap between tokens")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--text", default="x", help="every token's text")
    parser.add_argument(
        "--words",
        type=int,
        default=0,
        help="answer with this many different words, cut at max_tokens (a chat answer the repeat guard never cuts)",
    )
    parser.add_argument("--max-streams", type=int, default=0, help="at most this many generate at once (0: no cap)")
    parser.add_argument(
        "--prefix-cache", action="store_true", help="simulate a prefix cache: cached tokens from the prompts served"
    )
    parser.add_argument(
        "--prefill-ms-per-token", type=float, default=0.0, help="with --prefix-cache: TTFT per uncached prompt token"
    )
    args = parser.parse_args(argv)
    if args.ttft_ms < 0 or args.itl_ms < 0:
        parser.error("--ttft-ms and --itl-ms must not be negative")
    raise_open_file_limit()
    script = Script.timed(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000, model=args.model, text=args.text)
    script.max_streams = max(0, args.max_streams)
    if args.words > 0:
        script.pieces, script.cut_at_max_tokens = plain_words(args.words), True
    if args.prefix_cache:
        script.prefix_cache = PrefixCache(prefill_s_per_token=args.prefill_ms_per_token / 1000)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_server(script, args.host, args.port))
