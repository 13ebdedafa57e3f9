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
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

import psycopg
from psycopg_pool import ConnectionPool
from uuid6 import uuid7

from contracts import (
    PERSONAL_CONTEXT,
    VERACITY_CONFIDENCE,
    ClearProvenance,
    ConflictDetected,
    ConsentRevoked,
    EraseMemories,
    ErasureRequested,
    Event,
    MemoryBody,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemoryReinforced,
    MemoryReinstated,
    MemorySuperseded,
    MemoryWrite,
    MemoryWritten,
    PersonalFields,
    Provenance,
    RedactedState,
    RedactMemory,
    Retention,
    RetentionExpired,
    RevokeConsent,
    Screening,
    SealedText,
    SummaryDerived,
    encode_event,
    utc_now,
)
from ledger import admission, dead_letters, erasure, state, supersession
from ledger.crypto import Keyring
from ledger.errors import InvalidCommandError, UnknownMemoryError
from ledger.eventlog import EventLog, LogPosition
from ledger.pgschema import vacuum
from ledger.policy import RetentionPolicy, load_policy, normalise_statement, reinforce
from ledger.principals import Principal
from ledger.retry import retry_aborted
from ledger.screening import AdmittedWrite, ScreeningPolicy, admit_write, load_screening_policy, screen_redaction
from ledger.summariser import ExtractiveSummariser, Summariser
from ledger.tombstone_log import Tombstone, TombstoneLog

if TYPE_CHECKING:
    from ledger.detectors import Screener

log = logging.getLogger(__name__)

SUMMARISER_WRITER = "memledger.summariser"
"""``provenance.writer`` of summaries the ledger regenerates."""


def new_id() -> str:
    """A new UUIDv7 as a string (time-ordered, RFC 9562)."""
    return str(uuid7())


def _retried(first: admission.FirstAttempt) -> CommandResult:
    """The result of a retried write: nothing appended, the first attempt's memory and events."""
    return CommandResult((), (), first.memory_id, repeat=first.describe(), first_event_ids=first.event_ids)


def _arrives_confirmed(cmd: MemoryWrite) -> bool:
    """An inference written with ``confirmed``: the subject already confirmed it. Its
    confirmation changes its status, so the ledger records it as a ``MemoryConfirmed``
    of its own (another kind's ``confirmed`` is only a field of the written memory)."""
    return cmd.kind == "inference" and cmd.confirmed


class _EnvelopeFields(TypedDict):
    event_id: str
    occurred_at: datetime
    subject_id: str
    producer: str
    correlation_id: str
    causation_id: str | None


@dataclass(frozen=True)
class CommandResult:
    """What an accepted command produced: its events and where the log put them.

    ``repeat`` says why a repeated command changed nothing (no events: a retried write,
    a confirmation of a confirmed memory, a withdrawal already made; see
    ``ledger.admission``); for a retried write ``memory_id`` and ``first_event_ids`` are
    those of its first attempt. ``reinstated`` and ``earlier_versions`` (an erasure) are
    the earlier versions made ``needs_confirmation`` again and those that still hold
    content (``ledger.supersession``)."""

    events: tuple[Event, ...]
    positions: tuple[LogPosition, ...]
    memory_id: str | None = None
    request_id: str | None = None
    affected: tuple[str, ...] = field(default_factory=tuple)
    repeat: str | None = None
    first_event_ids: tuple[str, ...] = ()
    reinstated: tuple[str, ...] = ()
    earlier_versions: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Recorded:
    """One write as ``_record_once`` ended it."""

    memory_id: str
    events: list[Event]
    first: admission.FirstAttempt | None = None


