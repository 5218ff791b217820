"""Settings of every process of a class rehearsal (``labapp.ops.rehearsal``): the one settings module,
with two changes a loopback rehearsal needs.

* nginx listens on plain http on 127.0.0.1 (no certificate to make or trust): the class server's
  ``Secure`` cookies would never come back over it, so they are off here. Everything else of
  ``LAB_MODE=class`` holds: sign-up with a join code, the throttles, the access rules.
* ``LAB_REHEARSAL_SCALE=minimum`` lays each rehearsed lab's minimum settings (what a hand-in
  accepts) over its run button, as the test settings do: a default Lab 1 takes about 4 min on
  this 2-core machine, so thirty learners' default runs are hours on one measuring engine.
"""

import os

from labapp.settings import *  # noqa: F403

SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False

# Lab 1: the four shapes once each; Lab 5: one context, its four cells.
MINIMUM_LAB_RUNS: dict[int, dict[str, object]] = {1: {"repeats": 1}, 5: {"contexts": 1}}
LAB_RUN_SETTINGS = MINIMUM_LAB_RUNS if os.environ.get("LAB_REHEARSAL_SCALE", "minimum") == "minimum" else {}
