"""How a command's events reach the log: one truth for each command, no dual write.

Two ways, chosen by ``sink_for`` from the log the ledger was given:

- ``InTransactionSink``: the log is a table of the ledger's own PostgreSQL (the embedded
  ``PostgresEventLog``): the events are appended in the command's transaction, so the
  heads, keys, requests and the log commit together or not at all.
- ``OutboxSink``: any other log (Kafka, the in-memory log): the events are rows of the
  outbox in the command's transaction (``ledger.outbox``), published after the commit
  under the subjects' locks, and by the relay if the command could not.

Both write the command's commit marker (``ledger.commits``) in the transaction, which
answers whether a commit cut short by a lost connection took place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import psycopg
from psycopg_pool import ConnectionPool

from contracts import ErasureRequested, Event
from ledger import commits, outbox, write_behind
from ledger.errors import EventLogError
from ledger.eventlog import EventLog, LogPosition
from ledger.tombstone_log import Tombstone, TombstoneLog

log = logging.getLogger(__name__)


@runtime_checkable
class TransactionalEventLog(Protocol):
    """An ``EventLog`` that can append inside a caller's PostgreSQL transaction."""

    def shares(self, pool: ConnectionPool) -> bool:
        """Whether the log lives in the database ``pool`` connects to."""
        ...

    def append_in(self, conn: psycopg.Connection, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        """Append (key, value) records in ``conn``'s open transaction; visible at its commit."""
        ...


@dataclass(frozen=True)
class Staged:
    """A command staged in its transaction: its id, the subjects it touched, and its
    events' positions when they are known before the commit (in-transaction append);
    ``types``: its events' types, in order."""

    command_id: str
    subject_ids: tuple[str, ...]
    events: int
    positions: tuple[LogPosition, ...] | None
    types: tuple[str, ...] = ()


class CommandSink(Protocol):
    """Where a command's events go, in two steps around its commit."""

    def stage(
        self,
        conn: psycopg.Connection,
        command_id: str,
        command: str,
        events: Sequence[Event],
        encoded: Sequence[bytes],
        tombstones: Sequence[Tombstone],
    ) -> Staged:
        """In the command's transaction, last: record the events (and tombstones) and the
        commit marker; sends every insert the command held back. Raises psycopg errors."""
        ...

    def settle(self, conn: psycopg.Connection, staged: Staged) -> list[LogPosition]:
        """After the commit, on the same connection: the events' positions, in order.

        Raises:
            EventLogError: the log did not acknowledge (the events are recorded and wait
                for the relay).
        """
        ...

    def abandon(self, conn: psycopg.Connection) -> None:
        """After a failure: release what ``stage`` took (locks). Never raises."""
        ...

    def recover(self, staged: Staged) -> list[LogPosition] | None:
        """After the commit was confirmed on a new connection (the first was lost): the
        positions if the events could be published now, else ``None``. Never raises."""
        ...

    def close(self) -> None: ...


Observer = Callable[[Sequence[str]], None]
"""Called with the types of events the log has just made durable (e.g. to count them)."""


class InTransactionSink:
    """Appends to a ``TransactionalEventLog`` inside the command's transaction;
    ``observe`` hears of the events once their transaction committed."""

    def __init__(self, log: TransactionalEventLog, observe: Observer | None = None) -> None:
        self._log = log
        self._observe = observe

    def stage(
        self,
        conn: psycopg.Connection,
        command_id: str,
        command: str,
        events: Sequence[Event],
        encoded: Sequence[bytes],
        tombstones: Sequence[Tombstone],
    ) -> Staged:
        commits.record(conn, command_id, command, len(events))
        write_behind.barrier(conn)
        positions = self._log.append_in(conn, [(e.subject_id, v) for e, v in zip(events, encoded, strict=True)])
        for event, position in zip(events, positions, strict=True):
            if isinstance(event, ErasureRequested):
                conn.execute(
                    "UPDATE erasure_requests SET log_partition = %s, log_offset = %s WHERE request_id = %s",
                    (position.partition, position.offset, event.request_id),
                )
        subjects = tuple(sorted({e.subject_id for e in events}))
        return Staged(command_id, subjects, len(events), tuple(positions), tuple(e.type for e in events))

    def settle(self, conn: psycopg.Connection, staged: Staged) -> list[LogPosition]:
        assert staged.positions is not None
        self._observed(staged)
        return list(staged.positions)

    def abandon(self, conn: psycopg.Connection) -> None:
        return None

    def recover(self, staged: Staged) -> list[LogPosition] | None:
        if staged.positions is None:
            return None
        self._observed(staged)
        return list(staged.positions)

    def _observed(self, staged: Staged) -> None:
        if self._observe is not None:
            try:
                self._observe(staged.types)
            except Exception:  # an observer's failure never fails a committed command
                log.exception("the observer of appended events failed")

    def close(self) -> None:
        return None


class OutboxSink:
    """Stages events in the outbox and publishes them after the commit (``ledger.outbox``)."""

    def __init__(self, pool: ConnectionPool, relay: outbox.OutboxRelay) -> None:
        self._pool = pool
        self.relay = relay

    def stage(
        self,
        conn: psycopg.Connection,
        command_id: str,
        command: str,
        events: Sequence[Event],
        encoded: Sequence[bytes],
        tombstones: Sequence[Tombstone],
    ) -> Staged:
        commits.record(conn, command_id, command, len(events))
        outbox.stage(conn, command_id, list(zip(events, encoded, strict=True)), tombstones)
        write_behind.barrier(conn)
        subjects = tuple(sorted({e.subject_id for e in events} | {t.subject_id for t in tombstones}))
        outbox.lock_subjects(conn, subjects)
        return Staged(command_id, subjects, len(events), None)

    def settle(self, conn: psycopg.Connection, staged: Staged) -> list[LogPosition]:
        try:
            published = self.relay.publish_locked(conn, staged.subject_ids)
        finally:
            outbox.unlock_all(conn)
        return self._positions(published, staged)

    @staticmethod
    def _positions(published: dict[tuple[str, int], LogPosition], staged: Staged) -> list[LogPosition]:
        mine = sorted((o, p) for (cid, o), p in published.items() if cid == staged.command_id)
        if len(mine) != staged.events:  # another publisher sent them after this session lost its locks
            raise EventLogError(
                f"command {staged.command_id} was published by the relay: its positions are unknown here"
            )
        return [p for _, p in mine]

    def abandon(self, conn: psycopg.Connection) -> None:
        outbox.unlock_all(conn)

    def recover(self, staged: Staged) -> list[LogPosition] | None:
        try:
            with self._pool.connection() as conn:
                try:
                    outbox.lock_subjects(conn, staged.subject_ids)
                    return self._positions(self.relay.publish_locked(conn, staged.subject_ids), staged)
                finally:
                    outbox.unlock_all(conn)
        except Exception:
            return None

    def close(self) -> None:
        self.relay.close()


def sink_for(
    pool: ConnectionPool,
    log: EventLog,
    tombstone_log: TombstoneLog | None,
    relay_interval_s: float | None,
    observe: Observer | None = None,
) -> CommandSink:
    """The sink for ``log``: in the command's transaction when the log lives in ``pool``'s
    database (``observe`` then hears of each command's events after its commit), the
    outbox otherwise (its relay started: it publishes what a crash left, through ``log``'s
    ``append_batch``, where a wrapper of ``log`` sees them)."""
    if isinstance(log, TransactionalEventLog) and log.shares(pool):
        return InTransactionSink(log, observe)
    relay = outbox.OutboxRelay(pool, log, tombstone_log, relay_interval_s)
    relay.start()
    return OutboxSink(pool, relay)
