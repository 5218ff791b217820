"""The lab's measurements of itself, one module per ``manage.py`` command of the same name
(``labapp/ops/management/commands/`` holds the thin wrappers Django finds): client overhead and
the race against ``vllm bench serve``, fidelity, the decode bound, retrieval at scale, recall,
embedding speed, the chat's overhead, the gradebook's time and each lab's reliability."""
