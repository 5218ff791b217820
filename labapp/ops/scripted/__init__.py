"""The scripted OpenAI-compatible streaming server: the unit tests' engine and the yardstick
of the client's own overhead.

    python -m labapp.ops.scripted --port 8100 --ttft-ms 50 --itl-ms 10

Standard library only: raw HTTP/1.1 on asyncio, keep-alive, chunked streams, one
``asyncio.sleep`` per token, so one process holds 1000+ concurrent streams. Two ways
to run it:

* ``spawn()`` (and ``python -m``): its own process, so the measuring client does not
  share its event loop or CPU thread (``bench_client_overhead``);
* ``serve()`` / ``ThreadedServer``: a thread of this process, for tests, which change
  the ``Script`` while it runs (answer 500, stall, stream slowly) and read what it
  received (``Script.requests``, ``Script.disconnected``).

What it answers is a ``Script``. The default is a small engine answering the chat:
four Korean pieces 10 ms apart whatever ``max_tokens`` asks, a token per 3 bytes,
16 cached prompt tokens and vLLM's per-request metrics on the final chunk.
``Script.timed()`` is the overhead yardstick: ``max_tokens`` tokens of ``text``, the
first exactly ``ttft`` after the request was read and token ``k`` at ``ttft + k·itl``
(an absolute schedule: a late timer does not push the later tokens back), a token per
word. Streams are in vLLM's shape::

    data: {"id": ..., "choices": [{"index": 0, "text": "x", "finish_reason": null, ...}]}
    ...                   (the last text chunk has finish_reason "length", or "stop" if shorter)
    data: {"id": ..., "choices": [], "usage": {"prompt_tokens": P, "completion_tokens": N, ...}}
    data: [DONE]

(``/v1/chat/completions`` sends ``delta.content`` instead of ``text``.) Usage comes
as vLLM sends it: on a final chunk when ``stream_options.include_usage`` is set, and
on every chunk as well with ``continuous_usage_stats`` (our client asks for both).
Also ``GET /health``, ``/v1/models``, ``/version``, ``/metrics`` (Prometheus text:
running and waiting requests (``Script.max_streams`` caps the running ones), TTFT and
queue-time histograms, prefix-cache counters, KV-cache usage, generation tokens and
tokens per engine step (one per streamed token), and vLLM's ``vllm:cache_config_info`` gauge
with the script's cache settings), ``/server_info`` (vLLM's development-mode configuration:
dtype, chunked prefill, parallel sizes, the CPU's name; ``Script.dev_mode`` False: 404) and
``POST /tokenize`` (400 for chat messages unless ``chat_template``).

``Script.prefix_cache`` (``--prefix-cache``; ``prefix_cache.PrefixCache``) makes it a
replica with its own prefix cache: cached tokens are the prompt's longest block-aligned
prefix it served before, the TTFT grows with the uncached rest, its /metrics prefix-cache
counters count them and ``POST /reset_prefix_cache`` empties it (404 without one, as vLLM
outside its dev mode).

``GET /stats`` (``?reset=1`` also clears them) returns what the server saw, with
``time.perf_counter()`` timestamps: per stream the prompt's first word, when
the request had been read, when its first and last tokens were written; the
peak number of concurrent streams; connections accepted. On Linux
``perf_counter`` is CLOCK_MONOTONIC, one clock for every process, so a client
on the same machine can split its measured TTFT into send path, server
lateness and receive path.
"""

from labapp.ops.scripted.prefix_cache import PrefixCache
from labapp.ops.scripted.run import ThreadedServer, main, raise_open_file_limit, serve, spawn
from labapp.ops.scripted.script import REQUEST_METRICS, Script, Stats, plain_words
from labapp.ops.scripted.server import READY_LINE, ScriptedServer, run_server

__all__ = [
    "READY_LINE",
    "REQUEST_METRICS",
    "PrefixCache",
    "Script",
    "ScriptedServer",
    "Stats",
    "ThreadedServer",
    "main",
    "plain_words",
    "raise_open_file_limit",
    "run_server",
    "serve",
    "spawn",
]
