"""A class on one machine, for real: ``make class`` (``python -m labapp.ops.rehearsal``).

Starts a class server on loopback (``cluster``: PostgreSQL, Redis, Chroma, a measuring and a chat
engine, vllm-router in front of the chat engine, two Daphne processes behind nginx, two Celery
workers), then a simulated class (``learners``: learners sign up with the join code, chat, run
Labs 1 and 5 with predictions and hand them in; the instructor reads the gradebook), then prints
what happened (``report``): the makespan of the lab runs against the ideal, each learner's wait and
Jain's fairness index over them, runs passed and disturbed, the chat's TTFT, 5xx and what was lost.

    python -m labapp.ops.rehearsal [--learners 30] [--scripted] [--lab-scale minimum|default]

Figures are printed, never asserted; the reduced rehearsal in `make test`
(tests/ops/test_rehearsal.py, with the web fault) asserts only what was lost or broken and what
became of the killed web process's chat sockets.
"""
