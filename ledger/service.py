"""The ``Ledger``: validates commands, authorises the principal, seals content, assigns
ids and revisions, and appends events. A command returns only once the log has its
events (the ``EventLog`` adapter's durability guarantee).

Each command runs in one Postgres transaction over the ledger's own tables
(``ledger.state``, ``ledger.crypto``): heads are locked, the events appended, then the
transaction commits. If the append fails the transaction rolls back and nothing is
written. (If the commit itself fails after a successful append, the log holds an event
the heads do not; projections still apply it. This window is logged, not hidden.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

import psycopg
from psycopg_pool import ConnectionPool
from uuid6 import uuid7

from contracts import (
    VERACITY_CONFIDENCE,
    ConsentRevoked,
    EraseMemories,
    ErasureRequested,
    Event,
    MemoryBody,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemorySuperseded,
    MemoryWrite,
    MemoryWritten,
    RedactMemory,
    RetentionExpired,
    RevokeConsent,
    SummaryDerived,
    encode_event,
    utc_now,
)
from ledger import erasure, state
from ledger.crypto import Keyring
from ledger.errors import InvalidCommandError, UnknownMemoryError
from ledger.eventlog import EventLog, LogPosition
from ledger.principals import Principal

log = logging.getLogger(__name__)


def new_id() -> str:
    """A new UUIDv7 as a string (time-ordered, RFC 9562)."""
    return str(uuid7())


class _EnvelopeFields(TypedDict):
    event_id: str
    occurred_at: datetime
    subject_id: str
    producer: str
    correlation_id: str
    causation_id: str | None


@dataclass(frozen=True)
class CommandResult:
    """What an accepted command produced: its events and where the log put them."""

    events: tuple[Event, ...]
    positions: tuple[LogPosition, ...]
    memory_id: str | None = None
    request_id: str | None = None
    affected: tuple[str, ...] = field(default_factory=tuple)


class Ledger:
    """The write side. ``producer`` is recorded in every envelope; ``clock`` returns UTC now."""

    def __init__(
        self,
        pool: ConnectionPool,
        log: EventLog,
        keyring: Keyring,
        producer: str = "memledger",
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._pool = pool
        self._log = log
        self._keyring = keyring
        self._producer = producer
        self._clock = clock
        with pool.connection() as conn:
            state.install(conn)
            Keyring.install(conn)

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    # -- commands ---------------------------------------------------------------------

    def write(self, principal: Principal, cmd: MemoryWrite, correlation_id: str | None = None) -> CommandResult:
        """Record a new memory (a ``summary`` becomes ``SummaryDerived``).

        Raises:
            NotAuthorisedError: no ``write`` grant for ``cmd.subject_id``.
            InvalidCommandError: ``retention.expires_at`` not in the future, or a
                ``provenance.derived_from`` id unknown for this subject.
            EventLogError: the log did not acknowledge the event; nothing was written.
        """
        return self.write_many(principal, [cmd], correlation_id)[0]

    def write_many(
        self, principal: Principal, cmds: Sequence[MemoryWrite], correlation_id: str | None = None
    ) -> list[CommandResult]:
        """Write several memories in one transaction and one log batch (all or none).
        Raises as ``write``."""
        for cmd in cmds:
            principal.require("write", cmd.subject_id)
        now = self._clock()
        corr = correlation_id or new_id()
        with self._pool.connection() as conn, conn.transaction():
            batch_ids: dict[str, str] = {}
            events: list[Event] = []
            for cmd in cmds:
                memory_id = new_id()
                events.append(self._written(conn, cmd, memory_id, now, corr, batch_ids))
                batch_ids[memory_id] = cmd.subject_id
            positions = self._append(events)
        return [
            CommandResult(events=(e,), positions=(p,), memory_id=e.memory_id)  # type: ignore[union-attr]
            for e, p in zip(events, positions, strict=True)
        ]

    def supersede(
        self, principal: Principal, memory_id: str, cmd: MemoryWrite, correlation_id: str | None = None
    ) -> CommandResult:
        """Replace memory ``memory_id`` with a new one written from ``cmd``.

        Raises:
            UnknownMemoryError: ``memory_id`` is not known.
            InvalidCommandError: the old memory belongs to another subject, or is not
                ``active``/``needs_confirmation``.
        """
        principal.require("write", cmd.subject_id)
        now = self._clock()
        corr = correlation_id or new_id()
        with self._pool.connection() as conn, conn.transaction():
            old = self._one_head(conn, memory_id, cmd.subject_id, "memory_id")
            if old.subject_id != cmd.subject_id:
                raise InvalidCommandError("subject_id", "a supersession cannot cross subjects")
            new_id_ = new_id()
            written = self._written(conn, cmd, new_id_, now, corr, {})
            superseded = MemorySuperseded(
                **self._envelope(cmd.subject_id, now, corr, causation_id=written.event_id),
                memory_id=memory_id,
                revision=old.revision + 1,
                superseded_by=new_id_,
            )
            state.bump(conn, memory_id, old.revision + 1, "superseded")
            positions = self._append([written, superseded])
        return CommandResult((written, superseded), tuple(positions), memory_id=new_id_)

    def confirm(self, principal: Principal, subject_id: str, memory_id: str) -> CommandResult:
        """The subject confirmed ``memory_id``: it becomes ``active``.

        Raises:
            UnknownMemoryError, InvalidCommandError (not awaiting confirmation or active).
        """
        principal.require("write", subject_id)
        now = self._clock()
        with self._pool.connection() as conn, conn.transaction():
            head = self._one_head(conn, memory_id, subject_id, "memory_id")
            event = MemoryConfirmed(
                **self._envelope(subject_id, now, new_id()), memory_id=memory_id, revision=head.revision + 1
            )
            state.bump(conn, memory_id, head.revision + 1, "active")
            positions = self._append([event])
        return CommandResult((event,), tuple(positions), memory_id=memory_id)

    def revoke_consent(self, principal: Principal, cmd: RevokeConsent) -> CommandResult:
        """Withdraw consent by ``consent_ref`` or purpose; every covered live memory
        becomes ``revoked``. A revocation that covers nothing is still recorded."""
        principal.require("write", cmd.subject_id)
        now = self._clock()
        with self._pool.connection() as conn, conn.transaction():
            heads = state.heads_where(
                conn,
                cmd.subject_id,
                "status = ANY(%s) AND (consent_ref = %s OR purpose = %s)",
                (list(state.ACTIVE_STATUSES), cmd.consent_ref, cmd.purpose),
            )
            affected = tuple(MemoryRef(memory_id=h.memory_id, revision=h.revision + 1) for h in heads)
            for ref in affected:
                state.bump(conn, ref.memory_id, ref.revision, "revoked")
            event = ConsentRevoked(
                **self._envelope(cmd.subject_id, now, new_id()),
                consent_ref=cmd.consent_ref,
                purpose=cmd.purpose,
                affected=affected,
            )
            positions = self._append([event])
        return CommandResult((event,), tuple(positions), affected=tuple(r.memory_id for r in affected))

    def sweep(self, principal: Principal, now: datetime | None = None) -> list[CommandResult]:
        """Expire every live memory whose ``expires_at`` is at or before ``now`` (UTC,
        default the clock): one ``RetentionExpired`` per subject the principal may write.

        Raises:
            InvalidCommandError: ``now`` is naive.
        """
        now = now or self._clock()
        if now.tzinfo is None:
            raise InvalidCommandError("now", "must be timezone-aware (UTC)")
        results: list[CommandResult] = []
        with self._pool.connection() as conn:
            subjects = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT subject_id FROM ledger_memories WHERE status = ANY(%s) AND expires_at <= %s"
                    " ORDER BY subject_id",
                    (list(state.ACTIVE_STATUSES), now),
                )
            ]
        for subject_id in subjects:
            if not principal.may("write", subject_id):
                log.warning("sweep: principal %s may not write %s; its expired memories stay", principal.id, subject_id)
                continue
            with self._pool.connection() as conn, conn.transaction():
                heads = state.heads_where(
                    conn, subject_id, "status = ANY(%s) AND expires_at <= %s", (list(state.ACTIVE_STATUSES), now)
                )
                if not heads:
                    continue
                affected = tuple(MemoryRef(memory_id=h.memory_id, revision=h.revision + 1) for h in heads)
                for ref in affected:
                    state.bump(conn, ref.memory_id, ref.revision, "expired")
                event = RetentionExpired(**self._envelope(subject_id, now, new_id()), affected=affected)
                positions = self._append([event])
            results.append(CommandResult((event,), tuple(positions), affected=tuple(r.memory_id for r in affected)))
        return results

    def redact(self, principal: Principal, subject_id: str, cmd: RedactMemory) -> CommandResult:
        """Replace a memory's text with ``cmd.replacement``.

        Raises:
            UnknownMemoryError; InvalidCommandError if the memory was erased.
        """
        principal.require("write", subject_id)
        now = self._clock()
        replacement = cmd.replacement.strip() or "[redacted]"
        with self._pool.connection() as conn, conn.transaction():
            head = self._one_head(conn, cmd.memory_id, subject_id, "memory_id", allow_inactive=True)
            if head.status == "erased":
                raise InvalidCommandError("memory_id", f"memory {cmd.memory_id!r} was erased")
            revision = head.revision + 1
            key_id = f"{cmd.memory_id}/{revision}"  # a new key: the old text's key is destroyed below
            event = MemoryRedacted(
                **self._envelope(subject_id, now, new_id()),
                memory_id=cmd.memory_id,
                revision=revision,
                fields=cmd.fields,
                content=self._keyring.seal(conn, subject_id, key_id, replacement),
                content_hmac=self._keyring.fingerprint(replacement),
                state=state.redacted_state(conn, cmd.memory_id),
            )
            self._keyring.destroy(conn, [cmd.memory_id], keep=key_id)
            state.bump(conn, cmd.memory_id, revision)
            positions = self._append([event])
        return CommandResult((event,), tuple(positions), memory_id=cmd.memory_id)

    def erase(self, principal: Principal, cmd: EraseMemories, correlation_id: str | None = None) -> CommandResult:
        """Erase memories (and every memory derived from them): destroy their data keys,
        record tombstones and the request, and append ``ErasureRequested``.

        ``cmd`` names memory ids, the whole subject or a source (``ledger.erasure``).

        Raises:
            NotAuthorisedError: no ``erase`` grant for the subject.
            UnknownMemoryError: a listed memory id is not a memory of the subject.
            InvalidCommandError: nothing left to erase (see ``erasure_targets``).
        """
        principal.require("erase", cmd.subject_id)
        now = self._clock()
        request_id = "er-" + new_id()
        with self._pool.connection() as conn:
            erasure.install(conn)
        with self._pool.connection() as conn, conn.transaction():
            targets = erasure.erasure_targets(conn, cmd)
            heads_by_id = state.lock_heads(conn, targets)
            targets = [m for m in targets if heads_by_id[m].status != "erased"]
            affected = tuple(
                MemoryRef(memory_id=m, revision=heads_by_id[m].revision + 1) for m in targets if m in heads_by_id
            )
            hmacs = state.content_hmacs(conn, targets)
            self._keyring.destroy(conn, targets)
            for ref in affected:
                state.bump(conn, ref.memory_id, ref.revision, "erased")
            conn.execute(
                "INSERT INTO tombstones (memory_id, subject_id, request_id, erased_at)"
                " SELECT m, %s, %s, %s FROM unnest(%s::text[]) AS m ON CONFLICT (memory_id) DO NOTHING",
                (cmd.subject_id, request_id, now, targets),
            )
            event = ErasureRequested(
                **self._envelope(cmd.subject_id, now, correlation_id or new_id()),
                request_id=request_id,
                request_kind=cmd.request_kind,
                requested_by=principal.id,
                reason=cmd.reason,
                legal_basis=cmd.legal_basis,
                affected=affected,
            )
            conn.execute(
                """
                INSERT INTO erasure_requests (request_id, subject_id, request_kind, memory_ids, content_hmacs,
                    requested_by, reason, legal_basis, requested_at)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                """,
                (
                    request_id,
                    cmd.subject_id,
                    event.request_kind,
                    targets,
                    hmacs,
                    principal.id,
                    cmd.reason,
                    cmd.legal_basis,
                    now,
                ),
            )
            erasure.record_source(conn, request_id, cmd)
            (position,) = self._append([event])  # last: a failure above leaves nothing in the log
            conn.execute(
                "UPDATE erasure_requests SET log_partition = %s, log_offset = %s WHERE request_id = %s",
                (position.partition, position.offset, request_id),
            )
        return CommandResult((event,), (position,), request_id=request_id, affected=tuple(targets))

    # -- helpers ------------------------------------------------------------------------

    def _envelope(
        self, subject_id: str, now: datetime, correlation_id: str, causation_id: str | None = None
    ) -> _EnvelopeFields:
        return {
            "event_id": new_id(),
            "occurred_at": now,
            "subject_id": subject_id,
            "producer": self._producer,
            "correlation_id": correlation_id,
            "causation_id": causation_id,
        }

    def _written(
        self,
        conn: psycopg.Connection,
        cmd: MemoryWrite,
        memory_id: str,
        now: datetime,
        correlation_id: str,
        batch: dict[str, str],
    ) -> MemoryWritten | SummaryDerived:
        if cmd.retention.expires_at is not None and cmd.retention.expires_at <= now:
            raise InvalidCommandError("retention.expires_at", "must be in the future (UTC)")
        sources = [m for m in cmd.provenance.derived_from if m not in batch]
        known = state.lock_heads(conn, sources) if sources else {}
        for mid in cmd.provenance.derived_from:
            owner = batch.get(mid) or (known[mid].subject_id if mid in known else None)
            if owner != cmd.subject_id:
                raise UnknownMemoryError(mid, "provenance.derived_from")
            if mid in known and known[mid].status == "erased":
                raise InvalidCommandError("provenance.derived_from", f"memory {mid!r} was erased")
        status = "needs_confirmation" if cmd.kind == "inference" and not cmd.confirmed else "active"
        body = MemoryBody(
            kind=cmd.kind,
            content=self._keyring.seal(conn, cmd.subject_id, memory_id, cmd.content),
            key=cmd.key,
            purpose=cmd.purpose,
            scope=cmd.scope,
            provenance=cmd.provenance,
            sensitivity=cmd.sensitivity,
            retention=cmd.retention,
            confirmed=cmd.confirmed,
            confidence=cmd.confidence if cmd.confidence is not None else VERACITY_CONFIDENCE[cmd.veracity],
            veracity=cmd.veracity,
            content_hmac=self._keyring.fingerprint(cmd.content),
        )
        state.insert_head(
            conn,
            memory_id=memory_id,
            subject_id=cmd.subject_id,
            status=status,
            kind=cmd.kind,
            purpose=cmd.purpose,
            scope_type=cmd.scope.type,
            scope_id=cmd.scope.id,
            key=cmd.key,
            consent_ref=cmd.provenance.consent_ref,
            turn_id=cmd.provenance.turn_id,
            tool_call_id=cmd.provenance.tool_call_id,
            source_ref=cmd.provenance.source_ref,
            derived_from=cmd.provenance.derived_from,
            expires_at=cmd.retention.expires_at,
            written_at=cmd.provenance.written_at,
            content_hmac=body.content_hmac,
        )
        envelope = self._envelope(cmd.subject_id, now, correlation_id)
        if cmd.kind == "summary":
            return SummaryDerived(**envelope, memory_id=memory_id, memory=body)
        return MemoryWritten(**envelope, memory_id=memory_id, memory=body)

    def _one_head(
        self,
        conn: psycopg.Connection,
        memory_id: str,
        subject_id: str,
        field_name: str,
        allow_inactive: bool = False,
    ) -> state.MemoryHead:
        head = state.lock_heads(conn, [memory_id]).get(memory_id)
        if head is None:
            raise UnknownMemoryError(memory_id, field_name)
        if head.subject_id != subject_id:
            raise InvalidCommandError("subject_id", f"memory {memory_id!r} belongs to another subject")
        if not allow_inactive and head.status not in state.ACTIVE_STATUSES:
            raise InvalidCommandError(field_name, f"memory {memory_id!r} is {head.status}")
        return head

    def _append(self, events: Sequence[Event]) -> list[LogPosition]:
        return self._log.append_batch([(e.subject_id, encode_event(e)) for e in events])
