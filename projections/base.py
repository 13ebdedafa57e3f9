"""What every projection shares: the ``Projection`` protocol, log positions, erasure
receipts, and access to memory content through the key store and tombstones.

Position semantics: a projection's position for a partition is the offset of the last
record it has applied there (or -1); it resumes at position + 1. Postgres projections
store the position in the same transaction as their rows. Qdrant and Redis projections
apply idempotent, revision-guarded writes first and store the position after, so a crash
between the two re-applies harmlessly (DESIGN.md, invariant 2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import psycopg
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from contracts import (
    PERSONAL_CONTEXT,
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryRedacted,
    MemoryReinforced,
    MemoryReinstated,
    MemoryWritten,
    RetentionExpired,
    SummaryDerived,
    utc_now,
)
from contracts.memory import PersonalFields, SealedText
from ledger.crypto import Keyring
from ledger.errors import CorruptContentError
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema, vacuum
from projections.tombstone_registry import TombstoneSet

log = logging.getLogger(__name__)

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS projection_positions (
    projection  text NOT NULL,
    partition   integer NOT NULL,
    "offset"    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, partition)
);
CREATE TABLE IF NOT EXISTS erasure_receipts (
    request_id     text NOT NULL,
    store          text NOT NULL,
    projection     text NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    log_partition  integer NOT NULL,
    log_offset     bigint NOT NULL,
    items_removed  integer NOT NULL,
    PRIMARY KEY (request_id, store, projection)
);
"""


class Projection(Protocol):
    """A read model folded from the log. ``id`` is ``name_vN`` and is also the name of
    its consumer group and of its row in ``projection_positions``."""

    name: str
    version: int

    @property
    def id(self) -> str: ...

    def positions(self) -> dict[int, int]:
        """Last applied offset per partition (partitions never seen are absent)."""
        ...

    def apply(self, event: Event, position: LogPosition) -> None:
        """Apply one event read at ``position``; a position at or before the stored one
        is already done and changes nothing. Raises on store failure (retry it)."""
        ...

    def skip(self, position: LogPosition) -> None:
        """Advance past a record that was dead-lettered."""
        ...

    def reset(self) -> None:
        """Drop and recreate the projection's storage and positions (for a rebuild)."""
        ...

    def drop(self) -> None:
        """Drop the projection's storage and positions (retiring this version)."""
        ...


class PositionedProjection:
    """What every projection shares: its id, and positions stored in Postgres.

    Subclasses set ``name`` and call ``super().__init__(pool, version)``.
    """

    name: str

    def __init__(self, pool: ConnectionPool, version: int) -> None:
        self.version = version
        self._pool = pool
        with pool.connection() as conn:
            install(conn)

    @property
    def id(self) -> str:
        """``name_vN``: the consumer group suffix and the key of its positions."""
        return f"{self.name}_v{self.version}"

    def positions(self) -> dict[int, int]:
        with self._pool.connection() as conn:
            return load_positions(conn, self.id)

    def skip(self, position: LogPosition) -> None:
        with self._pool.connection() as conn, conn.transaction():
            save_position(conn, self.id, position)

    def apply(self, event: Event, position: LogPosition) -> None:
        self.apply_batch([(event, position)])

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]]) -> None:
        raise NotImplementedError

    def pending(self, items: Sequence[tuple[Event, LogPosition]]) -> list[tuple[Event, LogPosition]]:
        """The items after the stored positions (not applied yet)."""
        done = self.positions()
        return [(e, p) for e, p in items if done.get(p.partition, -1) < p.offset]

    def commit_positions(
        self, applied: Sequence[tuple[Event, LogPosition]], store: str, removed: Callable[[ErasureRequested], int]
    ) -> None:
        """After the store's own writes: receipts for erasures (``removed`` counts the
        items each one removed) and the positions, in one transaction."""
        with self._pool.connection() as conn, conn.transaction():
            for event, position in applied:
                if isinstance(event, ErasureRequested):
                    write_receipt(conn, event.request_id, store, self.id, position, removed(event))
                save_position(conn, self.id, position)


SHREDDING_EVENTS = (ErasureRequested, ConsentRevoked, RetentionExpired, MemoryRedacted)
"""Events after which a projection's old row versions hold text that must go."""


class TransactionalProjection(PositionedProjection):
    """A projection whose store is Postgres: rows and position commit together.
    ``vacuum_tables`` are vacuumed after a batch that removed text (``SHREDDING_EVENTS``),
    so the old row versions do not keep it in the table files."""

    vacuum_tables: tuple[str, ...] = ()

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]]) -> None:
        """Apply events in log order, rows and positions in one transaction."""
        apply_in_transaction(self._pool, self.id, items, self._apply_one)
        if self.vacuum_tables and any(isinstance(e, SHREDDING_EVENTS) for e, _ in items):
            vacuum(self._pool, self.vacuum_tables)

    def _apply_one(self, conn: psycopg.Connection, event: Event, position: LogPosition) -> None:
        raise NotImplementedError


