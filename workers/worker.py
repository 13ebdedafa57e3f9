"""Worker processes.

Distributed mode: one faust-streaming app per projection version, its consumer group
named ``<MEMLEDGER_CONSUMER_GROUP_PREFIX>.<projection>_v<version>`` (prefix default
``memledger``), each in a child process supervised here. The supervisor follows the
version registry: every version that is not retired runs: the one a rebuild is building
(from offset 0, in its own consumer group), the serving one, and the previous one (so a
rollback finds it up to date); a retired one loses its worker. The vectors worker of
version N owns collection ``memories_vN`` of a local Qdrant index (when no Qdrant server
is configured) and answers vector queries for other processes on
``MEMLEDGER_VECTOR_QUERY_URL`` with the port raised by N - 1.

Embedded mode: projections in this process, polling the Postgres log; every live version.

Erasures also take a lane ahead of the log: each faust worker polls the tombstone
registry every second and purges new erasures from its store at once
(``projections.erasure_lane``); the in-order ``ErasureRequested`` writes the receipt.

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
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlparse

from ledger.eventlog import LogRecord
from projections import versions
from projections.base import Projection
from projections.erasure_lane import lane_for
from projections.errors import VersionError
from projections.runner import ProjectionRunner
from projections.vectors import VectorsProjection
from workers.bootstrap import Services, build, vector_query_url
from workers.settings import Settings

log = logging.getLogger(__name__)


def run_worker(names: Sequence[str], poll_interval_s: float = 0.5, version: int | None = None) -> None:
    """Run the named projections until SIGTERM/SIGINT: every version of each that is not
    retired (from the registry; embedded mode: serving and previous), or only ``version`` (distributed mode,
    one name: how the supervisor starts its children)."""
    settings = Settings()
    if settings.mode == "embedded":
        _run_embedded(settings, names, poll_interval_s)
    elif version is not None:
        if len(names) != 1:
            raise ValueError("version: give exactly one --projection with --version")
        run_faust(settings, names[0], version)
    else:
        _supervise(settings, names)


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
            if svc.catch_up() == 0:  # every live version, as the registry says now
                time.sleep(poll_interval_s)
    finally:
        svc.close()


Child = tuple[str, int]
"""(projection name, version): one faust worker process."""


def _spawn(child: Child) -> subprocess.Popen[bytes]:
    name, version = child
    verbose = ["-v"] if logging.getLogger().isEnabledFor(logging.INFO) else []  # as the supervisor was started
    return subprocess.Popen(
        [sys.executable, "-m", "workers", *verbose, "worker", "--projection", name, "--version", str(version)]
    )


def desired_children(settings: Settings, names: Sequence[str], known: set[Child] | None) -> set[Child]:
    """The versions of ``names`` that are not retired (building, serving, previous), from
    the registry; version 1 of each before the registry exists; ``known`` (the last answer) when Postgres cannot be
    read right now."""
    import psycopg

    assert settings.postgres_dsn is not None
    try:
        with psycopg.connect(settings.postgres_dsn, connect_timeout=5) as conn:
            if conn.execute("SELECT to_regclass('projection_versions')").fetchone() == (None,):
                return {(n, 1) for n in names}
            return {(info.name, info.version) for n in names for info in versions.running(conn, n)}
    except psycopg.Error as exc:
        log.warning("worker: cannot read the version registry (%s); keeping the running versions", exc)
        return known if known is not None else {(n, 1) for n in names}


def _supervise(settings: Settings, names: Sequence[str], registry_every_s: float = 2.0) -> None:
    """Run one child worker per version of each projection that is not retired
    (``--projection NAME --version N``), following the registry: a version a rebuild
    registers gets a child within ``registry_every_s`` seconds (it builds the version from
    offset 0 in its own consumer group), a retired one loses its child. A child that
    dies is restarted (backoff 1 s doubling to 60 s). SIGTERM/SIGINT stops them all."""
    wanted = desired_children(settings, names, None)
    children = {child: _spawn(child) for child in sorted(wanted)}
    backoff_s = dict.fromkeys(children, 1.0)
    restart_at: dict[Child, float] = {}
    stopping = _stop_on_signals()
    next_registry_read = time.monotonic() + registry_every_s
    print(f"worker: supervising {_describe(children)}", flush=True)
    try:
        while not stopping.is_set():
            now = time.monotonic()
            if now >= next_registry_read:
                next_registry_read = now + registry_every_s
                wanted = desired_children(settings, names, wanted)
                for child in sorted(set(children) - wanted):
                    print(f"worker: {child[0]}_v{child[1]} is no longer live; stopping it", flush=True)
                    _stop([children.pop(child)])
                    restart_at.pop(child, None)
                for child in sorted(wanted - set(children)):
                    children[child] = _spawn(child)
                    backoff_s.setdefault(child, 1.0)
                    print(f"worker: started {child[0]}_v{child[1]} (pid {children[child].pid})", flush=True)
            for child, proc in list(children.items()):
                if proc.poll() is None or stopping.is_set():
                    continue
                if child not in restart_at:
                    restart_at[child] = now + backoff_s[child]
                    print(
                        f"worker: {child[0]}_v{child[1]} exited with {proc.returncode};"
                        f" restarting in {backoff_s[child]:.0f}s",
                        file=sys.stderr,
                        flush=True,
                    )
                    backoff_s[child] = min(backoff_s[child] * 2, 60.0)
                elif now >= restart_at[child]:
                    del restart_at[child]
                    children[child] = _spawn(child)
            time.sleep(0.5)
    finally:
        _stop(list(children.values()))


def _describe(children: dict[Child, subprocess.Popen[bytes]]) -> str:
    return ", ".join(f"{n}_v{v} (pid {p.pid})" for (n, v), p in sorted(children.items()))


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


BATCH_SIZE = 256
"""Records a faust worker takes per batch (within ``within_s`` seconds)."""

VECTORS_BATCH_SIZE = 64
"""The vectors worker's batch: embedding is its slow part (MiniLM: about 120 texts/s on
2 shared cores), and the erasure lane waits for the batch in progress. Measured with
``memledger bench erasure`` (200 writes/s, MiniLM): batches of 256 gave ack -> absent p50
9.4 s, p99 20.1 s; batches of 64 p50 4.4 s, p99 6.7 s, with the same write lag."""


def run_faust(
    settings: Settings,
    name: str,
    version: int,
    batch_size: int | None = None,
    within_s: float = 0.2,
    lane_interval_s: float = 1.0,
) -> None:
    """Run version ``version`` of one projection as a faust-streaming app, consumer group
    ``<prefix>.<name>_v<version>`` (blocks until stopped). A vectors worker opens its own
    collection and, without a Qdrant server, answers vector queries for it on
    ``vector_query_url(settings, version)``. ``batch_size`` defaults to ``BATCH_SIZE``
    (``VECTORS_BATCH_SIZE`` for vectors). Before it joins its consumer group it applies
    whatever lies between its own stored positions and the end of the log. Every
    ``lane_interval_s`` seconds, between batches (a thread of its own, running from the
    start), its erasure lane purges newly erased memories from the store ahead of log
    order (``projections.erasure_lane``).

    Raises:
        VersionError: the registry has no such version, or it is retired.
    """
    import faust

    batch_size = batch_size or (VECTORS_BATCH_SIZE if name == "vectors" else BATCH_SIZE)
    svc = build(settings, own_vectors=False, projections=())
    with svc.pool.connection() as conn:
        found = [v for v in versions.versions(conn, name) if v.version == version and v.state != "retired"]
    if not found:
        svc.close()
        raise VersionError("version", f"{name}_v{version} is not registered or is retired")
    projection = _open_projection(svc, found[0])
    runner = svc.runner_for(projection)
    lane = lane_for(svc.pool, projection)
    store_lock = threading.Lock()  # the lane and the batches take turns on the store
    embedding = _start_embedding(projection, store_lock)
    datadir = settings.data_dir / "faust" / projection.id
    datadir.mkdir(parents=True, exist_ok=True)
    server = _maybe_serve_vectors(svc, name, version)
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
                await loop.run_in_executor(None, _locked, store_lock, handle_contiguously, svc, runner, records)
            except BaseException:
                # faust may already have committed this batch's offsets: never let it go on
                # past records that were not applied. Exit hard; on restart, positions decide.
                log.critical(
                    "%s: cannot apply a batch; exiting so that nothing is skipped", projection.id, exc_info=True
                )
                os._exit(70)

    group = f"{settings.consumer_group_prefix}.{projection.id}"
    print(f"worker: {projection.id} on {settings.kafka_bootstrap}, consumer group {group}", flush=True)
    stop_lane = threading.Event()
    lane_thread = threading.Thread(
        target=_run_lane, args=(lane.poll_logged, store_lock, stop_lane, lane_interval_s), daemon=True
    )
    lane_thread.start()  # from the start: not only once the consumer group has assigned partitions
    # the consumer group's offsets may be ahead of this projection's own positions (a
    # Postgres restored from a backup): apply what the positions say is missing first
    caught_up = runner.catch_up(svc.log, batch_size, lock=store_lock)
    if caught_up:
        log.warning("%s: applied %d records between its stored positions and the log's end", projection.id, caught_up)
    verbose = logging.getLogger().isEnabledFor(logging.INFO)  # memledger -v
    worker = faust.Worker(app, loglevel="INFO" if verbose else "WARNING", quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        stop_lane.set()
        if embedding is not None:
            embedding.set()
        if server is not None:
            server.stop()
        svc.close()


def _start_embedding(projection: Projection, lock: threading.Lock) -> threading.Event | None:
    """For the vectors projection: apply events in log order without embedding (writes
    are queued: ``VectorsProjection.defer_embedding``) and embed the queue in a thread
    of its own, so that erasures and their receipts never wait behind the embedding
    backlog. Returns the event that stops the thread (``None`` for other projections)."""
    if not isinstance(projection, VectorsProjection):
        return None
    projection.defer_embedding = True
    stop = threading.Event()
    threading.Thread(target=_run_embedding, args=(projection, lock, stop), daemon=True, name="embedding").start()
    return stop


def _run_embedding(
    projection: VectorsProjection, lock: threading.Lock, stop: threading.Event, poll_s: float = 1.0
) -> None:
    """Embed ``projection``'s queued writes until ``stop`` is set: as soon as a batch
    that queued writes commits (``projection.queued``), else every ``poll_s`` seconds; a
    failure is logged and tried again a second later (the rows stay queued: nothing is
    skipped)."""
    while not stop.is_set():
        projection.queued.clear()
        try:
            while projection.embed_pending(lock=lock) and not stop.is_set():
                pass
        except Exception as exc:  # a store is down: the queue waits, the in-order apply goes on
            log.warning("%s: embedding failed, retrying in 1 s: %s", projection.id, exc)
            stop.wait(1.0)
            continue
        projection.queued.wait(poll_s)


def _run_lane(poll: Callable[[], None], lock: threading.Lock, stop: threading.Event, interval_s: float) -> None:
    """Call ``poll`` (an erasure lane's) every ``interval_s`` seconds, holding ``lock``,
    until ``stop`` is set."""
    while not stop.wait(interval_s):
        with lock:
            poll()


def _locked(lock: threading.Lock, fn: Callable[..., None], *args: Any) -> None:
    with lock:
        fn(*args)


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


def _open_projection(svc: Services, info: versions.VersionInfo, retry_s: float = 1.0) -> Projection:
    """The projection of ``info``; a vectors version whose local collection another
    process holds (a ``replay`` building it) is waited for, retrying every ``retry_s``
    seconds, and taken over when that process lets go."""
    if info.name != "vectors":
        return svc.stores.projection(info)
    while not svc.stores.adopt(info.version):
        log.warning("%s: its collection is held by another process (a replay?); waiting", info.id)
        time.sleep(retry_s)
    return svc.stores.projection(info)


def _maybe_serve_vectors(svc: Services, name: str, version: int) -> Any:
    if name != "vectors" or svc.settings.qdrant_url:
        return None
    from projections.vector_remote import VectorQueryServer

    url = urlparse(vector_query_url(svc.settings, version))
    server = VectorQueryServer(svc.stores.index(version), host=url.hostname or "127.0.0.1", port=url.port or 16334)
    server.start()
    log.info("answering vector queries on %s", server.url)
    return server
