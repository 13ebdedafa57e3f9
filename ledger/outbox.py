"""The transactional outbox: how a command's events reach a log outside the ledger's
PostgreSQL (Kafka) without a dual write.

A command writes its events (and, for an erasure, its tombstone records) as rows of
``ledger_outbox`` in its own transaction, together with the heads, keys and requests
that decided them: they commit together or not at all. Before committing, the command
takes a session-level advisory lock per subject it touched (``lock_subjects``); after
the commit it publishes every pending row of those subjects in ``seq`` order (its own and
any that an earlier crash left behind), waits for the log's acknowledgements, deletes the
rows and releases the locks. ``OutboxRelay`` does the same for rows whose command could
not publish them (the log refused, the process died): at start and then every
``interval_s`` seconds, for every subject whose lock it can take.

Order: one publisher per subject at a time (the lock), rows in commit order per subject
(a command that changes a memory locks its head, so a later command on that memory
inserts its rows after the earlier one committed), tombstones acknowledged before the
events of the same pass (an ``ErasureRequested`` is never readable before its
tombstones). The producer is idempotent, so a retried send within one producer session
is not duplicated.

Duplicates: a publisher that dies after the log acknowledged and before it deleted the
rows leaves them pending, and the next publisher of those subjects sends them again,
right after themselves (before any later row of the same subjects). So a crash
duplicates at most one publishing pass (``BATCH_ROWS`` rows at most), adjacent in the
log; every projection is idempotent and revision-guarded (DESIGN.md, invariant 2), so a
duplicate changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg_pool import ConnectionPool

from contracts import ErasureRequested, Event
from ledger import write_behind
from ledger.errors import EventLogError
from ledger.eventlog import EventLog, LogPosition
from ledger.pgschema import ensure_schema
from ledger.tombstone_log import Tombstone, TombstoneLog

log = logging.getLogger(__name__)

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS ledger_outbox (
    seq         bigserial PRIMARY KEY,
    command_id  text NOT NULL,
    ordinal     integer NOT NULL,
    subject_id  text NOT NULL,
    stream      text NOT NULL CHECK (stream IN ('events', 'tombstones')),
    key         text NOT NULL,
    value       bytea NOT NULL,
    request_id  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_outbox_subject ON ledger_outbox (subject_id, seq);
"""

_LOCK_CLASS = 0x6F757462
"""First key of the outbox's advisory locks ("outb"); the second is ``hashtext(subject_id)``."""

BATCH_ROWS = 5_000
"""Rows one publishing pass sends at most."""

_COLUMNS = ("command_id", "ordinal", "subject_id", "stream", "key", "value", "request_id")


def install(conn: psycopg.Connection) -> None:
    """Create ``ledger_outbox`` if missing."""
    ensure_schema(conn, "ledger_outbox", SCHEMA_SQL)


def stage(
    conn: psycopg.Connection,
    command_id: str,
    events: Sequence[tuple[Event, bytes]],
    tombstones: Sequence[Tombstone],
) -> None:
    """Write a command's rows in its transaction: its tombstone records first, then its
    events (with their encoded bytes) in log order. Held back and sent with the command's
    other inserts (``ledger.write_behind``)."""
    ordinal = 0
    for t in tombstones:
        write_behind.insert(
            conn,
            "ledger_outbox",
            _COLUMNS,
            (command_id, ordinal, t.subject_id, "tombstones", t.memory_id, t.encode(), None),
        )
        ordinal += 1
    for event, value in events:
        request_id = event.request_id if isinstance(event, ErasureRequested) else None
        write_behind.insert(
            conn,
            "ledger_outbox",
            _COLUMNS,
            (command_id, ordinal, event.subject_id, "events", event.subject_id, value, request_id),
        )
        ordinal += 1


def lock_subjects(conn: psycopg.Connection, subject_ids: Iterable[str]) -> None:
    """Take the outbox lock of every subject (session-level: held after the commit, until
    ``unlock_all``), in one order, so two publishers never interleave a subject's rows."""
    conn.execute(
        "SELECT pg_advisory_lock(%s, h) FROM (SELECT DISTINCT hashtext(s) AS h FROM unnest(%s::text[]) AS s"
        " ORDER BY h) AS q",
        (_LOCK_CLASS, sorted(set(subject_ids))),
    )


def unlock_all(conn: psycopg.Connection) -> None:
    """Release every outbox lock the session holds (best effort: a lost connection has
    released them already)."""
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.execute("SELECT pg_advisory_unlock_all()")
        conn.commit()
    except psycopg.Error as exc:
        log.debug("releasing outbox locks: %s", exc)


@dataclass(frozen=True)
class _Row:
    seq: int
    command_id: str
    ordinal: int
    stream: str
    key: str
    value: bytes
    request_id: str | None


@dataclass(frozen=True)
class Backlog:
    """What the outbox holds: ``records`` (event and tombstone rows) of ``subjects``
    subjects not yet acknowledged by the log, the oldest committed at ``oldest_at``
    (UTC; ``None`` when empty). A backlog that does not shrink is a log refusing a
    record (the relay logs why): the subject's later records wait behind it."""

    records: int
    subjects: int
    oldest_at: datetime | None

    def to_dict(self, now: datetime) -> dict[str, object]:
        """``{"records", "subjects", "oldest_at" (ISO 8601), "oldest_age_s"}`` at ``now``."""
        age = None if self.oldest_at is None else max(0.0, (now - self.oldest_at).total_seconds())
        at = None if self.oldest_at is None else self.oldest_at.isoformat()
        return {"records": self.records, "subjects": self.subjects, "oldest_at": at, "oldest_age_s": age}