def install(conn: psycopg.Connection) -> None:
    """Create the shared tables (positions, receipts) if missing."""
    ensure_schema(conn, "erasure_receipts", SCHEMA_SQL)


def load_positions(conn: psycopg.Connection, projection: str) -> dict[int, int]:
    rows = conn.execute(
        'SELECT partition, "offset" FROM projection_positions WHERE projection = %s', (projection,)
    ).fetchall()
    return {int(p): int(o) for p, o in rows}


def save_position(conn: psycopg.Connection, projection: str, position: LogPosition) -> None:
    """Record ``position`` as applied (never moves a position backwards)."""
    conn.execute(
        """
        INSERT INTO projection_positions (projection, partition, "offset") VALUES (%s, %s, %s)
        ON CONFLICT (projection, partition) DO UPDATE
           SET "offset" = GREATEST(projection_positions."offset", EXCLUDED."offset"), updated_at = now()
        """,
        (projection, position.partition, position.offset),
    )


def apply_in_transaction(
    pool: ConnectionPool,
    projection: str,
    items: Sequence[tuple[Event, LogPosition]],
    apply_one: Callable[[psycopg.Connection, Event, LogPosition], None],
) -> None:
    """Apply a batch of events and advance the positions in ONE transaction.

    The positions of the batch's partitions are locked first; an event at or before its
    partition's position is already done and skipped. Either every new event of the
    batch and its position commit together, or nothing does.
    """
    if not items:
        return
    with pool.connection() as conn, conn.transaction():
        partitions = sorted({p.partition for _, p in items})
        conn.execute(
            'INSERT INTO projection_positions (projection, partition, "offset")'
            " SELECT %s, p, -1 FROM unnest(%s::int[]) AS p ON CONFLICT DO NOTHING",
            (projection, partitions),
        )
        rows = conn.execute(
            'SELECT partition, "offset" FROM projection_positions WHERE projection = %s AND partition = ANY(%s)'
            " ORDER BY partition FOR UPDATE",
            (projection, partitions),
        ).fetchall()
        done = {int(p): int(o) for p, o in rows}
        for event, position in items:
            if position.offset <= done.get(position.partition, -1):
                continue
            apply_one(conn, event, position)
            done[position.partition] = position.offset
        for partition, offset in done.items():
            save_position(conn, projection, LogPosition(partition, offset))


def clear_positions(conn: psycopg.Connection, projection: str) -> None:
    """Forget the projection's positions (for a rebuild). Erasure receipts are kept: they
    record when each erasure was first applied, and a rebuild cannot bring the data back."""
    conn.execute("DELETE FROM projection_positions WHERE projection = %s", (projection,))


def write_receipt(
    conn: psycopg.Connection, request_id: str, store: str, projection: str, position: LogPosition, items: int
) -> None:
    """Record that ``store`` applied erasure ``request_id``; the first receipt wins."""
    conn.execute(
        """
        INSERT INTO erasure_receipts (request_id, store, projection, log_partition, log_offset, items_removed)
        VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
        """,
        (request_id, store, projection, position.partition, position.offset, items),
    )


WRITE_EVENTS = (MemoryWritten, SummaryDerived, MemoryRedacted, MemoryReinforced, MemoryReinstated)
"""Events that put a memory (or its text) into a store. Before applying one, a projection
asks ``ContentAccess.erased_among`` and applies nothing of a tombstoned memory, live and
in a replay, even if its data key could still be read."""


