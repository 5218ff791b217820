"""Classes: sign-up with join codes, rosters, assignments, the gradebook and its charts.

``access`` decides who reaches what (one place, reused by every view), ``services``
and ``roster`` write, ``selectors`` and ``charts`` read.
"""
