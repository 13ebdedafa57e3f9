"""The ``Ledger``: validates commands, authorises the principal, seals content, assigns
ids and revisions, and appends events. A command returns only once the log has its
events (the ``EventLog`` adapter's durability guarantee).

Each command is one PostgreSQL transaction over the ledger's own tables (``ledger.state``,
``ledger.crypto``), run by ``Ledger._execute``: the command's rules (its ``decide``
function) read and lock the heads and decide its events; the events are then staged in
the same transaction (``ledger.appending``: appended to the embedded log table, or
written to the outbox that is relayed to Kafka), the transaction commits, and only then
are outbox events published. So the log and the ledger's state never disagree: after
any failure the command either happened everywhere (once the relay has published it) or
nowhere, and the error says which, and so does the log (logging):

- ``NotWrittenError``: nothing was recorded (the transaction failed or rolled back);
- ``AcknowledgementLostError``: recorded, and the relay publishes it (the log did not
  acknowledge in time, or the connection was lost after the commit);
- ``OutcomeUnknownError``: the connection was lost during the commit and PostgreSQL could
  not be asked afterwards whether it took place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
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
    Scope,
    Screening,
    SealedText,
    SummaryDerived,
    encode_event,
    touched_memories,
    utc_now,
)
from ledger import admission, appending, commits, dead_letters, erasure, outbox, state, supersession, write_behind
from ledger.crypto import Keyring
from ledger.errors import (
    AcknowledgementLostError,
    EventLogError,
    InvalidCommandError,
    NotWrittenError,
    OutcomeUnknownError,
    UnknownMemoryError,
    in_batch,
)
from ledger.eventlog import MAX_EVENT_BYTES, EventLog, LogPosition
from ledger.pgschema import vacuum
from ledger.policy import RetentionPolicy, load_policy, normalise_statement, reinforce
from ledger.principals import Principal
from ledger.retry import retry_aborted
from ledger.screening import (
    AdmittedWrite,
    ScreeningPolicy,
    admit_write,
    erasure_labels,
    load_screening_policy,
    redaction_labels,
    revocation_labels,
    screen_redaction,
)
from ledger.summariser import ExtractiveSummariser, Summariser
from ledger.tombstone_log import Tombstone, TombstoneLog

if TYPE_CHECKING:
    from ledger.detectors import Screener

log = logging.getLogger(__name__)

SUMMARISER_WRITER = "memledger.summariser"
"""``provenance.writer`` of summaries the ledger regenerates."""


REFS_PER_SWEEP_EVENT = 5_000
"""Memories one ``RetentionExpired`` of a sweep lists at most (about 330 KB, under
``MAX_EVENT_BYTES``): a sweep that expires more at once appends several, so it is never
refused for its size."""


def _parts(refs: tuple[MemoryRef, ...]) -> list[tuple[MemoryRef, ...]]:
    """``refs`` in consecutive parts of ``REFS_PER_SWEEP_EVENT`` at most."""
    return [refs[i : i + REFS_PER_SWEEP_EVENT] for i in range(0, len(refs), REFS_PER_SWEEP_EVENT)]


def _check_sizes(command: str, events: Sequence[Event], encoded: Sequence[bytes]) -> None:
    """Refuse a command one of whose events is over ``MAX_EVENT_BYTES`` once encoded (an
    erasure or revocation of very many memories: each adds about 66 bytes to the list of
    the memories it affects).

    Raises:
        InvalidCommandError: field ``affected`` (the memories the command names or finds).
    """
    for event, value in zip(events, encoded, strict=True):
        if len(value) > MAX_EVENT_BYTES:
            count = len(touched_memories(event))
            raise InvalidCommandError(
                "affected",
                f"{command} would append one {event.type} of {len(value):,} bytes listing {count:,} memories,"
                f" over the log's limit of {MAX_EVENT_BYTES:,} bytes per event (about"
                f" {MAX_EVENT_BYTES * count // len(value):,} such memories): name fewer at once (by id, or by"
                " source), in several commands",
            )


INTERRUPTED = {
    "before": "{command}: not written (interrupted before its commit): nothing was recorded; running it again is safe",
    "during": "{command}: outcome unknown (interrupted during its commit): it may be recorded; look (memledger"
    " memories SUBJECT, or trace REQUEST) before running it again",
    "after": "{command}: written (interrupted after its commit): it stands, and its events reach the log (the"
    " outbox relay publishes what was not acknowledged); do not run it again",
}
"""What a command interrupted (SIGINT, SIGTERM: ``KeyboardInterrupt``) at each point did: a
note on the interruption (``BaseException.add_note``) and a line of ``interruptions``."""

interruptions: list[str] = []
"""This process's notes of interrupted commands, in order, for a console entry point to
print once the interruption has unwound (the CLI's framework swallows the exception)."""

committed: list[str] = []
"""The commands this process committed, in order (their names): with ``interruptions``,
what an interrupted console process may say it wrote."""


def _note_interruption(exc: BaseException, command: str, when: str) -> None:
    """Note on ``exc``, when it is an interruption, whether ``command`` was written."""
    if isinstance(exc, KeyboardInterrupt):
        note = INTERRUPTED[when].format(command=command)
        exc.add_note(note)
        interruptions.append(note)


def _reason(exc: BaseException) -> str:
    """One line saying what failed (the first line of a driver's message)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def new_id() -> str:
    """A new UUIDv7 as a string (time-ordered, RFC 9562)."""
    return str(uuid7())


def _retried(first: admission.FirstAttempt, command: str) -> CommandResult:
    """The result of a retried ``command`` (a write or a supersession): nothing appended,
    the first attempt's memory and events."""
    return CommandResult((), (), first.memory_id, repeat=first.describe(command), first_event_ids=first.event_ids)


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


@dataclass
class _Decision:
    """What a command's rules decided, in its transaction: its events in log order, the
    tombstone records to publish before them, and what it produced. No events: the
    command changes nothing (``repeat`` says why, when it repeats one already done) and
    ``Ledger._execute`` rolls its transaction back."""

    events: list[Event]
    tombstones: list[Tombstone] = field(default_factory=list)
    memory_id: str | None = None
    request_id: str | None = None
    affected: tuple[str, ...] = ()
    repeat: str | None = None
    reinstated: tuple[str, ...] = ()
    earlier_versions: tuple[str, ...] = ()
    rivals_reinstated: tuple[str, ...] = ()


@dataclass(frozen=True)
class _BatchHints:
    """Two reads for a whole batch of writes instead of two per write: the statement
    fingerprints live memories of the batch's subjects make (``state.live_statements``;
    the batch adds its own as it goes) and the subjects that ever withdrew a consent. A
    write whose statement is not among the first cannot repeat a live memory, and a
    write of a subject not among the second cannot meet a withdrawn consent, so the
    per-write reads are skipped for them; the rules themselves are unchanged."""

    statements: set[str]
    revoking: set[str]

    @classmethod
    def read(
        cls, conn: psycopg.Connection, cmds: Sequence[MemoryWrite], fingerprint: Callable[[str], str]
    ) -> _BatchHints:
        subjects = sorted({c.subject_id for c in cmds})
        hmacs = sorted({fingerprint(c.content) for c in cmds if c.kind != "summary"})
        return cls(state.live_statements(conn, subjects, hmacs), state.subjects_with_revocations(conn, subjects))


def _slots(cmds: Iterable[MemoryWrite]) -> list[tuple[str, str, Scope, str]]:
    """The slots (subject, purpose, scope, key) whose live memories ``cmds`` read to
    decide: those of every keyed write but a summary's (``state.lock_slots``)."""
    return [(c.subject_id, c.purpose, c.scope, c.key) for c in cmds if c.key is not None and c.kind != "summary"]


@dataclass(frozen=True)
class LiveMemory:
    """A live memory as the ledger holds it: its head and its text."""

    head: state.MemoryHead
    content: str


@dataclass(frozen=True)
class CommandResult:
    """What an accepted command produced: its events and where the log put them.

    ``repeat`` says why a repeated command changed nothing (no events: a retried write,
    a confirmation of a confirmed memory, a withdrawal already made; see
    ``ledger.admission``); for a retried write ``memory_id`` and ``first_event_ids`` are
    those of its first attempt. ``reinstated`` and ``earlier_versions`` (an erasure) are
    the earlier versions made ``needs_confirmation`` again and those that still hold
    content, ``rivals_reinstated`` the claims left alone in their slot by the erasure of
    their rival, reinstated ``needs_confirmation`` (``ledger.supersession``)."""

    events: tuple[Event, ...]
    positions: tuple[LogPosition, ...]
    memory_id: str | None = None
    request_id: str | None = None
    affected: tuple[str, ...] = field(default_factory=tuple)
    repeat: str | None = None
    first_event_ids: tuple[str, ...] = ()
    reinstated: tuple[str, ...] = ()
    earlier_versions: tuple[str, ...] = ()
    rivals_reinstated: tuple[str, ...] = ()

    @property
    def screening(self) -> Screening | None:
        """What screening decided for the text the command recorded: that of the written
        event of ``memory_id`` (a write or supersession), or of the redaction; ``None``
        for other commands, a restatement, a retry, or an event written unscreened."""
        for e in self.events:
            if isinstance(e, MemoryWritten | SummaryDerived) and e.memory_id == self.memory_id:
                return e.memory.screening
            if isinstance(e, MemoryRedacted):
                return e.screening
        return None


@dataclass(frozen=True)
class _Recorded:
    """One write as ``_record_once`` ended it."""

    memory_id: str
    events: list[Event]
    first: admission.FirstAttempt | None = None
    command: str = "write"  # what a retry repeated, in its message


class Ledger:
    """The write side. ``producer`` is recorded in every envelope; ``clock`` returns UTC
    now; ``policy`` is the retention policy per sensitivity class (default: the
    checked-in ``ledger/retention.toml``); ``summariser`` regenerates summaries whose
    sources were invalidated (default: extractive, no model); ``tombstone_log``, when
    given (the distributed mode), receives one record per erased memory besides the
    ``tombstones`` table (``ledger.tombstone_log``), through the outbox.
    ``relay_interval_s``: seconds between the outbox relay's passes in this process
    (``None``: only the pass at start); not used when the log is the ledger's own
    PostgreSQL table (``ledger.appending``). ``observe_appended``: called with the types
    of a command's events once that table has them committed (a wrapper of a log outside
    PostgreSQL sees the outbox relay's appends instead). ``screening`` is the screening
    policy of memory text (default: the checked-in ``ledger/screening.toml``). Call
    ``close`` to stop the relay."""

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
        relay_interval_s: float | None = 1.0,
        observe_appended: appending.Observer | None = None,
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
        self._statements: dict[str, str] = {}
        self._screening = screening or load_screening_policy()
        self._screener: Screener | None = None
        with pool.connection() as conn:
            state.install(conn)
            Keyring.install(conn)
            erasure.install(conn)
            dead_letters.install(conn)
            commits.install(conn)
            outbox.install(conn)
            keyring.attach(conn)  # the fingerprint key survives master key rotations
            supersession.backfill_links(conn, log)
            commits.prune(conn)
            conn.commit()
        self._sink = appending.sink_for(pool, log, tombstone_log, relay_interval_s, observe_appended)

    def close(self) -> None:
        """Stop this process's outbox relay (what it has not published stays in the outbox
        for the next ledger process to publish)."""
        self._sink.close()

    def relay_pending(self) -> int:
        """Publish now what the outbox holds for subjects no command is publishing (a
        failed or crashed command's events); returns how many events were published.

        Raises:
            EventLogError, psycopg.Error: the log or PostgreSQL failed; what was not
                acknowledged stays in the outbox.
        """
        if isinstance(self._sink, appending.OutboxSink):
            return self._sink.relay.drain()
        return 0

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

    def write(
        self,
        principal: Principal,
        cmd: MemoryWrite,
        correlation_id: str | None = None,
        *,
        supersede_key: bool = False,
    ) -> CommandResult:
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

        ``supersede_key`` makes the write an explicit replacement of its slot, as
        ``supersede`` is of one memory: the live memories of the slot, whatever their
        source, are superseded by the new one, and the same statement again is a new
        memory that supersedes the old one, not a reinforcement (a key-value store's put:
        the value and its retention are the ones given). It needs a ``key``. A retry of
        such a write (same turn or tool call id and fields) is a repeat as above.

        Raises:
            NotAuthorisedError: no ``write`` grant for ``cmd.subject_id``.
            SecretFoundError: the text holds a secret the screening policy refuses
                (field ``content``, the kind named); nothing was written.
            LabelRefusedError: a label (``purpose``, ``key``, ``provenance.agent``, a
                reference) holds a secret, or personal data where the ledger would keep
                it in clear or as a key (``ledger.screening.label_refusal``); nothing
                was written.
            InvalidCommandError: ``supersede_key`` without a ``key``; the retention
                policy of the memory's class refuses it (``retention.expires_at`` not
                in the future or beyond the class maximum, ``provenance.consent_ref``
                missing), or a ``provenance.derived_from`` id unknown for this subject
                or erased.
            NotWrittenError, AcknowledgementLostError, OutcomeUnknownError: PostgreSQL or
                the log failed; see ``Ledger._execute`` for what each means.
        """
        return self.write_many(principal, [cmd], correlation_id, supersede_key=[supersede_key])[0]

    @retry_aborted
    def write_many(
        self,
        principal: Principal,
        cmds: Sequence[MemoryWrite],
        correlation_id: str | None = None,
        *,
        supersede_key: Sequence[bool] = (),
    ) -> list[CommandResult]:
        """Write several memories in one transaction and one log batch (all or none), in
        order; ``supersede_key[i]`` is ``write``'s ``supersede_key`` for ``cmds[i]``
        (default: false for every one). Raises as ``write``; an ``InvalidCommandError``
        for a rule of one command has its ``index`` in ``cmds``."""
        explicit = list(supersede_key) or [False] * len(cmds)
        if len(explicit) != len(cmds):
            raise ValueError("supersede_key: give one flag per command")
        for i, (cmd, replaces) in enumerate(zip(cmds, explicit, strict=True)):
            principal.require("write", cmd.subject_id)
            if replaces and cmd.key is None:
                with in_batch(i):
                    raise InvalidCommandError(
                        "supersede_key", "needs a key: the slot whose live memories it supersedes"
                    )
        now = self._clock()
        corr = correlation_id or new_id()
        recorded: list[_Recorded] = []

        def decide(conn: psycopg.Connection) -> _Decision:
            admitted: list[AdmittedWrite] = []
            for i, cmd in enumerate(cmds):
                with in_batch(i):
                    admitted.append(admit_write(self.policy, self.screener, cmd, now))  # no I/O
            state.lock_subjects_against_erasure(conn, [a.cmd.subject_id for a in admitted])
            state.lock_slots(conn, _slots(a.cmd for a in admitted))
            hints = _BatchHints.read(conn, [a.cmd for a in admitted], self._statement_hmac)
            keys = [
                admission.attempt_fingerprint(
                    self._keyring.fingerprint, a.original, "write supersede_key" if replaces else "write"
                )
                for a, replaces in zip(admitted, explicit, strict=True)
            ]
            attempts = admission.Attempts.lock(conn, keys)
            recorded.clear()
            for i, (a, k, replaces) in enumerate(zip(admitted, keys, explicit, strict=True)):
                with in_batch(i):
                    recorded.append(self._record_once(conn, a, k, attempts, now, corr, hints, explicit=replaces))
            only = recorded[0].memory_id if len(recorded) == 1 else None
            return _Decision([e for r in recorded for e in r.events], memory_id=only)

        _, positions = self._execute("write", decide)
        return _results(recorded, positions)

    def supersede(
        self,
        principal: Principal,
        memory_id: str,
        cmd: MemoryWrite,
        correlation_id: str | None = None,
        *,
        confirmed_if_active: bool = False,
    ) -> CommandResult:
        """Replace memory ``memory_id`` with a new one written from ``cmd`` (and every
        other live memory of the new one's slot: an explicit replacement is never a
        conflict).

        The replacement is screened as ``write`` screens; a retry of a supersession that
        named a turn or tool call id returns its first attempt's result (the old memory is
        superseded by then) and appends nothing. ``confirmed_if_active``: the caller
        leaves ``confirmed`` to the ledger (``cmd.confirmed`` is not read): the
        replacement is confirmed if the old memory is ``active`` when the supersession is
        decided, which is after the retry check, since the first attempt changed that
        state (a retry is the command as the caller gave it).

        Raises:
            UnknownMemoryError: ``memory_id`` is not known.
            InvalidCommandError: the old memory belongs to another subject or was written
                for another purpose or scope, or is not ``active``/``needs_confirmation``;
                or as ``write``.
        """
        return self.supersede_many(
            principal, [(memory_id, cmd)], correlation_id, confirmed_if_active=[confirmed_if_active]
        )[0]

    @retry_aborted
    def supersede_many(
        self,
        principal: Principal,
        replacements: Sequence[tuple[str, MemoryWrite]],
        correlation_id: str | None = None,
        *,
        confirmed_if_active: Sequence[bool] = (),
    ) -> list[CommandResult]:
        """Several supersessions (old memory id, replacement) in one transaction and one
        log batch, all or none, in the order given; e.g. every file of a directory the
        memory tool renames. ``confirmed_if_active[i]`` is ``supersede``'s
        ``confirmed_if_active`` for ``replacements[i]`` (default: false for every one).
        Raises as ``supersede`` (for the first one refused)."""
        inherit = list(confirmed_if_active) or [False] * len(replacements)
        if len(inherit) != len(replacements):
            raise ValueError("confirmed_if_active: give one flag per replacement")
        for _, cmd in replacements:
            principal.require("write", cmd.subject_id)
        now = self._clock()
        corr = correlation_id or new_id()
        recorded: list[_Recorded] = []

        def decide(conn: psycopg.Connection) -> _Decision:
            admitted = [(old, admit_write(self.policy, self.screener, cmd, now)) for old, cmd in replacements]  # no I/O
            state.lock_subjects_against_erasure(conn, [a.cmd.subject_id for _, a in admitted])
            state.lock_slots(conn, _slots(a.cmd for _, a in admitted))
            keys = [
                admission.supersession_fingerprint(self._keyring.fingerprint, a.original, old, left)
                for (old, a), left in zip(admitted, inherit, strict=True)
            ]
            attempts = admission.Attempts.lock(conn, keys)
            recorded[:] = [
                self._replace(conn, old, a, k, attempts, now, corr, confirmed_if_active=left)
                for (old, a), k, left in zip(admitted, keys, inherit, strict=True)
            ]
            only = recorded[0].memory_id if len(recorded) == 1 else None
            return _Decision([e for r in recorded for e in r.events], memory_id=only)

        _, positions = self._execute("supersede", decide)
        return _results(recorded, positions)

    def _replace(
        self,
        conn: psycopg.Connection,
        memory_id: str,
        admitted: AdmittedWrite,
        key: str | None,
        attempts: admission.Attempts,
        now: datetime,
        corr: str,
        *,
        confirmed_if_active: bool = False,
    ) -> _Recorded:
        """One supersession inside the caller's transaction: the new memory's id and the
        events, or nothing when it repeats an attempt already recorded under ``key``
        (the old memory is superseded by then)."""
        cmd = admitted.cmd
        first = attempts.first(key)
        if first is not None:  # a retry: checked before the old memory's state, which the first attempt changed
            return _Recorded(first.memory_id, [], first, "supersession")
        old = self._one_head(conn, memory_id, cmd.subject_id, "memory_id")
        if confirmed_if_active:  # the default of `confirmed`, decided on the state this supersession changes
            cmd = cmd.model_copy(update={"confirmed": old.status == "active"})
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
        new_id_, events = self._record(conn, cmd, now, corr, explicit=True, screening=admitted.screening)
        if not any(isinstance(e, MemorySuperseded) and e.memory_id == memory_id for e in events):
            events += self._supersede_all(conn, [old], new_id_, now, corr, events[0].event_id)
        attempts.remember(conn, key, cmd.subject_id, new_id_, [e.event_id for e in events], now)
        return _Recorded(new_id_, events)

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

    def live(self, principal: Principal, subject_id: str, purpose: str, key_prefix: str) -> list[LiveMemory]:
        """The live memories of ``subject_id`` for ``purpose`` in the subject's own scope
        whose ``key`` starts with ``key_prefix``, with their text, ordered by key then
        memory id: active or awaiting confirmation, not expired at the ledger's now, not
        summaries, their data key not destroyed. The ledger's own state (what its
        commands are checked against), so a command just acknowledged is already here;
        a plain read, as ``head``.

        Raises:
            NotAuthorisedError: no ``read`` grant for the subject.
        """
        principal.require("read", subject_id)
        with self._pool.connection() as conn:
            heads = state.heads_where(
                conn,
                subject_id,
                "status = ANY(%s) AND kind <> 'summary' AND purpose = %s AND scope_type = 'subject'"
                " AND starts_with(key, %s) AND (expires_at IS NULL OR expires_at > %s)",
                (list(state.ACTIVE_STATUSES), purpose, key_prefix, self._clock()),
                lock=False,
            )
            sealed = [(h, h.sealed_content) for h in heads if h.sealed_content is not None]
            keys = self._keyring.load_keys(conn, [s.key_id for _, s in sealed])
        opened = ((h, self._keyring.open_with(keys, s)) for h, s in sealed)
        found = [LiveMemory(h, t) for h, t in opened if t is not None]
        return sorted(found, key=lambda m: (m.head.key or "", m.head.memory_id))

    def from_sources(self, principal: Principal, subject_id: str, source_refs: Sequence[str]) -> list[state.MemoryHead]:
        """The memories of ``subject_id``, not erased, whose ``source_ref`` is one of
        ``source_refs`` (every revision of a document, superseded ones included), ordered
        by memory id; a plain read.

        Raises:
            NotAuthorisedError: no ``read`` grant for the subject.
        """
        principal.require("read", subject_id)
        with self._pool.connection() as conn:
            return state.heads_where(
                conn, subject_id, "status <> 'erased' AND source_ref = ANY(%s)", (list(source_refs),), lock=False
            )

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

        def decide(conn: psycopg.Connection) -> _Decision:
            state.lock_subjects_against_erasure(conn, [subject_id])  # it may regenerate summaries
            seen = state.read_heads(conn, [memory_id]).get(memory_id)  # its slot, locked before its row
            if seen is not None and seen.key is not None and seen.kind != "summary" and seen.status != "erased":
                state.lock_slots(conn, [(seen.subject_id, seen.purpose, seen.scope, seen.key)])
            head = self._one_head(conn, memory_id, subject_id, "memory_id")
            repeat = admission.repeated_confirmation(head)
            if repeat is not None:
                return _Decision([], memory_id=memory_id, repeat=repeat)
            return _Decision(self._confirm(conn, head, now, corr), memory_id=memory_id)

        decision, positions = self._execute("confirm", decide)
        return CommandResult(tuple(decision.events), tuple(positions), memory_id=memory_id, repeat=decision.repeat)

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
            LabelRefusedError: ``purpose`` or ``consent_ref`` breaks the rule of labels
                (``ledger.screening.label_refusal``); nothing is written.
            InvalidCommandError: ``consent_ref`` or ``purpose`` matches nothing (see
                ``admission.admit_revocation``); nothing is written.
        """
        principal.require("write", cmd.subject_id)
        self.screener.screen_labels(revocation_labels(cmd))
        now = self._clock()
        corr = new_id()

        def decide(conn: psycopg.Connection) -> _Decision:
            state.lock_subjects_against_erasure(conn, [cmd.subject_id])  # it regenerates summaries
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
                return _Decision([], repeat=repeat)
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
            return _Decision(events, affected=tuple(r.memory_id for r in affected))

        decision, positions = self._execute("revoke-consent", decide)
        if decision.events:
            self._vacuum_keys()
        return CommandResult(
            tuple(decision.events), tuple(positions), affected=decision.affected, repeat=decision.repeat
        )

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

            def decide(conn: psycopg.Connection, subject_id: str = subject_id) -> _Decision:
                state.lock_subjects_against_erasure(conn, [subject_id])  # it regenerates summaries
                return _Decision(self._expire(conn, subject_id, now) + self._end_grace(conn, subject_id, now))

            decision, positions = self._execute("sweep", decide)
            events = decision.events
            if not events:
                continue
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
            replacement holds personal data above the memory's class; SecretFoundError;
            LabelRefusedError: a name in ``fields`` breaks the rule of labels.
        """
        principal.require("write", subject_id)
        self.screener.screen_labels(redaction_labels(cmd))
        now = self._clock()
        corr = new_id()
        given = cmd.replacement.strip() or "[redacted]"

        def decide(conn: psycopg.Connection) -> _Decision:
            state.lock_subjects_against_erasure(conn, [subject_id])  # it regenerates summaries
            head = self._one_head(conn, cmd.memory_id, subject_id, "memory_id", allow_inactive=True)
            if head.status not in state.HOLDING_STATUSES:
                raise InvalidCommandError("memory_id", f"memory {cmd.memory_id!r} is {head.status}: it holds no text")
            if head.sealed_content is None:  # a summary its regeneration replaced: its keys are destroyed
                rule = f"memory {cmd.memory_id!r} is {head.status} and its keys are destroyed: it holds no text"
                raise InvalidCommandError("memory_id", rule)
            if head.expires_at is not None and head.expires_at <= now:
                raise InvalidCommandError(
                    "memory_id", f"memory {cmd.memory_id!r} expired at {head.expires_at.isoformat()}"
                )
            replacement, screening = screen_redaction(self.screener, given, head.sensitivity)
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
            return _Decision(events, memory_id=cmd.memory_id)

        decision, positions = self._execute("redact", decide)
        self._vacuum_keys()
        return CommandResult(tuple(decision.events), tuple(positions), memory_id=cmd.memory_id)

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
        (``CommandResult.earlier_versions``, ``reinstated``). A live memory erased while
        in conflict leaves its slot's last other claim reinstated (``MemoryReinstated``,
        reason ``rival_erased``; ``CommandResult.rivals_reinstated``, recorded too).

        Raises:
            NotAuthorisedError: no ``erase`` grant for the subject.
            LabelRefusedError: ``reason`` or ``legal_basis`` holds a secret or personal
                data (both are kept in clear with the request); nothing is erased.
            UnknownMemoryError: a listed memory id is not a memory of the subject.
            InvalidCommandError: nothing left to erase (see ``erasure_targets``).
            NotWrittenError, AcknowledgementLostError, OutcomeUnknownError: as every
                command (``Ledger._execute``): nothing was erased, or the erasure is
                recorded (keys destroyed, tombstones and request written) and the relay
                publishes its tombstones and event.
        """
        principal.require("erase", cmd.subject_id)
        self.screener.screen_labels(erasure_labels(cmd))
        now = self._clock()
        corr = correlation_id or new_id()
        request_id = "er-" + new_id()

        def decide(conn: psycopg.Connection) -> _Decision:
            # first: no write of the subject commits unseen between this read and the erasure
            state.lock_subjects_against_erasure(conn, [cmd.subject_id], exclusive=True)
            targets = erasure.erasure_targets(conn, cmd, now)
            heads_by_id = state.lock_heads(conn, targets)
            named = set(cmd.memory_ids)
            # the summaries erased with a source and regenerated without it: active ones only (a
            # superseded one was regenerated already, and its keys are destroyed)
            cascaded = [
                heads_by_id[m] for m in targets if heads_by_id[m].status in state.ACTIVE_STATUSES and m not in named
            ]
            targets = [m for m in targets if heads_by_id[m].status != "erased"]
            affected = tuple(
                MemoryRef(memory_id=m, revision=heads_by_id[m].revision + 1) for m in targets if m in heads_by_id
            )
            hmacs = state.content_hmacs(conn, targets)
            earlier = state.lock_heads(conn, erasure.earlier_versions(conn, cmd.subject_id, targets, now))
            successors = {m: h for m, h in heads_by_id.items() if m in targets}
            reinstated = supersession.reinstatements(successors, list(earlier.values()), now)
            rivals = supersession.rivals_left(successors, erasure.slot_claims(conn, successors.values(), now), now)
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
                    requested_by, reason, legal_basis, requested_at, with_history, reinstated, earlier_versions,
                    rivals_reinstated)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
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
                    [r.head.memory_id for r in rivals],
                ),
            )
            erasure.record_source(conn, request_id, cmd)
            scope = dead_letters.ErasureScope(cmd.subject_id, tuple(targets), cmd.whole_subject, cmd.source_ref)
            dead_letters.purge_postgres_dlq(conn, request_id, scope)  # a Kafka DLQ cannot be edited: trace lists it
            events: list[Event] = [event]
            events += [
                self._reinstate(conn, r.head, now, corr, event.event_id, replacement=r.replacement) for r in reinstated
            ]
            events += [self._reinstate(conn, r.head, now, corr, event.event_id, rival=r.rival) for r in rivals]
            events += self._regenerate(conn, cascaded, set(targets), now, corr, event.event_id)
            tombstones = [Tombstone(m, cmd.subject_id, request_id, now) for m in targets]
            # tombstone records are published before the erasure's event (ledger.outbox)
            published = tombstones if self._tombstone_log is not None else []
            return _Decision(
                events,
                tombstones=published,
                request_id=request_id,
                affected=tuple(targets),
                reinstated=tuple(r.head.memory_id for r in reinstated),
                earlier_versions=tuple(left),
                rivals_reinstated=tuple(r.head.memory_id for r in rivals),
            )

        decision, positions = self._execute("erase", decide)
        self._vacuum_keys()
        return CommandResult(
            tuple(decision.events),
            tuple(positions),
            request_id=request_id,
            affected=decision.affected,
            reinstated=decision.reinstated,
            earlier_versions=decision.earlier_versions,
            rivals_reinstated=decision.rivals_reinstated,
        )

    def _reinstate(
        self,
        conn: psycopg.Connection,
        head: state.MemoryHead,
        now: datetime,
        corr: str,
        cause: str,
        *,
        replacement: str | None = None,
        rival: str | None = None,
    ) -> MemoryReinstated:
        """``MemoryReinstated`` for an earlier version whose ``replacement`` is erased, or
        a claim whose last ``rival`` is erased (give one): it carries the memory's text and
        personal fields sealed under its current key, so a store that dropped it rebuilds
        it from this event."""
        assert head.sealed_content is not None  # only a memory that holds content is reinstated
        personal = state.personal_fields(conn, head.memory_id)
        event = MemoryReinstated(
            **self._envelope(head.subject_id, now, corr, causation_id=cause),
            memory_id=head.memory_id,
            revision=head.revision + 1,
            reason="replacement_erased" if rival is None else "rival_erased",
            replacement=replacement,
            rival=rival,
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

    # -- the transaction around every command ----------------------------------------------

    def _execute(
        self, command: str, decide: Callable[[psycopg.Connection], _Decision]
    ) -> tuple[_Decision, list[LogPosition]]:
        """Run ``decide`` (the command's rules: it reads and locks state, changes it and
        returns the events) in one transaction, stage its events (``ledger.appending``),
        commit, then publish them; returns the decision and the events' log positions. A
        decision without events (a repeat, or nothing due) is rolled back instead: no
        commit marker, nothing staged, no positions.

        Raises:
            LedgerError: ``decide`` refused the command (nothing was written).
            NotWrittenError: PostgreSQL failed before the commit, or the commit did not
                take place (nothing was written anywhere; safe to run again).
            AcknowledgementLostError: committed, but the log did not acknowledge (or the
                connection was lost after the commit): the relay publishes the events.
            OutcomeUnknownError: the connection was lost during the commit and
                PostgreSQL could not be asked whether it took place.
        """
        command_id = new_id()
        with self._pool.connection() as conn:
            try:
                with write_behind.deferring(conn):
                    decision = decide(conn)
                    if not decision.events:
                        self._abandon(conn)  # it changed nothing: nothing to commit
                        return decision, []
                    self._fault(command, "decided", conn)
                    encoded = [encode_event(e) for e in decision.events]
                    _check_sizes(command, decision.events, encoded)
                    staged = self._sink.stage(conn, command_id, command, decision.events, encoded, decision.tombstones)
                self._fault(command, "staged", conn)
            except psycopg.Error as exc:
                self._abandon(conn)
                log.error("%s: not written: %s (nothing was recorded)", command, _reason(exc))
                raise NotWrittenError(command, _reason(exc)) from exc
            except BaseException as exc:
                self._abandon(conn)  # a refusal, or an interruption: rolled back, nothing written
                _note_interruption(exc, command, "before")
                raise
            try:
                conn.commit()
            except psycopg.Error as exc:
                self._abandon(conn)
                return decision, self._after_lost_commit(command, command_id, decision, staged, exc)
            except BaseException as exc:
                self._abandon(conn)
                _note_interruption(exc, command, "during")
                raise
            committed.append(command)
            try:
                self._fault(command, "committed", conn)
                positions = self._sink.settle(conn, staged)
            except KeyboardInterrupt as exc:
                _note_interruption(exc, command, "after")
                raise
            except EventLogError as exc:
                self._abandon(conn)
                raise self._acknowledgement_lost(command, decision, _reason(exc)) from exc
            except psycopg.Error as exc:  # the connection failed after the commit: publish on a new one
                self._abandon(conn)
                recovered = self._sink.recover(staged)
                if recovered is None:
                    raise self._acknowledgement_lost(command, decision, _reason(exc)) from exc
                positions = recovered
        return decision, positions

    def _after_lost_commit(
        self, command: str, command_id: str, decision: _Decision, staged: appending.Staged, exc: psycopg.Error
    ) -> list[LogPosition]:
        """The connection failed while committing: ask a new one whether the commit took
        place, and publish if it did."""
        committed = commits.was_committed(self._pool, command_id)
        if committed is False:
            log.error("%s: not written: the commit failed: %s (nothing was recorded)", command, _reason(exc))
            raise NotWrittenError(command, f"the commit failed: {_reason(exc)}") from exc
        if committed is None:
            event_ids = tuple(e.event_id for e in decision.events)
            log.error("%s: outcome unknown (command %s): %s", command, command_id, _reason(exc))
            raise OutcomeUnknownError(command, _reason(exc), command_id, event_ids) from exc
        positions = self._sink.recover(staged)
        if positions is None:
            raise self._acknowledgement_lost(command, decision, f"connection lost after the commit: {_reason(exc)}")
        return positions

    def _acknowledgement_lost(self, command: str, decision: _Decision, reason: str) -> AcknowledgementLostError:
        event_ids = tuple(e.event_id for e in decision.events)
        log.warning(
            "%s: written, acknowledgement lost (%s): events %s are in the outbox or already published;"
            " the relay publishes what remains",
            command,
            reason,
            ", ".join(event_ids),
        )
        event_types = tuple(e.type for e in decision.events)
        return AcknowledgementLostError(
            command,
            reason,
            event_ids,
            decision.memory_id,
            decision.request_id,
            event_types=event_types,
            affected=decision.affected,
            reinstated=decision.reinstated,
            earlier_versions=decision.earlier_versions,
            rivals_reinstated=decision.rivals_reinstated,
        )

    def _abandon(self, conn: psycopg.Connection) -> None:
        """Roll back (a lost connection is discarded by the pool) and release the sink's locks."""
        try:
            conn.rollback()
        except psycopg.Error:
            pass
        self._sink.abandon(conn)

    def _fault(self, command: str, step: str, conn: psycopg.Connection) -> None:
        """A point between two steps of a command on ``conn`` (``decided``: the rules ran;
        ``staged``: the events are in the transaction, before the commit; ``committed``:
        before they are published). Does nothing: fault-injection tests replace it to
        fail there."""

    # -- the rules of a slot ------------------------------------------------------------

    def _record_once(
        self,
        conn: psycopg.Connection,
        admitted: AdmittedWrite,
        key: str | None,
        attempts: admission.Attempts,
        now: datetime,
        corr: str,
        hints: _BatchHints,
        *,
        explicit: bool = False,
    ) -> _Recorded:
        """``_record`` of an admitted write (``explicit``: a replacement of its slot), unless
        it repeats an attempt already recorded under ``key`` (the same turn or tool call and
        fields, ``ledger.admission``): then nothing."""
        first = attempts.first(key)
        if first is not None:
            return _Recorded(first.memory_id, [], first)
        memory_id, events = self._record(
            conn, admitted.cmd, now, corr, explicit=explicit, hints=hints, screening=admitted.screening
        )
        attempts.remember(conn, key, admitted.cmd.subject_id, memory_id, [e.event_id for e in events], now)
        return _Recorded(memory_id, events)

    def _record(
        self,
        conn: psycopg.Connection,
        cmd: MemoryWrite,
        now: datetime,
        corr: str,
        explicit: bool = False,
        hints: _BatchHints | None = None,
        screening: Screening | None = None,
    ) -> tuple[str, list[Event]]:
        """Apply the slot rules to one (screened, policy-checked) write; returns the
        memory id the write ended in and its events, in log order. ``hints`` (a batch's)
        only skip reads that cannot find anything; ``screening`` is recorded on a new
        memory's event."""
        if cmd.kind == "summary" and cmd.key is not None:
            raise InvalidCommandError("key", "a summary has no key: it restates its sources, it is no slot's answer")
        admission.admit(conn, cmd, now, withdrawn_possible=hints is None or cmd.subject_id in hints.revoking)
        statement = self._statement_hmac(cmd.content)
        seen = hints is None or statement in hints.statements
        if hints is not None and cmd.kind != "summary":
            hints.statements.add(statement)  # the memory written below makes it from now on
        if cmd.kind != "summary" and not explicit and seen:
            same = state.find_statement(
                conn,
                cmd.subject_id,
                cmd.purpose,
                cmd.scope,
                cmd.key,
                statement,
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
        expired: list[Event] = [
            RetentionExpired(**self._envelope(subject_id, now, corr), affected=part, reason="expires_at")
            for part in _parts(affected)
        ]
        invalid = {h.memory_id for h in heads}
        cascaded = [s for s in summaries if s.memory_id not in ids]
        return [*expired, *self._regenerate(conn, cascaded, invalid, now, corr, expired[0].event_id)]

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
        corr = new_id()
        return [
            RetentionExpired(**self._envelope(subject_id, now, corr), affected=part, reason="consent_grace")
            for part in _parts(affected)
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
        """The keyed fingerprint of the statement ``text`` makes (``normalise_statement``);
        a batch asks for each text several times, so recent answers are kept."""
        found = self._statements.get(text)
        if found is None:
            if len(self._statements) >= 4096:
                self._statements.clear()
            found = self._statements[text] = self._keyring.fingerprint("statement\x00" + normalise_statement(text))
        return found

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
        sealed = self._keyring.seal(conn, cmd.subject_id, memory_id, cmd.content, fresh=True)  # a new id: a new key
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


def _results(recorded: Sequence[_Recorded], positions: Sequence[LogPosition]) -> list[CommandResult]:
    """One result per recorded write, each with the log positions of its own events
    (``positions`` holds all of them, in the same order); a retried write gets its first
    attempt's result (``_retried``)."""
    results: list[CommandResult] = []
    start = 0
    for r in recorded:
        if r.first is not None:
            results.append(_retried(r.first, r.command))
            continue
        results.append(CommandResult(tuple(r.events), tuple(positions[start : start + len(r.events)]), r.memory_id))
        start += len(r.events)
    return results
