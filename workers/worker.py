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
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from ledger.eventlog import LogRecord
from projections.runner import ProjectionRunner
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


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the loops below check it to stop cleanly."""
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping


def _run_embedded(settings: Settings, names: Sequence[str], poll_interval_s: float) -> None:
    stopping = _stop_on_signals()
    svc = build(settings, projections=tuple(names))
    try:
        print(f"worker: embedded, projections {', '.join(names)}; Ctrl-C stops", flush=True)
        while not stopping.is_set():
            if svc.catch_up() == 0:
                time.sleep(poll_interval_s)
    finally:
        svc.close()


def _spawn(name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "workers", "worker", "--projection", name])


def _supervise(names: Sequence[str]) -> None:
    """Start one child worker per projection and restart one that dies (backoff 1 s
    doubling to 60 s); stop them all on SIGTERM/SIGINT."""
    children = {name: _spawn(name) for name in names}
    backoff_s = dict.fromkeys(names, 1.0)
    restart_at: dict[str, float] = {}
    stopping = _stop_on_signals()
    print(f"worker: supervising {', '.join(f'{n} (pid {c.pid})' for n, c in children.items())}", flush=True)
    try:
        while not stopping.is_set():
            now = time.monotonic()
            for name, child in children.items():
                if child.poll() is None or stopping.is_set():
                    continue
                if name not in restart_at:
                    restart_at[name] = now + backoff_s[name]
                    print(
                        f"worker: {name} exited with {child.returncode}; restarting in {backoff_s[name]:.0f}s",
                        file=sys.stderr,
                        flush=True,
                    )
                    backoff_s[name] = min(backoff_s[name] * 2, 60.0)
                elif now >= restart_at.pop(name):
                    children[name] = _spawn(name)
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
            try:
                await loop.run_in_executor(None, handle_contiguously, svc, runner, records)
            except BaseException:
                # faust may already have committed this batch's offsets: never let it go on
                # past records that were not applied. Exit hard; on restart, positions decide.
                log.critical(
                    "%s: cannot apply a batch; exiting so that nothing is skipped", projection.id, exc_info=True
                )
                os._exit(70)

    group = f"{settings.consumer_group_prefix}.{projection.id}"
    print(f"worker: {projection.id} on {settings.kafka_bootstrap}, consumer group {group}", flush=True)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        if server is not None:
            server.stop()
        svc.close()


def handle_contiguously(svc: Services, runner: ProjectionRunner, records: list[LogRecord]) -> None:
    """Apply ``records`` (any order, any partitions) so that no offset is ever skipped.

    The consumer group's committed offsets are only a hint: a record the projection has
    not applied (its stored position is behind the first record delivered) is read from
    the log directly and applied first. Records at or before the position are already
    done and change nothing.
    """
    done = runner.projection.positions()
    by_partition: dict[int, list[LogRecord]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_partition.setdefault(record.partition, []).append(record)
    for partition, batch in by_partition.items():
        expected = done.get(partition, -1) + 1
        while expected < batch[0].offset:
            missing = svc.log.read(partition, expected, min(500, batch[0].offset - expected))
            if not missing:
                raise RuntimeError(f"partition {partition}: offsets {expected}..{batch[0].offset - 1} are not readable")
            log.warning(
                "%s: re-reading partition %d offsets %d..%d the consumer skipped",
                runner.projection.id,
                partition,
                missing[0].offset,
                missing[-1].offset,
            )
            runner.handle(missing)
            expected = missing[-1].offset + 1
        runner.handle(batch)


def _maybe_serve_vectors(svc: Services, name: str) -> Any:
    if name != "vectors" or svc.settings.qdrant_url or svc.index is None:
        return None
    from projections.vector_remote import VectorQueryServer

    url = urlparse(svc.settings.vector_query_url)
    server = VectorQueryServer(svc.index, host=url.hostname or "127.0.0.1", port=url.port or 16334)
    server.start()
    log.info("answering vector queries on %s", server.url)
    return server
