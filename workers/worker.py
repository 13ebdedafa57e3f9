"""Worker processes.

Distributed mode: one faust-streaming app per projection, its consumer group named
``<MEMLEDGER_CONSUMER_GROUP_PREFIX>.<projection>_v<version>`` (prefix default ``memledger``);
several projections in one command run as one
child process each, supervised here. The vectors worker owns a local Qdrant index (when
no Qdrant server is configured) and answers vector queries for other processes on
``MEMLEDGER_VECTOR_QUERY_URL``.

Embedded mode: projections in this process, polling the Postgres log.

Faust's committed consumer offsets only say where to resume reading; what is applied is
decided by each projection's own stored position, so a record delivered twice (after a
crash before a commit) changes nothing the second time.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from ledger.eventlog import LogRecord
from workers.bootstrap import Services, build
from workers.settings import Settings

log = logging.getLogger(__name__)


def run_worker(names: Sequence[str], poll_interval_s: float = 0.5) -> None:
    """Run the named projections until SIGTERM/SIGINT."""
    settings = Settings()
    if settings.mode == "embedded":
        _run_embedded(settings, names, poll_interval_s)
    elif len(names) == 1:
        run_faust(settings, names[0])
    else:
        _supervise(names)


def _run_embedded(settings: Settings, names: Sequence[str], poll_interval_s: float) -> None:
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    svc = build(settings, projections=tuple(names))
    try:
        print(f"worker: embedded, projections {', '.join(names)}; Ctrl-C stops", flush=True)
        while not stopping:
            if svc.catch_up() == 0:
                time.sleep(poll_interval_s)
    finally:
        svc.close()


def _supervise(names: Sequence[str]) -> None:
    """Start one child worker per projection; stop them all on SIGTERM/SIGINT or when one dies."""
    children = {
        name: subprocess.Popen([sys.executable, "-m", "workers", "worker", "--projection", name]) for name in names
    }
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"worker: supervising {', '.join(f'{n} (pid {c.pid})' for n, c in children.items())}", flush=True)
    try:
        while not stopping:
            dead = [n for n, c in children.items() if c.poll() is not None]
            if dead:
                log.error("worker for %s exited with %s; stopping the others", dead, children[dead[0]].returncode)
                break
            time.sleep(0.5)
    finally:
        for child in children.values():
            if child.poll() is None:
                child.terminate()
        for child in children.values():
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def run_faust(settings: Settings, name: str, batch_size: int = 256, within_s: float = 0.2) -> None:
    """Run one projection as a faust-streaming app (blocks until stopped)."""
    import faust

    svc = build(settings, own_vectors=name == "vectors", projections=(name,))
    datadir = settings.data_dir / "faust" / f"{name}_v1"
    datadir.mkdir(parents=True, exist_ok=True)
    projection = svc.projections[name]
    runner = svc.runner(name)
    server = _maybe_serve_vectors(svc, name)
    assert settings.kafka_bootstrap is not None
    app = faust.App(
        f"{settings.consumer_group_prefix}.{projection.id}",
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=batch_size,
        broker_commit_interval=1.0,
        producer_acks=-1,
    )
    topic = app.topic(settings.topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

    @app.agent(topic)
    async def project(stream: Any) -> None:
        loop = asyncio.get_running_loop()
        async for events in stream.take_events(batch_size, within=within_s):
            records = [
                LogRecord(
                    e.message.partition,
                    e.message.offset,
                    (e.message.key or b"").decode("utf-8", "replace"),
                    e.message.value,
                    int((e.message.timestamp or 0) * 1000),
                )
                for e in events
            ]
            records.sort(key=lambda r: (r.partition, r.offset))
            await loop.run_in_executor(None, runner.handle, records)

    group = f"{settings.consumer_group_prefix}.{projection.id}"
    print(f"worker: {projection.id} on {settings.kafka_bootstrap}, consumer group {group}", flush=True)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        if server is not None:
            server.stop()
        svc.close()


def _maybe_serve_vectors(svc: Services, name: str) -> Any:
    if name != "vectors" or svc.settings.qdrant_url or svc.index is None:
        return None
    from projections.vector_remote import VectorQueryServer

    url = urlparse(svc.settings.vector_query_url)
    server = VectorQueryServer(svc.index, host=url.hostname or "127.0.0.1", port=url.port or 16334)
    server.start()
    log.info("answering vector queries on %s", server.url)
    return server