@dataclass
class ContentAccess:
    """Opens sealed memory text for projections, honouring erasure: text whose memory is
    tombstoned or whose data key was destroyed is never returned.

    A memory is tombstoned when the ``tombstones`` table names it, or, in the distributed
    mode, the set loaded from the compacted tombstone topic (``topic_tombstones``) does:
    the topic still names it after Postgres was restored from a backup older than the
    erasure."""

    pool: ConnectionPool
    keyring: Keyring
    topic_tombstones: TombstoneSet | None = None
    missing_key_wait_s: float = 10.0
    recent_event_s: float = 300.0

    def open(
        self,
        memory_id: str,
        sealed: SealedText,
        conn: psycopg.Connection | None = None,
        occurred_at: datetime | None = None,
    ) -> str | None:
        """The clear text, or ``None`` if the memory is erased (tombstone or key gone).
        ``occurred_at`` (UTC) is the event's: see ``_await_key``."""
        with self._conn(conn) as c:
            if self.erased_among([memory_id], c):
                log.info("memory %s: content skipped: erased (tombstone)", memory_id)
                return None
            return self._open(c, memory_id, sealed, occurred_at)

    def open_many(self, items: Sequence[tuple[str, SealedText, datetime | None]]) -> list[str | None]:
        """``open`` for several (memory_id, sealed, occurred_at) on one connection, in order."""
        if not items:
            return []
        with self.pool.connection() as c:
            gone = self.erased_among([m for m, _, _ in items], c)
            for m in sorted(gone):
                log.info("memory %s: content skipped: erased (tombstone)", m)
            return [None if m in gone else self._open(c, m, sealed, at) for m, sealed, at in items]

    def _open(
        self, conn: psycopg.Connection, memory_id: str, sealed: SealedText, occurred_at: datetime | None
    ) -> str | None:
        try:
            text = self.keyring.open(conn, sealed)
            if text is not None:
                return text
            # one answer to "does the key row exist?" decides: the ledger's transaction may
            # commit the key at any moment (a worker consumes an event within milliseconds
            # of its append), so the answer is not asked twice
            if self.keyring.key_exists(conn, sealed.key_id):
                text = self.keyring.open(conn, sealed)  # it may have committed since the first read
                if text is None:
                    log.info(
                        "memory %s: content skipped: data key %s was destroyed"
                        " (erasure, revocation, expiry or redaction)",
                        memory_id,
                        sealed.key_id,
                    )
            elif occurred_at is None or (utc_now() - occurred_at).total_seconds() < self.recent_event_s:
                text = self._await_key(conn, memory_id, sealed)
            else:
                log.warning(
                    "memory %s: content skipped: data key %s does not exist (the key store was restored from"
                    " a backup older than the event?)",
                    memory_id,
                    sealed.key_id,
                )
            return text
        except CorruptContentError as exc:
            log.error("memory %s: content skipped: %s", memory_id, exc)
            return None

    def _await_key(self, conn: psycopg.Connection, memory_id: str, sealed: SealedText) -> str | None:
        """The ledger appends an event inside the transaction that creates its data key,
        so a fast projection can read the event a moment before the key row commits. A
        key row that is missing (not destroyed) for an event that occurred less than
        ``recent_event_s`` seconds ago is waited for, up to ``missing_key_wait_s`` seconds
        (an older event's key will never come: a key store restored from an old backup);
        if it never appears (the ledger's transaction failed after the append), the text
        is unreadable and the projection goes on without it."""
        deadline = time.monotonic() + self.missing_key_wait_s
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if self.keyring.key_exists(conn, sealed.key_id):
                return self.keyring.open(conn, sealed)
        log.error("memory %s: data key %s never appeared; content skipped", memory_id, sealed.key_id)
        return None

    def personal(self, memory_id: str, sealed: SealedText | None, conn: psycopg.Connection) -> PersonalFields | None:
        """The personal fields (``contracts.PersonalFields``) sealed under the memory's data
        key, or ``None`` when the event carries none, the key is destroyed, or they do not
        authenticate or parse (logged). Call it after the memory's text passed ``open``
        (which checks tombstones and waits for a key not yet committed)."""
        if sealed is None:
            return None
        try:
            plain = self.keyring.open(conn, sealed, PERSONAL_CONTEXT)
            return None if plain is None else PersonalFields.model_validate_json(plain)
        except (CorruptContentError, ValidationError) as exc:
            log.error("memory %s: personal fields skipped: %s", memory_id, exc)
            return None

    def is_tombstoned(self, memory_id: str, conn: psycopg.Connection) -> bool:
        """True when the memory was erased (by either registry)."""
        return bool(self.erased_among([memory_id], conn))

    def erased_among(self, memory_ids: Sequence[str], conn: psycopg.Connection | None = None) -> set[str]:
        """Which of ``memory_ids`` are tombstoned, by the table or the topic.

        Raises:
            psycopg.Error, EventLogError: a registry cannot be read (the caller's batch
                fails and is retried: a write is never applied unchecked).
        """
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return set()
        with self._conn(conn) as c:
            gone = {str(r[0]) for r in c.execute("SELECT memory_id FROM tombstones WHERE memory_id = ANY(%s)", (ids,))}
        if self.topic_tombstones is not None:
            gone |= self.topic_tombstones.erased_among(ids)
        return gone

    @contextmanager
    def _conn(self, conn: psycopg.Connection | None) -> Iterator[psycopg.Connection]:
        if conn is not None:
            yield conn
        else:
            with self.pool.connection() as c:
                yield c


def epoch_s(moment: datetime | None) -> float | None:
    """Seconds since the Unix epoch (UTC) of an aware datetime, or ``None``."""
    return None if moment is None else moment.timestamp()
