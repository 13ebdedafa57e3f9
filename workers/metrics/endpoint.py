"""The ``/metrics`` endpoint of ``memledger worker`` (its own listener: the workers have
no HTTP API), at ``MEMLEDGER_METRICS_HOST``:``MEMLEDGER_METRICS_PORT`` (loopback,
port 9465 by default; port 0: any free port). It answers without a credential: it is a
port for metrics only, bound to loopback unless the operator binds it elsewhere, and it
shows no ids and no content (``workers.metrics.families``).

- Distributed mode: the supervisor serves one endpoint for itself and all its children
  (one faust worker per projection version). It gives its children a directory of its
  own as ``PROMETHEUS_MULTIPROC_DIR``; each child writes its counts there
  (prometheus-client's multiprocess mode) and the endpoint serves their sum, with the
  ledger-state families read at scrape time (``workers.metrics.ledger_state``), so a
  child that restarts keeps its history and one scrape target covers the supervisor.
- Embedded mode: the one worker process serves its own counts and the ledger-state
  families.

A port already in use is logged and the worker runs on without metrics: the projections
matter more than their figures.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from psycopg_pool import ConnectionPool

from ledger.eventlog import EventLog
from workers.bootstrap import Services
from workers.metrics.ledger_state import LedgerStateCollector
from workers.settings import Settings

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass
class Endpoint:
    """A running ``/metrics`` listener; ``url`` is where it answers."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = str(self.server.server_address[0]), int(self.server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/metrics"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def start(settings: Settings, registry: Collector, who: str) -> Endpoint | None:
    """Listen on the configured address and serve ``registry``; prints where (``who``
    names the process in that line). ``None``, with a warning, when it cannot listen."""
    try:
        server, thread = start_http_server(settings.metrics_port, settings.metrics_host, registry=registry)
    except OSError as exc:
        log.warning(
            "%s: no /metrics: cannot listen on %s:%d (%s); set MEMLEDGER_METRICS_PORT",
            who,
            settings.metrics_host,
            settings.metrics_port,
            exc.strerror,
        )
        return None
    endpoint = Endpoint(server, thread)
    print(f"{who}: metrics at {endpoint.url}", flush=True)
    return endpoint


@contextmanager
def supervisor_metrics(settings: Settings) -> Iterator[Endpoint | None]:
    """For the supervisor of the faust workers, while the block runs: a multiprocess
    directory handed to every child started in the block (through the environment),
    and the endpoint serving the children's sum, the ledger-state families and the
    supervisor's own process figures. The directory is removed afterwards."""
    # prometheus-client was imported before the variable is set: this process's own values stay in memory
    path = tempfile.mkdtemp(prefix="memledger-metrics-")
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = path  # inherited by the children the supervisor starts
    assert settings.postgres_dsn is not None
    pool = ConnectionPool(settings.postgres_dsn, min_size=0, max_size=1, open=False, timeout=5)
    opened: list[EventLog] = []
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    ProcessCollector(registry=registry)
    registry.register(LedgerStateCollector(pool, lambda: _kafka_log(settings, opened)))
    endpoint = None
    try:
        pool.open(wait=False)
        endpoint = start(settings, registry, "worker")
        yield endpoint
    finally:
        if endpoint is not None:
            endpoint.stop()
        for event_log in opened:
            event_log.close()
        pool.close()
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)


def _kafka_log(settings: Settings, opened: list[EventLog]) -> EventLog:
    """The supervisor's reader of the Kafka log, built on the first scrape (and again
    after a failure)."""
    if not opened:
        from ledger.kafka_log import KafkaEventLog

        assert settings.kafka_bootstrap is not None
        opened.append(KafkaEventLog(settings.kafka_bootstrap, topic=settings.topic, create_topics=False))
    return opened[0]


def embedded_metrics(svc: Services) -> Endpoint | None:
    """The endpoint of the embedded default's worker: this process's counts and the
    ledger-state families of ``svc``, until ``svc`` closes."""
    collector = serve_process_metrics(svc.pool, svc.log)
    endpoint = start(svc.settings, REGISTRY, "worker")
    svc.on_close(lambda: REGISTRY.unregister(collector))
    if endpoint is not None:
        svc.on_close(endpoint.stop)
    return endpoint


def serve_process_metrics(pool: ConnectionPool, event_log: EventLog) -> LedgerStateCollector:
    """Add the ledger-state families of ``pool`` and ``event_log`` to this process's
    default registry (``memledger serve`` and the worker of the embedded default, which
    run the projections themselves); returns the collector, to ``unregister`` later."""
    collector = LedgerStateCollector(pool, lambda: event_log)
    REGISTRY.register(collector)
    return collector