def backlog(conn: psycopg.Connection) -> Backlog:
    """The outbox's backlog now (empty when the ledger has no outbox table: the embedded
    default's log is in PostgreSQL itself)."""
    row = conn.execute("SELECT to_regclass('ledger_outbox') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return Backlog(0, 0, None)
    found = conn.execute("SELECT count(*), count(DISTINCT subject_id), min(created_at) FROM ledger_outbox").fetchone()
    assert found is not None
    return Backlog(int(found[0]), int(found[1]), found[2])


class OutboxRelay:
    """Publishes outbox rows to ``log`` (events) and ``tombstone_log`` (tombstone records)
    and deletes them once acknowledged. ``interval_s``: seconds between the passes of the
    background thread that ``start`` runs (``None``: no thread; ``drain`` by hand)."""

    def __init__(
        self,
        pool: ConnectionPool,
        log: EventLog,
        tombstone_log: TombstoneLog | None = None,
        interval_s: float | None = 1.0,
    ) -> None:
        self._pool = pool
        self._log = log
        self._tombstone_log = tombstone_log
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publish_locked(
        self, conn: psycopg.Connection, subject_ids: Sequence[str]
    ) -> dict[tuple[str, int], LogPosition]:
        """Publish every pending row of ``subject_ids`` (the caller holds their locks), in
        ``seq`` order, tombstones first; then record the erasures' log positions and delete
        the rows, in one transaction. Returns the position of each event row by (command
        id, ordinal).

        Raises:
            EventLogError: a log did not acknowledge; the rows stay pending.
            psycopg.Error: the rows could not be read or deleted (after an acknowledged
                send: they are sent again by the next publisher).
        """
        published: dict[tuple[str, int], LogPosition] = {}
        while True:
            rows = [
                _Row(int(seq), cid, int(o), stream, key, bytes(value), rid)
                for seq, cid, o, stream, key, value, rid in conn.execute(
                    "SELECT seq, command_id, ordinal, stream, key, value, request_id FROM ledger_outbox"
                    " WHERE subject_id = ANY(%s) ORDER BY seq LIMIT %s",
                    (list(subject_ids), BATCH_ROWS),
                )
            ]
            conn.commit()
            if not rows:
                return published
            published |= self._send(conn, rows)
            if len(rows) < BATCH_ROWS or conn.broken:
                return published

    def _send(self, conn: psycopg.Connection, rows: Sequence[_Row]) -> dict[tuple[str, int], LogPosition]:
        tombstones = [Tombstone.decode(r.key, r.value) for r in rows if r.stream == "tombstones"]
        events = [r for r in rows if r.stream == "events"]
        if tombstones:
            if self._tombstone_log is None:
                raise EventLogError("the outbox holds tombstone records but this ledger has no tombstone topic")
            self._tombstone_log.publish(tombstones)
        positions = self._log.append_batch([(r.key, r.value) for r in events]) if events else []
        erasures = [(r.request_id, p) for r, p in zip(events, positions, strict=True) if r.request_id is not None]
        try:
            with conn.transaction():
                if erasures:
                    conn.execute(
                        "UPDATE erasure_requests r SET log_partition = e.p, log_offset = e.o"
                        " FROM unnest(%s::text[], %s::int[], %s::bigint[]) AS e(id, p, o)"
                        " WHERE r.request_id = e.id AND r.log_partition IS NULL",
                        ([i for i, _ in erasures], [p.partition for _, p in erasures], [p.offset for _, p in erasures]),
                    )
                conn.execute("DELETE FROM ledger_outbox WHERE seq = ANY(%s)", ([r.seq for r in rows],))
        except psycopg.Error as exc:  # the log has them: the next publisher sends them again (a bounded duplicate)
            log.warning("outbox: %d row(s) published but not deleted (%s): they will be sent again", len(rows), exc)
        return {(r.command_id, r.ordinal): p for r, p in zip(events, positions, strict=True)}

    def drain(self) -> int:
        """One pass over every subject with pending rows whose lock is free (a command
        still publishing its own holds it): publish, acknowledge, delete. Returns the
        rows published.

        Raises:
            EventLogError, psycopg.Error: as ``publish_locked``; what was not
                acknowledged stays pending for the next pass.
        """
        done = 0
        with self._pool.connection() as conn:
            try:
                subjects = [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT s FROM (SELECT DISTINCT subject_id AS s FROM ledger_outbox) AS q"
                        " WHERE pg_try_advisory_lock(%s, hashtext(s))",
                        (_LOCK_CLASS,),
                    )
                ]
                conn.commit()
                if subjects:
                    done = len(self.publish_locked(conn, subjects))
            finally:
                unlock_all(conn)
        if done:
            log.warning("outbox relay: published %d event(s) a command had left pending", done)
        return done

    def pending(self) -> int:
        """Rows waiting in the outbox."""
        with self._pool.connection() as conn:
            row = conn.execute("SELECT count(*) FROM ledger_outbox").fetchone()
        return int(row[0]) if row else 0

    def drain_logged(self) -> None:
        """``drain``, logging a failure instead of raising it (the next pass tries again)."""
        try:
            self.drain()
        except (EventLogError, psycopg.Error) as exc:
            log.warning("outbox relay: pending events not published yet, trying again: %s", exc)

    def start(self) -> None:
        """Publish what a crash left behind, then keep doing so every ``interval_s``
        seconds in a daemon thread, until ``close``."""
        self.drain_logged()
        if self._interval_s is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="memledger-outbox-relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._interval_s is not None
        while not self._stop.wait(self._interval_s):
            if self._pool.closed:
                return
            self.drain_logged()

    def close(self) -> None:
        """Stop the background thread (waits for the pass in progress)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
