"""Worker processes (``memledger worker``).

Distributed mode: one faust-streaming app per projection version, its consumer group
named ``<MEMLEDGER_CONSUMER_GROUP_PREFIX>.<projection>_v<version>`` (prefix default
``memledger``), each in a child process supervised here (``workers.live.supervisor``;
the worker itself: ``workers.live.app``). The supervisor follows the version registry:
every version that is not retired runs: the one a rebuild is building (from offset 0,
in its own consumer group), the serving one, and the previous one (so a rollback finds
it up to date); a retired one loses its worker. The vectors worker of version N owns
collection ``memories_vN`` of a local Qdrant index (when no Qdrant server is
configured) and answers vector queries for other processes on
``MEMLEDGER_VECTOR_QUERY_URL`` with the port raised by N - 1.

Embedded mode: projections in this process, polling the Postgres log; every live version.

Erasures also take a lane ahead of the log: each faust worker polls the tombstone
registry every second and purges new erasures from its store at once
(``projections.erasure_lane``); the in-order ``ErasureRequested`` writes the receipt.

Faust's committed consumer offsets only say where to resume reading; what is applied is
decided by each projection's own stored positions, so a record delivered twice (after a
crash before a commit) changes nothing the second time.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Sequence

from workers.bootstrap import build, prepare_topics
from workers.metrics.endpoint import embedded_metrics
from workers.settings import Settings


def run_worker(names: Sequence[str], poll_interval_s: float = 0.5, version: int | None = None) -> None:
    """Run the named projections until SIGTERM/SIGINT: every version of each that is not
    retired (from the registry; embedded mode: serving and previous), or only ``version`` (distributed mode,
    one name: how the supervisor starts its children).

    The supervisor checks the topics before it starts any child (``workers.bootstrap.prepare_topics``,
    never creating one): a missing or misconfigured topic is refused once, here, instead
    of by every child in a restart loop.

    Raises:
        ValueError: ``version`` given with other than exactly one name.
        TopicMisconfiguredError: distributed mode: a topic is missing or one of its
            settings differs (names the topic and the setting).
    """
    settings = Settings()
    if settings.mode == "embedded":
        _run_embedded(settings, names, poll_interval_s)
    elif version is not None:
        if len(names) != 1:
            raise ValueError("version: give exactly one --projection with --version")
        from workers.live.app import run_faust

        run_faust(settings, names[0], version)
    else:
        from workers.live.supervisor import supervise

        prepare_topics(settings, create=False)
        supervise(settings, names, _stop_on_signals())


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the loops below check it to stop cleanly."""
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping


def _run_embedded(settings: Settings, names: Sequence[str], poll_interval_s: float) -> None:
    stopping = _stop_on_signals()
    svc = build(settings, projections=tuple(names))
    embedded_metrics(svc)  # /metrics on MEMLEDGER_METRICS_HOST:PORT until svc closes
    try:
        print(f"worker: embedded, projections {', '.join(names)}; Ctrl-C stops", flush=True)
        while not stopping.is_set():
            if svc.catch_up() == 0:  # every live version, as the registry says now
                time.sleep(poll_interval_s)
    finally:
        svc.close()
