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
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from ledger.crypto import DataKeys, Keyring
from ledger.errors import CorruptContentError
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema, vacuum
from projections import marks
from projections.opening import Opened, OpenedContent, SealedItem, sealed_events, sealed_item
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

    opens_content: bool = False
    """Whether the projection reads memory text: its ``apply_batch`` then takes the batch's
    content opened once for every projection of a pass (``OpenedContent``)."""

    _content: ContentAccess | None = None
    """How a projection that reads text opens it (set by those that do)."""

    def open_ahead(self, items: Sequence[tuple[Event, LogPosition]], content: ContentAccess) -> OpenedContent:
        """The content of ``items``, opened before the batch's store transaction begins,
        on a connection of its own: the transaction then holds no lock on the key store
        (``memory_keys``), so the ``VACUUM FULL`` that follows an erasure is not kept
        waiting by a worker that is always inside a batch."""
        return content.open_events([e for e, _ in items])

    def apply(self, event: Event, position: LogPosition) -> None:
        self.apply_batch([(event, position)])

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]], opened: OpenedContent | None = None) -> None:
        """Apply events in log order and store the positions (see the subclass)."""
        raise NotImplementedError

    def pending(self, items: Sequence[tuple[Event, LogPosition]]) -> list[tuple[Event, LogPosition]]:
        """The items after the stored positions (not applied yet)."""
        done = self.positions()
        return [(e, p) for e, p in items if done.get(p.partition, -1) < p.offset]

    def commit_positions(
        self,
        applied: Sequence[tuple[Event, LogPosition]],
        store: str,
        removed: Callable[[ErasureRequested], int],
        advanced: Mapping[str, marks.Mark] | None = None,
    ) -> None:
        """After the store's own writes: receipts for erasures (``removed`` counts the
        items each one removed), the revision marks the writes ``advanced`` and the
        positions (once per partition), in one transaction."""
        last: dict[int, int] = {}
        for _, position in applied:
            last[position.partition] = max(last.get(position.partition, -1), position.offset)
        with self._pool.connection() as conn, conn.transaction():
            marks.save_marks(conn, self.id, advanced or {})
            for event, position in applied:
                if isinstance(event, ErasureRequested):
                    write_receipt(conn, event.request_id, store, self.id, position, removed(event))
            for partition, offset in sorted(last.items()):
                save_position(conn, self.id, LogPosition(partition, offset))


SHREDDING_EVENTS = (ErasureRequested, ConsentRevoked, RetentionExpired, MemoryRedacted)
"""Events after which a projection's old row versions hold text that must go."""


class TransactionalProjection(PositionedProjection):
    """A projection whose store is Postgres: rows, revision marks and position commit
    together. ``vacuum_tables`` are vacuumed after a batch that removed text
    (``SHREDDING_EVENTS``), so the old row versions do not keep it in the table files.

    Revision-guarded (``projections.marks``): a subclass's ``_apply_events`` reads the
    marks of the batch's memories once, applies each event to the memories it is newer
    for (``MarkBook.plan``: an event newer for none is skipped, an erasure never) and
    saves the advanced marks in the same transaction (facts: its history rows are its
    marks)."""

    vacuum_tables: tuple[str, ...] = ()

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]], opened: OpenedContent | None = None) -> None:
        """Apply events in log order, rows and positions in one transaction (the
        statements of the whole batch in one pipeline: ``_apply_events``). ``opened``:
        the batch's content, when a pass opened it for every projection."""

        if opened is None and self.opens_content and self._content is not None:
            opened = self.open_ahead(items, self._content)

        def apply_all(conn: psycopg.Connection, todo: list[tuple[Event, LogPosition]]) -> None:
            self._apply_events(conn, todo, opened)

        apply_batch_in_transaction(self._pool, self.id, items, apply_all)
        if self.vacuum_tables and any(isinstance(e, SHREDDING_EVENTS) for e, _ in items):
            vacuum(self._pool, self.vacuum_tables)

    def _apply_events(
        self, conn: psycopg.Connection, todo: list[tuple[Event, LogPosition]], opened: OpenedContent | None
    ) -> None:
        """Apply ``todo`` (the batch's events after the positions, in log order) on
        ``conn``, inside the batch's transaction."""
        raise NotImplementedError


def install(conn: psycopg.Connection) -> None:
    """Create the shared tables (positions, receipts, revision marks) if missing."""
    ensure_schema(conn, "erasure_receipts", SCHEMA_SQL)
    ensure_schema(conn, "revision_marks", marks.SCHEMA_SQL)


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


