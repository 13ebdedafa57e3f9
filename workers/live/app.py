"""The faust-streaming worker of one projection version (distributed mode).

Consumer group ``<MEMLEDGER_CONSUMER_GROUP_PREFIX>.<projection>_v<version>``. What is
applied is decided by the projection's own stored positions, not by the group's
committed offsets (``workers.live.apply``); events are acked, and so their offsets
committed, only once applied.

Latency: nothing waits on a timer between a record's arrival and its application.
Batches end when the consumer has nothing more to give (``workers.live.batches``), not
when faust's ``take(n, within)`` timer runs out. The broker answers a fetch as soon as
one byte is there (``fetch.min.bytes`` = 1), so faust's fixed ``fetch_max_wait_ms`` of
1.5 s only bounds an idle fetch.

Rejoin: each worker is a static member of its group (``workers.live.membership``), so
one killed and restarted in its place gets its partitions back at once; the session
timeout (``MEMLEDGER_CONSUMER_SESSION_TIMEOUT_S``) only bounds how long the partitions of
a worker that does not come back wait before the others take them over.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from ledger.eventlog import LogRecord
from projections import stalls, versions
from projections.base import Projection
from projections.erasure_lane import lane_for
from projections.errors import VersionError
from workers.bootstrap import Services, build, vector_query_url
from workers.failures import one_line, store_failed
from workers.live.apply import PartitionStalls, handle_contiguously, record_in
from workers.live.batches import drain
from workers.live.embedding import start_embedding
from workers.live.membership import InstanceSlot
from workers.settings import Settings

log = logging.getLogger(__name__)

BATCH_SIZE = 256
"""At most this many records per batch (fewer when the consumer has no more)."""

VECTORS_BATCH_SIZE = 64
"""The vectors worker's batch: embedding is its slow part (MiniLM: about 120 texts/s on
2 shared cores), and the erasure lane waits for the batch in progress. Measured with
``memledger bench erasure`` (200 writes/s, MiniLM): batches of 256 gave ack -> absent p50
9.4 s, p99 20.1 s; batches of 64 p50 4.4 s, p99 6.7 s, with the same write lag."""


def group_id(settings: Settings, projection_id: str) -> str:
    """The consumer group of projection version ``projection_id`` (e.g. ``facts_v1``)."""
    return f"{settings.consumer_group_prefix}.{projection_id}"


def faust_options(settings: Settings, instance_id: str | None, commit_every: int = BATCH_SIZE) -> dict[str, Any]:
    """The faust ``App`` settings of a worker (besides id, broker and data directory):
    offsets from the earliest record for a new group; the offsets of what was applied
    committed every 0.5 s or every ``commit_every`` acked records; the session timeout
    and heartbeat interval of the settings (seconds); ``instance_id`` as the static
    ``group.instance.id`` (``None``: dynamic membership). A rebalance or a stop does not
    wait for the records taken and not acked yet (``stream_wait_empty``): the records of a
    stalled partition are never acked, so waiting for them held up every rebalance of
    the group and every SIGTERM until SIGKILL; a record not acked is delivered again, and
    the stored positions decide what is applied."""
    session_s = settings.consumer_session_timeout_s
    return {
        "store": "memory://",
        "web_enabled": False,
        "topic_allow_declare": False,
        "topic_disable_leader": True,
        "consumer_auto_offset_reset": "earliest",
        "consumer_group_instance_id": instance_id,
        "broker_commit_every": commit_every,
        "broker_commit_interval": 0.5,
        "broker_session_timeout": session_s,
        "broker_heartbeat_interval": min(settings.consumer_heartbeat_interval_s, session_s / 3),
        "broker_request_timeout": max(90.0, session_s + 10.0),
        "producer_acks": -1,
        "stream_wait_empty": False,
    }


def run_faust(
    settings: Settings,
    name: str,
    version: int,
    batch_size: int | None = None,
    lane_interval_s: float = 1.0,
) -> None:
    """Run version ``version`` of one projection as a faust-streaming app (blocks until
    stopped). A vectors worker opens its own collection and, without a Qdrant server,
    answers vector queries for it on ``vector_query_url(settings, version)``.
    ``batch_size`` defaults to ``BATCH_SIZE`` (``VECTORS_BATCH_SIZE`` for vectors).

    Before it joins its consumer group it applies whatever lies between its own stored
    positions and the end of the log (a partition that stops at an unreadable erasure
    does not hold up the others). Every ``lane_interval_s`` seconds, between batches (a
    thread of its own, running from the start), its erasure lane purges newly erased
    memories from the store ahead of log order (``projections.erasure_lane``). A
    vectors worker queues its writes and embeds them in a thread of its own
    (``workers.live.embedding``).

    Raises:
        VersionError: the registry has no such version, or it is retired.
    """
    import faust
    from faust.types import TP

    batch_size = batch_size or (VECTORS_BATCH_SIZE if name == "vectors" else BATCH_SIZE)
    svc = build(settings, own_vectors=False, projections=(), create_topics=False)  # topics: checked, never created
    with svc.pool.connection() as conn:
        found = [v for v in versions.versions(conn, name) if v.version == version and v.state != "retired"]
    if not found:
        svc.close()
        raise VersionError("version", f"{name}_v{version} is not registered or is retired")
    projection = _open_projection(svc, found[0])
    runner = svc.runner_for(projection)
    lane = lane_for(svc.pool, projection)
    partition_stalls = PartitionStalls(projection.id, record_in(svc.pool))
    store_lock = threading.Lock()  # the lane, the batches and the embedding take turns on the store
    datadir = settings.data_dir / "faust" / projection.id
    datadir.mkdir(parents=True, exist_ok=True)
    server = _maybe_serve_vectors(svc, name, version)
    group = group_id(settings, projection.id)
    assert settings.kafka_bootstrap is not None and settings.postgres_dsn is not None
    slot = InstanceSlot.claim(settings.postgres_dsn, group) if settings.consumer_static_membership else None
    app = faust.App(
        group,
        broker=f"kafka://{settings.kafka_bootstrap}",
        datadir=str(datadir),
        **faust_options(settings, slot.instance_id if slot else None, commit_every=batch_size),
    )
    topic = app.topic(settings.topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

    @app.agent(topic)
    async def project(stream: Any) -> None:
        loop = asyncio.get_running_loop()
        manual = stream.noack()
        async for events in drain(manual, batch_size):
            records = [_record(e.message) for e in events]
            try:
                stopped = await loop.run_in_executor(
                    None, _locked, store_lock, handle_contiguously, svc.log, runner, records, partition_stalls
                )
            except BaseException as exc:
                # never let the group's offsets move past records that were not applied:
                # exit hard; on restart, the positions decide. A store that failed is
                # said in one line; anything else is a bug, with its traceback
                failed = store_failed(exc)
                log.critical(
                    "%s: cannot apply a batch%s; exiting so that nothing is skipped",
                    projection.id,
                    f" (a store failed: {one_line(exc)})" if failed else "",
                    exc_info=not failed,
                )
                os._exit(70)
            held = stopped | {r.partition for r in records if r.partition in partition_stalls.stalled}
            if held:  # again after a rebalance, which may have resumed a stalled partition
                app.consumer.pause_partitions([TP(settings.topic, p) for p in held])
            for event in events:
                if event.message.partition not in partition_stalls.stalled:
                    await manual.ack(event)

    member = f", static member {slot.instance_id}" if slot else ""
    print(f"worker: {projection.id} on {settings.kafka_bootstrap}, consumer group {group}{member}", flush=True)
    stop_lane = threading.Event()
    lane_thread = threading.Thread(
        target=_run_lane, args=(lane.poll_logged, store_lock, stop_lane, lane_interval_s), daemon=True
    )
    lane_thread.start()  # from the start: not only once the consumer group has assigned partitions
    # the consumer group's offsets may be ahead of this projection's own positions (a
    # Postgres restored from a backup): apply what the positions say is missing first
    embedding = start_embedding(projection, store_lock)  # vectors: writes queued, embedded in a thread
    caught_up = runner.catch_up(svc.log, batch_size, lock=store_lock, on_stall=partition_stalls.note)
    if caught_up:
        log.warning("%s: applied %d records between its stored positions and the log's end", projection.id, caught_up)
    with svc.pool.connection() as conn:
        if stalls.clear(conn, projection.id):
            log.warning("%s: went on past the erasures it had stopped at", projection.id)
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
        if slot is not None:
            slot.release()
        svc.close()


def _record(message: Any) -> LogRecord:
    """The ``LogRecord`` of a faust message (timestamp: seconds -> milliseconds)."""
    key = (message.key or b"").decode("utf-8", "replace")
    return LogRecord(message.partition, message.offset, key, message.value, int((message.timestamp or 0) * 1000))


def _run_lane(poll: Callable[[], None], lock: threading.Lock, stop: threading.Event, interval_s: float) -> None:
    """Call ``poll`` (an erasure lane's) every ``interval_s`` seconds, holding ``lock``,
    until ``stop`` is set."""
    while not stop.wait(interval_s):
        with lock:
            poll()


def _locked(lock: threading.Lock, fn: Callable[..., set[int]], *args: Any) -> set[int]:
    with lock:
        return fn(*args)


def _open_projection(svc: Services, info: versions.VersionInfo, retry_s: float = 1.0) -> Projection:
    """The projection of ``info``; a vectors version whose local collection another
    process holds (a ``replay`` building it) is waited for, retrying every ``retry_s``
    seconds, and taken over when that process lets go."""
    import time

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
