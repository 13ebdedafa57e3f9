"""Dead letters of an erased subject.

A dead letter is a log record a projection could not decode, kept with its raw bytes
(``ledger.eventlog.DeadLetter``). Its key is the record's key, the ``subject_id``, so the
letters of a subject are known; what memory a letter is about is not (it did not decode),
so a letter belongs to an erasure when its key is the subject and

- the erasure is of the whole subject, or
- its raw bytes name one of the erased memory ids or the erased source.

Two queues, two answers:

- the Postgres DLQ table (``memory_dlq``, the embedded mode) is purged in the erasure's
  own transaction, and the purge is recorded in ``erasure_dead_letters``;
- the Kafka DLQ topic cannot be edited: Kafka deletes records only by retention, by
  compaction (per key: the DLQ is keyed by subject, and compacting it would keep the
  newest letter of every subject), or by ``DeleteRecords`` up to an offset (every letter
  of every subject before it). None of these removes exactly the letters of one
  erasure, so nothing is deleted; ``trace`` lists the letters that remain (store
  ``dlq``, status ``reported``) with their DLQ partition and offset. Letters that were
  valid events hold sealed text, unreadable once the keys are destroyed; bytes that
  never decoded may hold anything, which is why they are listed.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from psycopg.types.json import Jsonb

from ledger.errors import EventLogError
from ledger.pgschema import ensure_schema

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS erasure_dead_letters (
    request_id  text PRIMARY KEY,
    queue       text NOT NULL,
    purged      integer NOT NULL,
    letters     jsonb NOT NULL,
    purged_at   timestamptz NOT NULL
);
"""


@dataclass(frozen=True)
class ErasureScope:
    """What one erasure names: the subject, the erased memory ids, whether it is the
    whole subject, and the source it named (erasure by source)."""

    subject_id: str
    memory_ids: tuple[str, ...]
    whole_subject: bool = False
    source_ref: str | None = None

    def covers(self, key: str, value: bytes) -> bool:
        """Whether a dead letter with record ``key`` and raw ``value`` belongs to the erasure."""
        if key != self.subject_id:
            return False
        if self.whole_subject:
            return True
        needles = [*self.memory_ids, *([self.source_ref] if self.source_ref else [])]
        return any(n.encode("utf-8") in value for n in needles)


@dataclass(frozen=True)
class LetterRef:
    """Where a dead letter is: the projection that refused it, the source record's
    partition and offset, and (Kafka) the letter's own DLQ partition and offset."""

    projection: str
    partition: int
    offset: int
    dlq_partition: int | None = None
    dlq_offset: int | None = None

    def describe(self) -> str:
        where = f"{self.projection} p{self.partition}@{self.offset}"
        return where if self.dlq_partition is None else f"{where} (dlq p{self.dlq_partition}@{self.dlq_offset})"


@dataclass(frozen=True)
class DeadLetterProbe:
    """A live look at the DLQ for one erasure: the queue's name, whether it can be edited
    (Postgres table) or not (Kafka topic), and the letters of the erasure still there."""

    queue: str
    editable: bool
    remaining: tuple[LetterRef, ...] = field(default_factory=tuple)


def install(conn: psycopg.Connection) -> None:
    """Create ``erasure_dead_letters`` if missing."""
    ensure_schema(conn, "erasure_dead_letters", SCHEMA_SQL)


def purge_postgres_dlq(conn: psycopg.Connection, request_id: str, scope: ErasureScope) -> int | None:
    """Delete the erasure's letters from ``memory_dlq`` (in the caller's transaction) and
    record what was deleted; ``None`` when this database has no DLQ table (the DLQ is a
    Kafka topic). Returns the number of letters deleted."""
    if conn.execute("SELECT to_regclass('memory_dlq')").fetchone() == (None,):
        return None
    rows = conn.execute(
        'SELECT id, projection, partition, "offset", key, value FROM memory_dlq WHERE key = %s ORDER BY id',
        (scope.subject_id,),
    ).fetchall()
    hit = [r for r in rows if scope.covers(str(r[4]), bytes(r[5]))]
    if hit:
        conn.execute("DELETE FROM memory_dlq WHERE id = ANY(%s)", ([r[0] for r in hit],))
    letters = [{"projection": r[1], "partition": r[2], "offset": r[3]} for r in hit]
    conn.execute(
        "INSERT INTO erasure_dead_letters (request_id, queue, purged, letters, purged_at)"
        " VALUES (%s, 'memory_dlq', %s, %s, now())",
        (request_id, len(hit), Jsonb(letters)),
    )
    return len(hit)


def probe_postgres_dlq(conn: psycopg.Connection, scope: ErasureScope) -> DeadLetterProbe:
    """The erasure's letters still in ``memory_dlq`` (a letter put after the purge, by a
    projection that was behind, shows here)."""
    if conn.execute("SELECT to_regclass('memory_dlq')").fetchone() == (None,):
        return DeadLetterProbe("memory_dlq", True)
    rows = conn.execute(
        'SELECT projection, partition, "offset", key, value FROM memory_dlq WHERE key = %s ORDER BY id',
        (scope.subject_id,),
    ).fetchall()
    return DeadLetterProbe(
        "memory_dlq",
        True,
        tuple(LetterRef(r[0], int(r[1]), int(r[2])) for r in rows if scope.covers(str(r[3]), bytes(r[4]))),
    )


def probe_kafka_dlq(bootstrap: str, topic: str, scope: ErasureScope, timeout_s: float = 30.0) -> DeadLetterProbe:
    """The erasure's letters in the Kafka DLQ topic (read from the beginning to the end).

    Raises:
        EventLogError: the topic cannot be read within ``timeout_s`` seconds.
    """
    found: list[LetterRef] = []
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    except KafkaError as exc:
        raise EventLogError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return DeadLetterProbe(topic, False)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise EventLogError(f"reading {topic}: not at its end after {timeout_s}s")
            for msgs in consumer.poll(timeout_ms=1000).values():
                for m in msgs:
                    if (m.key or b"").decode("utf-8", "replace") != scope.subject_id:
                        continue
                    try:
                        body: dict[str, Any] = json.loads(m.value)
                        covered = scope.covers(scope.subject_id, base64.b64decode(body.get("value_b64", "")))
                        source = (int(body["partition"]), int(body["offset"])) if covered else (-1, -1)
                        projection = str(body["projection"])
                    except (ValueError, KeyError, TypeError, AttributeError):  # not the ledger's: it may hold anything
                        found.append(LetterRef("unknown", m.partition, m.offset, m.partition, m.offset))
                        continue
                    if covered:
                        found.append(LetterRef(projection, *source, m.partition, m.offset))
    except KafkaError as exc:
        raise EventLogError(f"reading {topic} on {bootstrap} failed: {exc}") from exc
    finally:
        consumer.close()
    return DeadLetterProbe(topic, False, tuple(found))


def scope_of(memory_ids: Sequence[str], request_kind: str, subject_id: str, source_ref: str | None) -> ErasureScope:
    """The ``ErasureScope`` of a recorded request (``erasure_requests`` row)."""
    return ErasureScope(subject_id, tuple(memory_ids), request_kind == "subject", source_ref)
