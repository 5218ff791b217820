"""Operations tooling, not the website: the process supervisor behind ``make run``
(``stack``), the load test (``loadtest``) and the performance table (``perf``)."""
