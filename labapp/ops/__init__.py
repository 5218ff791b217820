"""Operations tooling, not the website, and a Django app of its own (``apps.OpsConfig``): the
process supervisor behind ``make run`` (``stack``), the load test (``loadtest``), the performance
table (``perf``), the lab's measurements of itself (``measures``, one per ``manage.py`` command in
``management/commands``), the scripted OpenAI-compatible server (``scripted``) and the one report
writer they share (``report``)."""
