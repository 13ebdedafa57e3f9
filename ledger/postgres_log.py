"""The embedded ``EventLog`` adapter: an append-only Postgres table.

Appends are serialised by a transaction-scoped advisory lock, so offsets are gapless
and become visible in order: a reader never sees offset ``n + 1`` before ``n``.
Rows are never updated or deleted by this code.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg_pool import ConnectionPool

from ledger.errors import EventLogError
from ledger.eventlog import TOPIC, DeadLetter, LogPosition, LogRecord, partition_for
from ledger.pgschema import ensure_schema

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS memory_events (
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    "offset"     bigint      NOT NULL,
    key          text        NOT NULL,
    value        bytea       NOT NULL,
    appended_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (topic, partition, "offset")
);
"""


class PostgresEventLog:
    """``EventLog`` over a Postgres table; ``partitions`` is fixed at construction."""

    def __init__(self, pool: ConnectionPool, partitions: int = 1, topic: str = TOPIC) -> None:
        if partitions < 1:
            raise ValueError("partitions: must be at least 1")
        self.topic = topic
        self._partitions = partitions
        self._pool = pool
        with pool.connection() as conn:
            ensure_schema(conn, "memory_events", SCHEMA_SQL)

    @property
    def partitions(self) -> int:
        return self._partitions

    def append(self, key: str, value: bytes) -> LogPosition:
        return self.append_batch([(key, value)])[0]

    def shares(self, pool: ConnectionPool) -> bool:
        """Whether the log lives in the database of ``pool`` (the ledger then appends in
        its commands' own transactions: ``ledger.appending``)."""
        return pool is self._pool

    def append_batch(self, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        """Append all records in one transaction: all of them are durable, or none."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                return self.append_in(conn, items)
        except psycopg.Error as exc:
            raise EventLogError(f"append to {self.topic} failed: {exc}") from exc

    def append_in(self, conn: psycopg.Connection, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        """Append the records in ``conn``'s open transaction (one ``COPY``): they become
        visible, gapless and in order, when it commits, and vanish if it rolls back. The
        partitions' advisory locks are held until then, so keep the rest of the
        transaction short. Raises psycopg errors."""
        if not items:
            return []
        partitions = [partition_for(k, self._partitions) for k, _ in items]
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(t)) FROM (SELECT unnest(%s::text[]) AS t ORDER BY 1) AS q",
            ([f"{self.topic}/{p}" for p in sorted(set(partitions))],),
        )
        rows = conn.execute(
            'SELECT partition, max("offset") + 1 FROM memory_events WHERE topic = %s AND partition = ANY(%s)'
            " GROUP BY partition",
            (self.topic, sorted(set(partitions))),
        ).fetchall()
        next_offset = {int(p): int(n) for p, n in rows}
        positions: list[LogPosition] = []
        with (
            conn.cursor() as cur,
            cur.copy('COPY memory_events (topic, partition, "offset", key, value) FROM STDIN') as copy,
        ):
            for (key, value), partition in zip(items, partitions, strict=True):
                offset = next_offset.get(partition, 0)
                next_offset[partition] = offset + 1
                copy.write_row((self.topic, partition, offset, key, value))
                positions.append(LogPosition(partition, offset))
        return positions

    def read(self, partition: int, from_offset: int, max_records: int = 500) -> list[LogRecord]:
        try:
            with self._pool.connection() as conn:
                rows = conn.execute(
                    """
                    SELECT "offset", key, value, (extract(epoch FROM appended_at) * 1000)::bigint
                      FROM memory_events
                     WHERE topic = %s AND partition = %s AND "offset" >= %s
                     ORDER BY "offset" LIMIT %s
                    """,
                    (self.topic, partition, from_offset, max_records),
                ).fetchall()
        except psycopg.Error as exc:
            raise EventLogError(f"read of {self.topic}[{partition}] failed: {exc}") from exc
        return [LogRecord(partition, int(o), k, bytes(v), int(ts)) for o, k, v, ts in rows]

    def end_offsets(self) -> dict[int, int]:
        try:
            with self._pool.connection() as conn:
                rows = conn.execute(
                    'SELECT partition, max("offset") + 1 FROM memory_events WHERE topic = %s GROUP BY partition',
                    (self.topic,),
                ).fetchall()
        except psycopg.Error as exc:
            raise EventLogError(f"reading the end of {self.topic} failed: {exc}") from exc
        ends = {p: 0 for p in range(self._partitions)}
        ends.update({int(p): int(n) for p, n in rows})
        return ends

    def close(self) -> None:
        return None


DLQ_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS memory_dlq (
    id          bigserial PRIMARY KEY,
    projection  text NOT NULL,
    partition   integer NOT NULL,
    "offset"    bigint NOT NULL,
    key         text NOT NULL,
    value       bytea NOT NULL,
    reason      text NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (projection, partition, "offset")
);
"""


class PostgresDeadLetterQueue:
    """``DeadLetterQueue`` in a Postgres table (the embedded ``memory.dlq``).
    Putting the same (projection, partition, offset) twice keeps one letter."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        with pool.connection() as conn:
            ensure_schema(conn, "memory_dlq", DLQ_SCHEMA_SQL)

    def put(self, letter: DeadLetter) -> None:
        try:
            with self._pool.connection() as conn:
                conn.execute(
                    'INSERT INTO memory_dlq (projection, partition, "offset", key, value, reason)'
                    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (letter.projection, letter.partition, letter.offset, letter.key, letter.value, letter.reason),
                )
        except psycopg.Error as exc:
            raise EventLogError(f"dead-lettering failed: {exc}") from exc

    def list(self, limit: int = 100) -> list[DeadLetter]:
        try:
            with self._pool.connection() as conn:
                rows = conn.execute(
                    'SELECT projection, partition, "offset", key, value, reason FROM memory_dlq'
                    " ORDER BY id DESC LIMIT %s",
                    (limit,),
                ).fetchall()
        except psycopg.Error as exc:
            raise EventLogError(f"reading dead letters failed: {exc}") from exc
        return [DeadLetter(p, int(pa), int(o), k, bytes(v), r) for p, pa, o, k, v, r in reversed(rows)]
