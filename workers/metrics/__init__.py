"""Prometheus metrics of ``memledger serve`` and ``memledger worker``.

- ``families``: every metric this code counts, defined once (names, units, labels);
- ``metered``: wrappers of the ports (event log, dead-letter queue, recall, projections)
  that ``workers.bootstrap`` puts around the adapters it builds, so the ledger and the
  projections count nothing themselves;
- ``ledger_state``: positions, lag and erasures, read from PostgreSQL and the log at
  scrape time;
- ``http``: serve's request middleware and its ``GET /metrics`` (admin scope);
- ``endpoint``: the workers' own ``/metrics`` listener (the supervisor serves its
  children's figures through prometheus-client's multiprocess mode).
"""