def apply_batch_in_transaction(
    pool: ConnectionPool,
    projection: str,
    items: Sequence[tuple[Event, LogPosition]],
    apply_all: Callable[[psycopg.Connection, list[tuple[Event, LogPosition]]], None],
) -> None:
    """Apply a batch of events and advance the positions in ONE transaction.

    The positions of the batch's partitions are locked first; an event at or before its
    partition's position is already done and left out of what ``apply_all`` gets (the
    rest, in log order). Either every new event of the batch and its position commit
    together, or nothing does.
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
        todo: list[tuple[Event, LogPosition]] = []
        for event, position in items:
            if position.offset <= done.get(position.partition, -1):
                continue
            todo.append((event, position))
            done[position.partition] = position.offset
        if todo:
            apply_all(conn, todo)
        for partition, offset in done.items():
            save_position(conn, projection, LogPosition(partition, offset))


def clear_positions(conn: psycopg.Connection, projection: str) -> None:
    """Forget the projection's positions and revision marks (``projections.marks``), for a
    rebuild from offset 0 or a retirement: the storage they describe is being emptied.
    Erasure receipts are kept: they record when each erasure was first applied, and a
    rebuild cannot bring the data back."""
    conn.execute("DELETE FROM projection_positions WHERE projection = %s", (projection,))
    marks.clear_marks(conn, projection)


RECEIPT_SQL = (
    "INSERT INTO erasure_receipts (request_id, store, projection, log_partition, log_offset, items_removed)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
"""One erasure receipt: (request_id, store, projection, log partition, log offset, items
removed); the first receipt of a (request, store, projection) wins."""


def write_receipt(
    conn: psycopg.Connection, request_id: str, store: str, projection: str, position: LogPosition, items: int
) -> None:
    """Record that ``store`` applied erasure ``request_id``; the first receipt wins."""
    conn.execute(RECEIPT_SQL, (request_id, store, projection, position.partition, position.offset, items))


def whole_subject_erasures(
    conn: psycopg.Connection, store: str, projection: str, items: Sequence[tuple[Event, LogPosition]]
) -> set[LogPosition]:
    """The positions, among ``items``, at which a whole-subject erasure
    (``request_kind`` ``subject``) is applied by ``store`` of ``projection`` for the first
    time: its request has no receipt there yet, or its receipt was written at this very
    position (a rebuild reads the same log), and it is the first copy of the request in
    ``items``. Applied there, it removes every item of its subject the store holds at
    that point of the log, whether or not the ledger's heads knew the memory; a copy at a
    later offset removes only the memories it names, so what the subject wrote after the
    erasure stays (a duplicate changes nothing, invariant 2). One query, only when
    ``items`` hold such an erasure.

    Raises:
        psycopg.Error: the receipts cannot be read (the caller's batch fails and is retried).
    """
    first: dict[str, LogPosition] = {}
    for event, position in items:
        if isinstance(event, ErasureRequested) and event.request_kind == "subject":
            first.setdefault(event.request_id, position)
    if not first:
        return set()
    rows = conn.execute(
        "SELECT request_id, log_partition, log_offset FROM erasure_receipts"
        " WHERE store = %s AND projection = %s AND request_id = ANY(%s)",
        (store, projection, list(first)),
    ).fetchall()
    receipts = {str(r): LogPosition(int(p), int(o)) for r, p, o in rows}
    return {at for request, at in first.items() if receipts.get(request, at) == at}


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
        """The clear text, or ``None`` if the memory is erased (tombstone or key gone):
        :meth:`open_items` of one item. ``occurred_at`` (UTC) is the event's: a key not
        committed yet is waited for only for a recent event."""
        item = SealedItem("", memory_id, sealed, None, occurred_at)
        return self.open_items([item], conn).get("").text

    def open_events(self, events: Sequence[Event], conn: psycopg.Connection | None = None) -> OpenedContent:
        """Open the text and personal fields of every write-type event of a batch
        (``opening.SEALED_EVENTS``; other events are ignored): :meth:`open_items` of
        their ``sealed_item``, by event id.

        Raises:
            psycopg.Error, EventLogError, KeyStoreError: as :meth:`open_items`.
        """
        return self.open_items([sealed_item(e) for e in sealed_events(events)], conn)

    def open_items(self, items: Sequence[SealedItem], conn: psycopg.Connection | None = None) -> OpenedContent:
        """Open many sealed texts and their personal fields with one tombstone query and
        one data key query for all of them, instead of a round trip per item. Each
        item's result (by ``ref``): its text and personal fields, or nothing of a
        tombstoned memory (nor of a summary whose source is tombstoned: the
        result's ``erased`` names the tombstoned memories), nothing under a destroyed key;
        a key that has no row yet, of an item whose event occurred less than
        ``recent_event_s`` seconds ago, is waited for up to ``missing_key_wait_s`` seconds
        (all of them together).

        Raises:
            psycopg.Error, EventLogError: a registry or the key store cannot be read (the
                caller's batch fails and is retried).
            KeyStoreError: a data key does not open under the master key.
        """
        if not items:
            return OpenedContent()
        with self._conn(conn) as c:
            erased = self.erased_among([m for i in items for m in (i.memory_id, *i.sources)], c)
            readable = [i for i in items if i.memory_id not in erased and erased.isdisjoint(i.sources)]
            # one answer per key decides: a destroyed key has a row without its key, a key
            # not committed yet has no row (asked again, a key the ledger committed since
            # the first read would pass for destroyed)
            keys = dict(self.keyring.load_keys(c, [k.key_id for i in readable for k in i.sealed]))
            now = utc_now()
            recent = {
                i.ref
                for i in readable
                if i.occurred_at is None or (now - i.occurred_at).total_seconds() < self.recent_event_s
            }
            awaited = {k.key_id: i.memory_id for i in readable if i.ref in recent for k in i.sealed}
            missing = {k: m for k, m in awaited.items() if k not in keys}
            if missing:
                keys.update(self._await_keys(c, missing))
        out: dict[str, Opened] = {}
        for i in items:
            if i.memory_id in erased or not erased.isdisjoint(i.sources):
                log.info("memory %s: content skipped: erased (tombstone)", i.memory_id)
                out[i.ref] = Opened(None)
                continue
            text = self._decrypt(keys, i.memory_id, i.text, i.ref in recent)
            fields = None if text is None else self._decrypt_personal(keys, i.memory_id, i.personal)
            out[i.ref] = Opened(text, fields)
        return OpenedContent(out, frozenset(erased))

    def _await_keys(self, conn: psycopg.Connection, missing: dict[str, str]) -> dict[str, bytes | None]:
        """The ledger appends an event inside the transaction that creates its data key,
        so a fast projection can read the event a moment before the key row commits. The
        keys ``missing`` (key id -> memory id: no row, for events that occurred less than
        ``recent_event_s`` seconds ago) are polled for together until each has a row or
        ``missing_key_wait_s`` seconds pass (an older event's key will never come: a key
        store restored from an old backup); returns the keys that appeared. A key that
        never does (the ledger's transaction failed after the append) is logged, and its
        text is unreadable: the projection goes on without it."""
        found: dict[str, bytes | None] = {}
        deadline = time.monotonic() + self.missing_key_wait_s
        while len(found) < len(missing) and time.monotonic() < deadline:
            time.sleep(0.02)
            found.update(self.keyring.load_keys(conn, [k for k in missing if k not in found]))
        for key_id, memory_id in missing.items():
            if key_id not in found:
                log.error("memory %s: data key %s never appeared; content skipped", memory_id, key_id)
        return found

    def _decrypt(self, keys: DataKeys, memory_id: str, sealed: SealedText, recent: bool) -> str | None:
        """The text under ``keys``; when it is not there, the log says why (destroyed, or
        missing from a key store older than the event)."""
        try:
            text = self.keyring.open_with(keys, sealed)
        except CorruptContentError as exc:
            log.error("memory %s: content skipped: %s", memory_id, exc)
            return None
        if text is None and sealed.key_id not in keys:
            if recent:
                pass  # waited for in _await_keys, which logged it
            else:
                log.warning(
                    "memory %s: content skipped: data key %s does not exist (the key store was restored from"
                    " a backup older than the event?)",
                    memory_id,
                    sealed.key_id,
                )
        elif text is None:
            log.info(
                "memory %s: content skipped: data key %s was destroyed (erasure, revocation, expiry or redaction)",
                memory_id,
                sealed.key_id,
            )
        return text

    def _decrypt_personal(self, keys: DataKeys, memory_id: str, sealed: SealedText | None) -> PersonalFields | None:
        if sealed is None:
            return None
        try:
            plain = self.keyring.open_with(keys, sealed, PERSONAL_CONTEXT)
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