class Ledger:
    """The write side. ``producer`` is recorded in every envelope; ``clock`` returns UTC
    now; ``policy`` is the retention policy per sensitivity class (default: the
    checked-in ``ledger/retention.toml``); ``summariser`` regenerates summaries whose
    sources were invalidated (default: extractive, no model); ``tombstone_log``, when
    given (the distributed mode), receives one record per erased memory besides the
    ``tombstones`` table (``ledger.tombstone_log``); ``screening`` is the screening
    policy of memory text (default: the checked-in ``ledger/screening.toml``)."""

    def __init__(
        self,
        pool: ConnectionPool,
        log: EventLog,
        keyring: Keyring,
        producer: str = "memledger",
        clock: Callable[[], datetime] = utc_now,
        policy: RetentionPolicy | None = None,
        summariser: Summariser | None = None,
        tombstone_log: TombstoneLog | None = None,
        screening: ScreeningPolicy | None = None,
    ) -> None:
        self._pool = pool
        self._tombstone_log = tombstone_log
        self._log = log
        self._keyring = keyring
        self._producer = producer
        self._clock = clock
        self.policy = policy or load_policy()
        self._summariser = summariser or ExtractiveSummariser()
        self._screening = screening or load_screening_policy()
        self._screener: Screener | None = None
        with pool.connection() as conn:
            state.install(conn)
            Keyring.install(conn)
            erasure.install(conn)
            dead_letters.install(conn)
            keyring.attach(conn)  # the fingerprint key survives master key rotations
            supersession.backfill_links(conn, log)

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    @property
    def screener(self) -> Screener:
        """The screener of memory text, built at first use (``ledger.detectors`` imports
        the detector libraries, which commands that write nothing do not need).

        Raises:
            PolicyError: the screening policy names an unknown detector or region.
        """
        if self._screener is None:
            from ledger.detectors import Screener

            self._screener = Screener(self._screening)
        return self._screener

    @screener.setter
    def screener(self, screener: Screener) -> None:
        self._screener = screener

    # -- commands ---------------------------------------------------------------------

    def write(self, principal: Principal, cmd: MemoryWrite, correlation_id: str | None = None) -> CommandResult:
        """Record a memory (a ``summary`` becomes ``SummaryDerived``).

        The rules of the memory's slot (same subject, purpose, scope and ``key``):

        - the same statement again (same normalised text) makes no new memory: the live
          one gets ``MemoryReinforced`` with its confidence raised
          (``ledger.policy.reinforce``), and is confirmed when the subject stated it;
          ``CommandResult.memory_id`` is then the existing memory's id;
        - a different claim for a ``key`` that has a live memory supersedes it when the
          subject stated it (``veracity="stated"``) or it comes from the same
          ``source_ref``; otherwise it is a conflict: ``ConflictDetected`` puts every
          live claim of the slot, the new one included, in ``needs_confirmation``;
        - an inference written ``confirmed`` (the subject already confirmed it) enters as
          ``needs_confirmation`` and is confirmed by a ``MemoryConfirmed`` right after its
          ``MemoryWritten`` (``causation_id`` = the write's event), which supersedes the
          other live memories of its slot, as ``confirm`` would: the log itself records the
          confirmation, and a replay folds the same two events into the same rows.

        Before any of that the text is screened (``ledger.screening``): a secret is
        refused (or replaced, as the screening policy says) and personal data raises the
        memory's class; the written event records the decision. A retry of a write that
        named a turn or tool call id (``ledger.admission``) appends nothing and returns
        the first attempt's memory id (``CommandResult.repeat``).

        Raises:
            NotAuthorisedError: no ``write`` grant for ``cmd.subject_id``.
            SecretFoundError: the text holds a secret the screening policy refuses
                (field ``content``, the kind named); nothing was written.
            InvalidCommandError: the retention policy of the memory's class refuses it
                (``retention.expires_at`` not in the future or beyond the class
                maximum, ``provenance.consent_ref`` missing), or a
                ``provenance.derived_from`` id unknown for this subject or erased.
            EventLogError: the log did not acknowledge the event; nothing was written.
        """
        return self.write_many(principal, [cmd], correlation_id)[0]

    @retry_aborted
    def write_many(
        self, principal: Principal, cmds: Sequence[MemoryWrite], correlation_id: str | None = None
    ) -> list[CommandResult]:
        """Write several memories in one transaction and one log batch (all or none).
        Raises as ``write``."""
        for cmd in cmds:
            principal.require("write", cmd.subject_id)
        now = self._clock()
        corr = correlation_id or new_id()
        admitted = [admit_write(self.policy, self.screener, cmd, now) for cmd in cmds]
        with self._pool.connection() as conn, conn.transaction():
            recorded = [self._record_once(conn, a, now, corr) for a in admitted]
            positions = self._append([e for r in recorded for e in r.events])
        results: list[CommandResult] = []
        start = 0
        for r in recorded:
            if r.first is not None:
                results.append(_retried(r.first))
                continue
            results.append(CommandResult(tuple(r.events), tuple(positions[start : start + len(r.events)]), r.memory_id))
            start += len(r.events)
        return results

    @retry_aborted
    def supersede(
        self, principal: Principal, memory_id: str, cmd: MemoryWrite, correlation_id: str | None = None
    ) -> CommandResult:
        """Replace memory ``memory_id`` with a new one written from ``cmd`` (and every
        other live memory of the new one's slot: an explicit replacement is never a
        conflict).

        The replacement is screened as ``write`` screens; a retry of a supersession that
        named a turn or tool call id returns its first attempt's result (the old memory is
        superseded by then) and appends nothing.

        Raises:
            UnknownMemoryError: ``memory_id`` is not known.
            InvalidCommandError: the old memory belongs to another subject or was written
                for another purpose or scope, or is not ``active``/``needs_confirmation``;
                or as ``write``.
        """
        principal.require("write", cmd.subject_id)
        now = self._clock()
        corr = correlation_id or new_id()
        admitted = admit_write(self.policy, self.screener, cmd, now)
        with self._pool.connection() as conn, conn.transaction():
            key = admission.attempt_fingerprint(self._keyring.fingerprint, cmd, f"supersede {memory_id}")
            first = None if key is None else admission.first_attempt(conn, key)
            if first is not None:
                return _retried(first)
            old = self._one_head(conn, memory_id, cmd.subject_id, "memory_id")
            if old.subject_id != cmd.subject_id:
                raise InvalidCommandError("subject_id", "a supersession cannot cross subjects")
            if old.purpose != cmd.purpose:
                raise InvalidCommandError(
                    "purpose",
                    f"memory {memory_id!r} was written for {old.purpose!r}: its replacement keeps that purpose",
                )
            if old.scope != cmd.scope:
                raise InvalidCommandError(
                    "scope",
                    f"memory {memory_id!r} is scoped to {old.scope_type}:{old.scope_id}: its replacement keeps that"
                    " scope (write a new memory for another scope)",
                )
            new_id_, events = self._record(conn, admitted.cmd, now, corr, explicit=True, screening=admitted.screening)
            if not any(isinstance(e, MemorySuperseded) and e.memory_id == memory_id for e in events):
                events += self._supersede_all(conn, [old], new_id_, now, corr, events[0].event_id)
            if key is not None:
                admission.remember_attempt(conn, key, cmd.subject_id, new_id_, [e.event_id for e in events], now)
            positions = self._append(events)
        return CommandResult(tuple(events), tuple(positions), memory_id=new_id_)

    def head(self, principal: Principal, subject_id: str, memory_id: str) -> state.MemoryHead:
        """The ledger's current view of one memory of ``subject_id`` (status, revision,
        kind, purpose, scope, key, class, consent), e.g. to default a replacement's fields.

        A plain read of the last committed head: it locks nothing, so it neither waits for
        a command in progress on the memory nor holds one up. A command that follows
        (``supersede``) locks the head and checks it again itself.

        Raises:
            NotAuthorisedError: no ``read`` grant for the subject.
            UnknownMemoryError: ``memory_id`` is not a memory of the subject.
        """
        principal.require("read", subject_id)
        with self._pool.connection() as conn:  # a read: no row lock, so no command waits for it
            found = state.read_heads(conn, [memory_id]).get(memory_id)
        if found is None or found.subject_id != subject_id:
            raise UnknownMemoryError(memory_id, "memory_id")
        return found

    @retry_aborted
    def confirm(self, principal: Principal, subject_id: str, memory_id: str) -> CommandResult:
        """The subject confirmed ``memory_id``: it becomes ``active``, and every other
        live memory of its slot (a conflict it was part of) is superseded by it. A memory
        already active and confirmed stays as it is: nothing is appended
        (``CommandResult.repeat`` says so).

        Raises:
            UnknownMemoryError, InvalidCommandError (not awaiting confirmation or active).
        """
        principal.require("write", subject_id)
        now = self._clock()
        corr = new_id()
        with self._pool.connection() as conn, conn.transaction():
            head = self._one_head(conn, memory_id, subject_id, "memory_id")
            repeat = admission.repeated_confirmation(head)
            if repeat is not None:
                return CommandResult((), (), memory_id=memory_id, repeat=repeat)
            events = self._confirm(conn, head, now, corr)
            positions = self._append(events)
        return CommandResult(tuple(events), tuple(positions), memory_id=memory_id)

    @retry_aborted
    def revoke_consent(self, principal: Principal, cmd: RevokeConsent) -> CommandResult:
        """Withdraw consent by ``consent_ref`` or purpose: every covered live memory, and
        every memory derived from one, becomes ``revoked``. Their data keys are destroyed
        at once unless their class's ``consent_grace_days`` keeps them longer (then
        ``sweep`` destroys them when the grace ends). Summaries that lost a source are
        regenerated from the sources that remain. A ``consent_ref`` or ``purpose`` that
        matches no memory of the subject (nor a consent already withdrawn) is refused
        unless ``cmd.allow_unmatched``; then the withdrawal is recorded though it covers
        nothing yet. A withdrawal made again that covers nothing more appends nothing
        (``CommandResult.repeat`` says when it was made).

        Raises:
            NotAuthorisedError: no ``write`` grant for the subject.
            InvalidCommandError: ``consent_ref`` or ``purpose`` matches nothing (see
                ``admission.admit_revocation``); nothing is written.
        """
        principal.require("write", cmd.subject_id)
        now = self._clock()
        corr = new_id()
        with self._pool.connection() as conn, conn.transaction():
            admission.admit_revocation(conn, cmd)
            covered = state.heads_where(
                conn,
                cmd.subject_id,
                "status = ANY(%s) AND (consent_ref = %s OR purpose = %s)",
                (list(state.HOLDING_STATUSES), cmd.consent_ref, cmd.purpose),
            )
            ids = [h.memory_id for h in covered]
            ids += [m for m in state.derived_closure(conn, ids) if m not in ids]
            heads = [h for h in state.lock_heads(conn, ids).values() if h.status in state.HOLDING_STATUSES]
            repeat = admission.repeated_revocation(conn, cmd, heads)
            if repeat is not None:
                return CommandResult((), (), repeat=repeat)
            affected = tuple(MemoryRef(memory_id=h.memory_id, revision=h.revision + 1) for h in heads)
            for ref in affected:
                state.bump(conn, ref.memory_id, ref.revision, "revoked")
                state.set_fields(conn, ref.memory_id, revoked_at=now)
            if cmd.consent_ref is not None:
                state.record_revocation(conn, cmd.subject_id, cmd.consent_ref, now)
            if cmd.purpose is not None:
                state.record_revocation(conn, cmd.subject_id, admission.purpose_ref(cmd.purpose), now)
            no_grace = [h.memory_id for h in heads if self.policy.of(h.sensitivity).consent_grace_days == 0]
            self._destroy_keys(conn, no_grace, now)
            sealed_ref = None
            if cmd.consent_ref is not None:
                subject_key = self._keyring.subject_key_id(conn, cmd.subject_id)
                sealed_ref = self._keyring.seal(conn, cmd.subject_id, subject_key, cmd.consent_ref)
            event = ConsentRevoked(
                **self._envelope(cmd.subject_id, now, corr),
                consent_ref=sealed_ref,
                purpose=cmd.purpose,
                affected=affected,
            )
            events: list[Event] = [event]
            events += self._regenerate(conn, heads, {h.memory_id for h in heads}, now, corr, event.event_id)
            positions = self._append(events)
        self._vacuum_keys()
        return CommandResult(tuple(events), tuple(positions), affected=tuple(r.memory_id for r in affected))

    @retry_aborted
    def sweep(self, principal: Principal, now: datetime | None = None) -> list[CommandResult]:
        """Enforce retention at ``now`` (UTC, default the clock), per subject the
        principal may write:

        - live memories whose ``expires_at`` is at or before ``now``, and the summaries
          derived from them, expire (``RetentionExpired``, reason ``expires_at``);
        - revoked memories whose class's consent grace period has ended lose their
          content (``RetentionExpired``, reason ``consent_grace``).

        Their data keys are destroyed first; summaries that lost a source are regenerated
        from the sources that remain.

        Raises:
            InvalidCommandError: ``now`` is naive.
        """
        now = now or self._clock()
        if now.tzinfo is None or now.utcoffset() is None:
            raise InvalidCommandError("now", "must be timezone-aware (UTC)")
        results: list[CommandResult] = []
        with self._pool.connection() as conn:
            subjects = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT subject_id FROM ledger_memories WHERE (status = ANY(%s) AND expires_at <= %s)"
                    " OR (status = 'revoked' AND keys_destroyed_at IS NULL) ORDER BY subject_id",
                    (list(state.HOLDING_STATUSES), now),
                )
            ]
        for subject_id in subjects:
            if not principal.may("write", subject_id):
                log.warning("sweep: principal %s may not write %s; its expired memories stay", principal.id, subject_id)
                continue
            with self._pool.connection() as conn, conn.transaction():
                events = self._expire(conn, subject_id, now) + self._end_grace(conn, subject_id, now)
                if not events:
                    continue
                positions = self._append(events)
            touched = tuple(r.memory_id for e in events if isinstance(e, RetentionExpired) for r in e.affected)
            results.append(CommandResult(tuple(events), tuple(positions), affected=touched))
        if results:
            self._vacuum_keys()
        return results

    @retry_aborted
    def redact(self, principal: Principal, subject_id: str, cmd: RedactMemory) -> CommandResult:
        """Replace a memory's text with ``cmd.replacement`` under a new data key (the old
        text's key is destroyed); summaries derived from it are regenerated with the new
        text and the old ones superseded, their keys destroyed too (they restate the old
        text). Inferences derived from it are separate claims and are left as they are.
        The replacement is screened (``ledger.screening.screen_redaction``): a secret is
        refused or replaced as for a write, and personal data the memory's class does not
        allow is refused (a redaction cannot raise the class).

        Raises:
            UnknownMemoryError; InvalidCommandError if the memory was erased, or the
            replacement holds personal data above the memory's class; SecretFoundError.
        """
        principal.require("write", subject_id)
        now = self._clock()
        corr = new_id()
        replacement = cmd.replacement.strip() or "[redacted]"
        with self._pool.connection() as conn, conn.transaction():
            head = self._one_head(conn, cmd.memory_id, subject_id, "memory_id", allow_inactive=True)
            if head.status not in state.HOLDING_STATUSES:
                raise InvalidCommandError("memory_id", f"memory {cmd.memory_id!r} is {head.status}: it holds no text")
            if head.expires_at is not None and head.expires_at <= now:
                raise InvalidCommandError(
                    "memory_id", f"memory {cmd.memory_id!r} expired at {head.expires_at.isoformat()}"
                )
            replacement, screening = screen_redaction(self.screener, replacement, head.sensitivity)
            revision = head.revision + 1
            key_id = f"{cmd.memory_id}/{revision}"  # a new key: the old text's key is destroyed below
            sealed = self._keyring.seal(conn, subject_id, key_id, replacement)
            personal = self._seal_personal(conn, subject_id, key_id, state.personal_fields(conn, cmd.memory_id))
            event = MemoryRedacted(
                **self._envelope(subject_id, now, corr),
                memory_id=cmd.memory_id,
                revision=revision,
                fields=cmd.fields,
                content=sealed,
                content_hmac=self._keyring.fingerprint(replacement),
                state=state.redacted_state(conn, cmd.memory_id),
                personal=personal,
                screening=screening,
            )
            self._keyring.destroy(conn, [cmd.memory_id], keep=key_id)
            state.bump(conn, cmd.memory_id, revision)
            state.set_fields(
                conn,
                cmd.memory_id,
                sealed_content=sealed,
                content_hmac=event.content_hmac,
                statement_hmac=self._statement_hmac(replacement),
            )
            events: list[Event] = [event]
            summaries = self._live_summaries_of(conn, subject_id, [cmd.memory_id])
            events += self._regenerate(conn, summaries, set(), now, corr, event.event_id, supersede=True)
            # the old summaries restate the text that was redacted: their keys go with it
            self._destroy_keys(conn, [s.memory_id for s in summaries], now)
            positions = self._append(events)
        self._vacuum_keys()
        return CommandResult(tuple(events), tuple(positions), memory_id=cmd.memory_id)

    @retry_aborted
    def erase(self, principal: Principal, cmd: EraseMemories, correlation_id: str | None = None) -> CommandResult:
        """Erase memories (and every memory derived from them): destroy their data keys,
        record tombstones (in the table and, in the distributed mode, on the compacted
        tombstone topic) and the request, purge the erasure's dead letters from a Postgres
        DLQ (``ledger.dead_letters``), and append ``ErasureRequested``; summaries
        erased only because a source was erased are regenerated from the sources that
        remain.

        ``cmd`` names memory ids, the whole subject or a source (``ledger.erasure``), and
        with ``cmd.with_history`` every earlier version of those too. What becomes of the
        earlier versions left is ``ledger.supersession``'s rule: one whose replacement was
        live is reinstated (``MemoryReinstated``, ``needs_confirmation``); the ones that
        still hold content are recorded with the request and returned
        (``CommandResult.earlier_versions``, ``reinstated``).

        Raises:
            NotAuthorisedError: no ``erase`` grant for the subject.
            UnknownMemoryError: a listed memory id is not a memory of the subject.
            InvalidCommandError: nothing left to erase (see ``erasure_targets``).
            EventLogError: the tombstone topic or the log did not acknowledge; nothing
                was erased (the transaction rolled back, published tombstones retracted).
        """
        principal.require("erase", cmd.subject_id)
        now = self._clock()
        corr = correlation_id or new_id()
        request_id = "er-" + new_id()
        with self._pool.connection() as conn, conn.transaction():
            targets = erasure.erasure_targets(conn, cmd)
            heads_by_id = state.lock_heads(conn, targets)
            named = set(cmd.memory_ids)
            cascaded = [heads_by_id[m] for m in targets if heads_by_id[m].status != "erased" and m not in named]
            targets = [m for m in targets if heads_by_id[m].status != "erased"]
            affected = tuple(
                MemoryRef(memory_id=m, revision=heads_by_id[m].revision + 1) for m in targets if m in heads_by_id
            )
            hmacs = state.content_hmacs(conn, targets)
            earlier = state.lock_heads(conn, supersession.earlier_versions(conn, targets))
            successors = {m: h for m, h in heads_by_id.items() if m in targets}
            predecessors = [h for h in earlier.values() if h.superseded_by in successors]
            reinstated = supersession.reinstatements(successors, predecessors, now)
            left = supersession.holding_content(earlier, sorted(earlier))
            self._destroy_keys(conn, targets, now)  # the head keeps ids, times and statuses only
            if cmd.whole_subject:
                self._keyring.destroy_subject_keys(conn, cmd.subject_id)
            for ref in affected:
                state.bump(conn, ref.memory_id, ref.revision, "erased")
            conn.execute(
                "INSERT INTO tombstones (memory_id, subject_id, request_id, erased_at)"
                " SELECT m, %s, %s, %s FROM unnest(%s::text[]) AS m ON CONFLICT (memory_id) DO NOTHING",
                (cmd.subject_id, request_id, now, targets),
            )
            event = ErasureRequested(
                **self._envelope(cmd.subject_id, now, corr),
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
                    requested_by, reason, legal_basis, requested_at, with_history, reinstated, earlier_versions)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
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
                    cmd.with_history,
                    [r.head.memory_id for r in reinstated],
                    left,
                ),
            )
            erasure.record_source(conn, request_id, cmd)
            scope = dead_letters.ErasureScope(cmd.subject_id, tuple(targets), cmd.whole_subject, cmd.source_ref)
            dead_letters.purge_postgres_dlq(conn, request_id, scope)  # a Kafka DLQ cannot be edited: trace lists it
            events: list[Event] = [event]
            events += [self._reinstate(conn, r, now, corr, event.event_id) for r in reinstated]
            events += self._regenerate(conn, cascaded, set(targets), now, corr, event.event_id)
            self._publish_tombstones([Tombstone(m, cmd.subject_id, request_id, now) for m in targets])
            try:
                positions = self._append(events)  # last: a failure above leaves nothing in the log
            except BaseException:
                if self._tombstone_log is not None:  # nothing was erased: take the tombstones back
                    self._tombstone_log.retract(targets)
                raise
            conn.execute(
                "UPDATE erasure_requests SET log_partition = %s, log_offset = %s WHERE request_id = %s",
                (positions[0].partition, positions[0].offset, request_id),
            )
        self._vacuum_keys()
        return CommandResult(
            tuple(events),
            tuple(positions),
            request_id=request_id,
            affected=tuple(targets),
            reinstated=tuple(r.head.memory_id for r in reinstated),
            earlier_versions=tuple(left),
        )

    def _reinstate(
        self, conn: psycopg.Connection, r: supersession.Reinstatement, now: datetime, corr: str, cause: str
    ) -> MemoryReinstated:
        """``MemoryReinstated`` for an earlier version whose replacement is erased: it
        carries the memory's text and personal fields sealed under its current key, so a
        store that dropped it rebuilds it from this event."""
        head = r.head
        assert head.sealed_content is not None  # only a memory that holds content is reinstated
        personal = state.personal_fields(conn, head.memory_id)
        event = MemoryReinstated(
            **self._envelope(head.subject_id, now, corr, causation_id=cause),
            memory_id=head.memory_id,
            revision=head.revision + 1,
            replacement=r.replacement,
            content=head.sealed_content,
            content_hmac=next(iter(state.content_hmacs(conn, [head.memory_id])), None),
            personal=self._seal_personal(conn, head.subject_id, head.sealed_content.key_id, personal),
            state=RedactedState(
                status="needs_confirmation",
                kind=head.kind,  # type: ignore[arg-type]
                purpose=head.purpose,
                scope_type=head.scope_type,  # type: ignore[arg-type]
                expires_at=head.expires_at,
                derived_from=head.derived_from,
            ),
        )
        state.set_fields(conn, head.memory_id, revision=event.revision, status="needs_confirmation", confirmed_at=None)
        return event

    # -- the rules of a slot ------------------------------------------------------------

    def _record_once(self, conn: psycopg.Connection, admitted: AdmittedWrite, now: datetime, corr: str) -> _Recorded:
        """``_record`` of an admitted write, unless it repeats an attempt already recorded
        (the same turn or tool call and fields, ``ledger.admission``): then nothing."""
        key = admission.attempt_fingerprint(self._keyring.fingerprint, admitted.original, "write")
        first = None if key is None else admission.first_attempt(conn, key)
        if first is not None:
            return _Recorded(first.memory_id, [], first)
        memory_id, events = self._record(conn, admitted.cmd, now, corr, screening=admitted.screening)
        if key is not None:
            subject = admitted.cmd.subject_id
            admission.remember_attempt(conn, key, subject, memory_id, [e.event_id for e in events], now)
        return _Recorded(memory_id, events)

    def _record(
        self,
        conn: psycopg.Connection,
        cmd: MemoryWrite,
        now: datetime,
        corr: str,
        explicit: bool = False,
        screening: Screening | None = None,
    ) -> tuple[str, list[Event]]:
        """Apply the slot rules to one (screened, policy-checked) write; returns the
        memory id the write ended in and its events, in log order. ``screening`` is
        recorded on a new memory's event."""
        if cmd.kind == "summary" and cmd.key is not None:
            raise InvalidCommandError("key", "a summary has no key: it restates its sources, it is no slot's answer")
        admission.admit(conn, cmd, now)
        if cmd.kind != "summary" and not explicit:
            same = state.find_statement(
                conn,
                cmd.subject_id,
                cmd.purpose,
                cmd.scope,
                cmd.key,
                self._statement_hmac(cmd.content),
                now,
                cmd.sensitivity,
                cmd.provenance.consent_ref,
                cmd.retention.expires_at,
            )
            if same is not None:
                return same.memory_id, self._reinforce(conn, same, cmd, now, corr)
        memory_id = new_id()
        written = self._written(conn, cmd, memory_id, now, corr, screening=screening)
        events: list[Event] = [written]
        if _arrives_confirmed(cmd):
            # the subject already confirmed it: recorded as its own event, exactly as `confirm`
            # right after the write would (which also settles the slot: its rivals are superseded)
            head = state.lock_heads(conn, [memory_id])[memory_id]
            events += self._confirm(conn, head, now, corr, cause=written.event_id)
        if cmd.key is None or cmd.kind == "summary":
            return memory_id, events
        rivals = state.live_in_slot(conn, cmd.subject_id, cmd.purpose, cmd.scope, cmd.key, now)
        rivals = [h for h in rivals if h.memory_id != memory_id]
        if not rivals:
            return memory_id, events
        same_source = cmd.provenance.source_ref is not None and all(
            h.source_ref == cmd.provenance.source_ref for h in rivals
        )
        stated = cmd.veracity == "stated" and cmd.kind != "inference"  # an inference is never the subject's word
        if explicit or stated or same_source:
            events += self._supersede_all(conn, rivals, memory_id, now, corr, written.event_id)
        else:
            new_head = state.lock_heads(conn, [memory_id])[memory_id]
            events += self._conflict(conn, [*rivals, new_head], cmd, now, corr, written.event_id)
        return memory_id, events

    def _reinforce(
        self, conn: psycopg.Connection, head: state.MemoryHead, cmd: MemoryWrite, now: datetime, corr: str
    ) -> list[Event]:
        evidence = cmd.confidence if cmd.confidence is not None else VERACITY_CONFIDENCE[cmd.veracity]
        confidence = reinforce(head.confidence, evidence)
        key_id = head.sealed_content.key_id if head.sealed_content is not None else head.memory_id
        personal = PersonalFields.of(cmd.key, cmd.scope, cmd.provenance)
        event = MemoryReinforced(
            **self._envelope(cmd.subject_id, now, corr),
            memory_id=head.memory_id,
            revision=head.revision + 1,
            confidence=confidence,
            provenance=ClearProvenance.of(cmd.provenance),
            personal=self._seal_personal(conn, cmd.subject_id, key_id, personal),
        )
        state.bump(conn, head.memory_id, event.revision)
        state.set_fields(conn, head.memory_id, confidence=confidence)
        events: list[Event] = [event]
        stated = cmd.veracity == "stated" and cmd.kind != "inference"
        if head.status == "needs_confirmation" and (stated or _arrives_confirmed(cmd)):
            # the subject said it, or confirmed it: that confirms an inference or a claim in conflict
            events += self._confirm(conn, replace(head, revision=event.revision), now, corr, cause=event.event_id)
        return events

    def _confirm(
        self, conn: psycopg.Connection, head: state.MemoryHead, now: datetime, corr: str, cause: str | None = None
    ) -> list[Event]:
        event = MemoryConfirmed(
            **self._envelope(head.subject_id, now, corr, causation_id=cause),
            memory_id=head.memory_id,
            revision=head.revision + 1,
        )
        state.set_fields(conn, head.memory_id, revision=event.revision, status="active", confirmed_at=now)
        events: list[Event] = [event]
        if head.key is not None and head.kind != "summary":
            rivals = state.live_in_slot(conn, head.subject_id, head.purpose, head.scope, head.key, now)
            rivals = [h for h in rivals if h.memory_id != head.memory_id]
            events += self._supersede_all(conn, rivals, head.memory_id, now, corr, event.event_id)
        return events

    def _supersede_all(
        self,
        conn: psycopg.Connection,
        olds: Sequence[state.MemoryHead],
        by: str,
        now: datetime,
        corr: str,
        causation_id: str,
    ) -> list[Event]:
        events: list[Event] = []
        for old in olds:
            events.append(
                MemorySuperseded(
                    **self._envelope(old.subject_id, now, corr, causation_id=causation_id),
                    memory_id=old.memory_id,
                    revision=old.revision + 1,
                    superseded_by=by,
                )
            )
            state.set_fields(conn, old.memory_id, revision=old.revision + 1, status="superseded", superseded_by=by)
        if olds:
            summaries = self._live_summaries_of(conn, olds[0].subject_id, [o.memory_id for o in olds])
            invalid = {o.memory_id for o in olds}
            events += self._regenerate(conn, summaries, invalid, now, corr, causation_id, supersede=True, successor=by)
        return events

    def _conflict(
        self,
        conn: psycopg.Connection,
        members: Sequence[state.MemoryHead],
        cmd: MemoryWrite,
        now: datetime,
        corr: str,
        causation_id: str,
    ) -> list[Event]:
        """``ConflictDetected`` for ``members``, then summaries that restated one of them
        regenerated from their other sources (a disputed claim is no evidence)."""
        affected = tuple(MemoryRef(memory_id=h.memory_id, revision=h.revision + 1) for h in members)
        for ref in affected:
            state.bump(conn, ref.memory_id, ref.revision, "needs_confirmation")
        ids = [h.memory_id for h in members]
        conflict = ConflictDetected(
            **self._envelope(cmd.subject_id, now, corr, causation_id=causation_id),
            conflict_id="cf-" + new_id(),
            purpose=cmd.purpose,
            scope_type=cmd.scope.type,
            affected=affected,
        )
        summaries = self._live_summaries_of(conn, cmd.subject_id, ids)
        regenerated = self._regenerate(conn, summaries, set(ids), now, corr, conflict.event_id, supersede=True)
        return [conflict, *regenerated]

    # -- retention ------------------------------------------------------------------------

    def _expire(self, conn: psycopg.Connection, subject_id: str, now: datetime) -> list[Event]:
        due = state.heads_where(
            conn, subject_id, "status = ANY(%s) AND expires_at <= %s", (list(state.HOLDING_STATUSES), now)
        )
        ids = [h.memory_id for h in due]
        summaries = self._live_summaries_of(conn, subject_id, ids)
        heads = [*due, *(s for s in summaries if s.memory_id not in ids)]
        if not heads:
            return []
        affected = tuple(MemoryRef(memory_id=h.memory_id, revision=h.revision + 1) for h in heads)
        for ref in affected:
            state.bump(conn, ref.memory_id, ref.revision, "expired")
        self._destroy_keys(conn, [h.memory_id for h in heads], now)
        corr = new_id()
        event = RetentionExpired(**self._envelope(subject_id, now, corr), affected=affected, reason="expires_at")
        invalid = {h.memory_id for h in heads}
        cascaded = [s for s in summaries if s.memory_id not in ids]
        return [event, *self._regenerate(conn, cascaded, invalid, now, corr, event.event_id)]

    def _end_grace(self, conn: psycopg.Connection, subject_id: str, now: datetime) -> list[Event]:
        revoked = state.heads_where(conn, subject_id, "status = 'revoked' AND keys_destroyed_at IS NULL", ())
        due = [
            h
            for h in revoked
            if h.revoked_at is None or h.revoked_at + self.policy.of(h.sensitivity).consent_grace <= now
        ]
        if not due:
            return []
        affected = tuple(MemoryRef(memory_id=h.memory_id, revision=h.revision + 1) for h in due)
        for ref in affected:
            state.bump(conn, ref.memory_id, ref.revision)
        self._destroy_keys(conn, [h.memory_id for h in due], now)
        return [
            RetentionExpired(**self._envelope(subject_id, now, new_id()), affected=affected, reason="consent_grace")
        ]

    def _vacuum_keys(self) -> None:
        """After a command that destroyed keys committed: rewrite the key store (``VACUUM
        FULL``: the destroyed keys' old row versions leave its files) and vacuum the head
        table (``ledger.pgschema.vacuum``)."""
        vacuum(self._pool, ("memory_keys",), full=True)
        vacuum(self._pool, ("ledger_memories",))

    def _destroy_keys(self, conn: psycopg.Connection, memory_ids: Sequence[str], now: datetime) -> None:
        if memory_ids:
            self._keyring.destroy(conn, list(memory_ids))
            state.mark_keys_destroyed(conn, memory_ids, now)

    # -- summaries ------------------------------------------------------------------------

    def _live_summaries_of(
        self, conn: psycopg.Connection, subject_id: str, memory_ids: Sequence[str]
    ) -> list[state.MemoryHead]:
        if not memory_ids:
            return []
        return state.heads_where(
            conn,
            subject_id,
            "kind = 'summary' AND status = ANY(%s) AND derived_from && %s::text[]",
            (list(state.ACTIVE_STATUSES), list(memory_ids)),
        )

    def _regenerate(
        self,
        conn: psycopg.Connection,
        summaries: Sequence[state.MemoryHead],
        invalid: set[str],
        now: datetime,
        corr: str,
        causation_id: str,
        supersede: bool = False,
        successor: str | None = None,
    ) -> list[Event]:
        """New summaries for ``summaries`` from their sources that are still active and
        readable (not in ``invalid``); with ``supersede`` the old summary is superseded
        by the new one (the caller has invalidated it otherwise), or by ``successor``
        when no source is left. A summary past its own expiry is not regenerated."""
        events: list[Event] = []
        for old in summaries:
            if old.kind != "summary" or (old.expires_at is not None and old.expires_at <= now):
                continue
            sources = [m for m in old.derived_from if m not in invalid]
            heads = state.lock_heads(conn, sources)
            texts: list[str] = []
            kept: list[str] = []
            for m in sources:
                head = heads.get(m)
                if head is None or head.status != "active" or head.sealed_content is None:
                    continue
                text = self._keyring.open(conn, head.sealed_content)
                if text is not None:
                    texts.append(text)
                    kept.append(m)
            if not texts:
                if supersede and successor is not None:  # nothing left to summarise: the successor replaces it
                    events += self._supersede_all(conn, [old], successor, now, corr, causation_id)
                continue
            cmd = MemoryWrite(
                subject_id=old.subject_id,
                kind="summary",
                content=self._summariser.summarise(texts),
                purpose=old.purpose,
                scope=old.scope,
                provenance=Provenance(
                    writer=SUMMARISER_WRITER, written_at=now, consent_ref=old.consent_ref, derived_from=tuple(kept)
                ),
                key=old.key,
                sensitivity=old.sensitivity,  # type: ignore[arg-type]
                retention=Retention(basis=old.retention_basis, expires_at=old.expires_at),  # type: ignore[arg-type]
                confirmed=True,
                confidence=old.confidence,
                veracity=old.veracity,  # type: ignore[arg-type]
            )
            new_id_ = new_id()
            events.append(self._written(conn, cmd, new_id_, now, corr, replaces=old.memory_id, cause=causation_id))
            if supersede:
                events += self._supersede_all(conn, [old], new_id_, now, corr, causation_id)
        return events

    # -- helpers ------------------------------------------------------------------------

    def _seal_personal(
        self, conn: psycopg.Connection, subject_id: str, key_id: str, personal: PersonalFields
    ) -> SealedText:
        """``personal`` as JSON, sealed under the data key ``key_id`` (the memory's)."""
        return self._keyring.seal(conn, subject_id, key_id, personal.model_dump_json(), PERSONAL_CONTEXT)

    def _statement_hmac(self, text: str) -> str:
        return self._keyring.fingerprint("statement\x00" + normalise_statement(text))

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
        replaces: str | None = None,
        cause: str | None = None,
        screening: Screening | None = None,
    ) -> MemoryWritten | SummaryDerived:
        # an inference enters unconfirmed; one that arrives confirmed is confirmed by its own
        # MemoryConfirmed next (`_record`), so the log says when and on which write it was
        inference = cmd.kind == "inference"
        status = "needs_confirmation" if inference else "active"
        sealed = self._keyring.seal(conn, cmd.subject_id, memory_id, cmd.content)
        personal = PersonalFields.of(cmd.key, cmd.scope, cmd.provenance)
        body = MemoryBody(
            kind=cmd.kind,
            content=sealed,
            personal=self._seal_personal(conn, cmd.subject_id, memory_id, personal),
            purpose=cmd.purpose,
            scope_type=cmd.scope.type,
            provenance=ClearProvenance.of(cmd.provenance),
            sensitivity=cmd.sensitivity,
            retention=cmd.retention,
            confirmed=cmd.confirmed and not inference,
            confidence=cmd.confidence if cmd.confidence is not None else VERACITY_CONFIDENCE[cmd.veracity],
            veracity=cmd.veracity,
            content_hmac=self._keyring.fingerprint(cmd.content),
            screening=screening,
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
            sensitivity=cmd.sensitivity,
            retention_basis=cmd.retention.basis,
            confidence=body.confidence,
            veracity=cmd.veracity,
            statement_hmac=None if cmd.kind == "summary" else self._statement_hmac(cmd.content),
            sealed_content=sealed,
            confirmed_at=now if body.confirmed else None,
        )
        envelope = self._envelope(cmd.subject_id, now, correlation_id, causation_id=cause)
        if cmd.kind == "summary":
            return SummaryDerived(**envelope, memory_id=memory_id, memory=body, replaces=replaces)
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
        if head is None or head.subject_id != subject_id:  # another subject's memory is not revealed
            raise UnknownMemoryError(memory_id, field_name)
        if not allow_inactive and head.status not in state.ACTIVE_STATUSES:
            raise InvalidCommandError(field_name, f"memory {memory_id!r} is {head.status}")
        if not allow_inactive and head.expires_at is not None and head.expires_at <= self._clock():
            raise InvalidCommandError(field_name, f"memory {memory_id!r} expired at {head.expires_at.isoformat()}")
        return head

    def _publish_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        """Publish to the tombstone topic before the erasure's event is appended, so that
        no projection can read ``ErasureRequested`` (or replay past it) while the topic
        still lacks one of its memories. Raises ``EventLogError`` (the erasure then rolls
        back: keys, table rows and request are not written)."""
        if self._tombstone_log is not None and tombstones:
            self._tombstone_log.publish(tombstones)

    def _append(self, events: Sequence[Event]) -> list[LogPosition]:
        if not events:  # every write of the batch was a retry
            return []
        return self._log.append_batch([(e.subject_id, encode_event(e)) for e in events])
