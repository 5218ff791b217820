"""The vLLM boundary: the only code that talks to a vLLM server.

- ``client``: the OpenAI-compatible HTTP client used by the chat, the jobs and the tools:
  ``connect`` (every connection pool to a server), ``stream_request`` (one request, as a
  ``RequestSpec``, streamed and measured; ``stream_completion``/``stream_chat`` beneath it),
  tokenize, model listing, engine info, prefix-cache reset;
- ``records``: one request as measured (``RequestRecord``) and how a streamed chunk
  folds into it (docs/metrics.md, "Per request");
- ``server_metrics``: the engine's Prometheus ``/metrics``, snapshots and deltas.

Nothing here imports ``bench``: run aggregates (``bench.metrics``) sit above it.
"""
