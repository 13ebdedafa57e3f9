"""Admission rules of a write that depend on the ledger's state (the stateless ones are
in ``contracts``, ``ledger.policy`` and ``ledger.screening``): withdrawn consent, and what
a derived memory (an inference or a summary) may be made from; what a withdrawal of
consent must name; and when a command is a repeat that changes nothing.

Repeats (a client that retries after a timeout must not change the ledger twice):

- a write (or supersession) that names a turn id or tool call id, made again with the
  same turn or tool call and the same fields (everything but ``provenance.written_at``;
  the text compared as reinforcement compares it, ``ledger.policy.normalise_statement``), is
  a retry: nothing is appended and the result names the memory the first attempt ended
  in and its events (``Attempts``). The fields are those the caller gave: a default the
  ledger decides from the state (a replacement's ``confirmed``) is compared as left to it,
  since the first attempt changed that state. The same statement from another turn is new
  evidence and reinforces (``ledger.policy.reinforce``); a write naming neither id cannot
  be told from a restatement and reinforces too;
- ``confirm`` of a memory that is ``active`` and already confirmed changes nothing;
- a withdrawal of consent that covers no memory still holding content, for consent
  references and purposes all withdrawn already, changes nothing.

A derived memory restates its sources, so it may not widen their use (purpose
limitation and storage limitation, GDPR art. 5(1)(b) and (e)): it keeps their purpose,
stays within their scope, is at least as sensitive as the most sensitive of them, and
is made only from sources that are usable now.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from contracts import MemoryWrite, RevokeConsent
from contracts.types import with_article
from ledger import state
from ledger.errors import InvalidCommandError, UnknownMemoryError
from ledger.policy import SENSITIVITY_ORDER, normalise_statement


def admit(conn: psycopg.Connection, cmd: MemoryWrite, now: datetime, withdrawn_possible: bool = True) -> None:
    """Check ``cmd`` against the subject's withdrawn consents and, for a derived memory,
    against its sources (locked). ``now`` is UTC. ``withdrawn_possible=False``: the caller
    read that the subject never withdrew a consent (a batch asks once for all its
    subjects), so that check has nothing to find and is skipped.

    Raises:
        InvalidCommandError: ``provenance.consent_ref`` withdrawn; ``purpose`` withdrawn
            and no consent reference given; a source not usable (``provenance.derived_from``:
            erased, revoked, superseded, expired, or awaiting confirmation for a summary);
            ``purpose``, ``scope`` or ``sensitivity`` looser than a source's.
        UnknownMemoryError: a source unknown or of another subject.
    """
    if withdrawn_possible:
        _consent(conn, cmd)
    if not cmd.provenance.derived_from:
        return
    known = state.lock_heads(conn, cmd.provenance.derived_from)
    usable = ("active",) if cmd.kind == "summary" else state.ACTIVE_STATUSES
    for mid in cmd.provenance.derived_from:
        head = known.get(mid)
        if head is None or head.subject_id != cmd.subject_id:
            raise UnknownMemoryError(mid, "provenance.derived_from")
        if head.status not in usable:
            raise InvalidCommandError(
                "provenance.derived_from",
                f"memory {mid!r} is {head.status}: {with_article(cmd.kind)} needs usable sources",
            )
        if head.expires_at is not None and head.expires_at <= now:
            raise InvalidCommandError("provenance.derived_from", f"memory {mid!r} expired at {head.expires_at}")
        if head.purpose != cmd.purpose:
            raise InvalidCommandError(
                "purpose", f"source {mid!r} was written for {head.purpose!r}: what is derived from it keeps its purpose"
            )
        if head.scope.type != "subject" and head.scope != cmd.scope:
            raise InvalidCommandError(
                "scope", f"source {mid!r} is scoped to {head.scope.type}:{head.scope.id}: what is derived stays there"
            )
        if SENSITIVITY_ORDER.index(cmd.sensitivity) < SENSITIVITY_ORDER.index(head.sensitivity):
            raise InvalidCommandError(
                "sensitivity", f"source {mid!r} is {head.sensitivity}: what is derived from it is at least as sensitive"
            )


def purpose_ref(purpose: str) -> str:
    """The name under which a revocation by purpose is recorded among consent references:
    it contains a control character, which no consent reference may (``NonEmptyStr``), so
    the two never collide."""
    return f"\x1fpurpose\x1f{purpose}"


def admit_revocation(conn: psycopg.Connection, cmd: RevokeConsent) -> None:
    """Check that each of ``cmd.consent_ref`` and ``cmd.purpose`` that is given names
    something of the subject: a memory written under it (of any status, derived ones
    included; a memory whose keys were destroyed no longer knows its consent reference,
    only its purpose) or a consent already withdrawn. A withdrawal is permanent, so a
    typo would block future writes; ``cmd.allow_unmatched`` skips the check.

    Raises:
        InvalidCommandError: ``consent_ref`` or ``purpose`` matches nothing.
    """
    if cmd.allow_unmatched:
        return
    given: list[tuple[str, str, str]] = []  # (column and field, value, name among withdrawn consents)
    if cmd.consent_ref is not None:
        given.append(("consent_ref", cmd.consent_ref, cmd.consent_ref))
    if cmd.purpose is not None:
        given.append(("purpose", cmd.purpose, purpose_ref(cmd.purpose)))
    for field, value, withdrawn_as in given:
        row = conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM ledger_memories WHERE subject_id = %s AND {field} = %s)"
            " OR EXISTS (SELECT 1 FROM consent_revocations WHERE subject_id = %s AND consent_ref = %s)",
            (cmd.subject_id, value, cmd.subject_id, withdrawn_as),
        ).fetchone()
        if not (row and row[0]):
            raise InvalidCommandError(
                field,
                f"{value!r} matches no memory of subject {cmd.subject_id!r}; give allow_unmatched"
                " to withdraw consent before anything was written under it",
            )


def _consent(conn: psycopg.Connection, cmd: MemoryWrite) -> None:
    ref = cmd.provenance.consent_ref
    if ref is not None:
        withdrawn = state.revoked_at(conn, cmd.subject_id, ref)
        if withdrawn is not None:
            raise InvalidCommandError(
                "provenance.consent_ref", f"consent {ref!r} was revoked by the subject at {withdrawn.isoformat()}"
            )
        return
    withdrawn = state.revoked_at(conn, cmd.subject_id, purpose_ref(cmd.purpose))
    if withdrawn is not None:
        raise InvalidCommandError(
            "purpose",
            f"the subject withdrew consent for {cmd.purpose!r} at {withdrawn.isoformat()}:"
            " a new memory for it needs a fresh provenance.consent_ref",
        )


# -- repeats ------------------------------------------------------------------------------


def attempt_fingerprint(fingerprint: Callable[[str], str], cmd: MemoryWrite, operation: str) -> str | None:
    """The keyed fingerprint (``Keyring.fingerprint``: HMAC-SHA256, hex) under which an
    attempt of ``cmd`` is remembered: of ``operation`` (``write``, ``write supersede_key``,
    or ``supersede <id>``) and every field of the command as given but
    ``provenance.written_at`` (a client stamps each attempt anew), with ``content`` in
    the form under which two statements are the same
    (``ledger.policy.normalise_statement``, the one reinforcement compares): an attempt
    that differs only in white space, case, Unicode normal form or end punctuation is
    the same attempt, not new evidence. ``None`` when the command names neither a turn
    id nor a tool call id: then a repeat cannot be told from a restatement."""
    if cmd.provenance.turn_id is None and cmd.provenance.tool_call_id is None:
        return None
    fields = cmd.model_dump(mode="json")
    del fields["provenance"]["written_at"]
    fields["content"] = normalise_statement(cmd.content)
    canonical = json.dumps({"operation": operation, "command": fields}, sort_keys=True, separators=(",", ":"))
    return fingerprint("attempt\x00" + canonical)


def supersession_fingerprint(
    fingerprint: Callable[[str], str], cmd: MemoryWrite, memory_id: str, confirmed_if_active: bool
) -> str | None:
    """``attempt_fingerprint`` of the supersession of ``memory_id`` by ``cmd`` as the
    caller gave it: with ``confirmed_if_active`` (``confirmed`` left to the ledger, see
    ``Ledger.supersede``) the default is part of the operation and ``cmd.confirmed`` is
    not, since what the default resolves to depends on the state the first attempt
    changed (the old memory was active, and is superseded at the retry)."""
    if confirmed_if_active:
        given = cmd.model_copy(update={"confirmed": False})
        return attempt_fingerprint(fingerprint, given, f"supersede {memory_id} confirmed if active")
    return attempt_fingerprint(fingerprint, cmd, f"supersede {memory_id}")


@dataclass(frozen=True)
class FirstAttempt:
    """What the first attempt of a write ended in: the memory and the ids of the events
    it appended (none for an attempt that was itself a retry), at ``recorded_at`` (UTC)."""

    memory_id: str
    event_ids: tuple[str, ...]
    recorded_at: datetime

    def describe(self, command: str = "write") -> str:
        """Why nothing was appended, for the result of the retried ``command`` (``write``
        or ``supersession``)."""
        return (
            f"a retry of a {command} recorded at {self.recorded_at.isoformat()} (same turn or tool call and same"
            f" fields): nothing appended, memory {self.memory_id}"
        )


class Attempts:
    """The recorded attempts of one command's writes, read once for the whole command
    (``lock``) and kept up to date as the command records its own, so that the same write
    twice in one batch is a retry too."""

    def __init__(self, recorded: dict[str, FirstAttempt]) -> None:
        self._recorded = recorded

    @classmethod
    def lock(cls, conn: psycopg.Connection, attempt_hmacs: Sequence[str | None]) -> Attempts:
        """Lock the fingerprints given (``None``: a write without turn or tool call id,
        left out) until the transaction ends, and read what is recorded under them
        (``state.lock_attempts``): two attempts in flight at once are serialised, the
        second sees the first once it commits."""
        found = state.lock_attempts(conn, [h for h in attempt_hmacs if h is not None])
        return cls({h: FirstAttempt(m, ids, at) for h, (m, ids, at) in found.items()})

    def first(self, attempt_hmac: str | None) -> FirstAttempt | None:
        """The first attempt recorded under ``attempt_hmac``, or ``None`` (also for ``None``)."""
        return None if attempt_hmac is None else self._recorded.get(attempt_hmac)

    def remember(
        self,
        conn: psycopg.Connection,
        attempt_hmac: str | None,
        subject_id: str,
        memory_id: str,
        event_ids: Sequence[str],
        now: datetime,
    ) -> None:
        """Remember the first attempt of a write (``state.record_attempt``, in the
        command's transaction); nothing for ``None``."""
        if attempt_hmac is None:
            return
        state.record_attempt(conn, attempt_hmac, subject_id, memory_id, event_ids, now)
        self._recorded[attempt_hmac] = FirstAttempt(memory_id, tuple(event_ids), now)


def repeated_confirmation(head: state.MemoryHead) -> str | None:
    """Why confirming ``head`` changes nothing (it is ``active`` and already confirmed),
    or ``None`` when it must be confirmed."""
    if head.status == "active" and head.confirmed_at is not None:
        return f"memory {head.memory_id} is already active, confirmed at {head.confirmed_at.isoformat()}"
    return None


def repeated_revocation(
    conn: psycopg.Connection, cmd: RevokeConsent, covered: Sequence[state.MemoryHead]
) -> str | None:
    """Why the withdrawal ``cmd`` changes nothing (it covers no memory that still holds
    content, ``covered``, and each consent reference or purpose it names was withdrawn
    already), or ``None``."""
    if covered:
        return None
    given = [r for r in (cmd.consent_ref, None if cmd.purpose is None else purpose_ref(cmd.purpose)) if r]
    withdrawn = [state.revoked_at(conn, cmd.subject_id, ref) for ref in given]
    if not all(withdrawn):
        return None
    first = min(w for w in withdrawn if w is not None)
    return f"consent already withdrawn at {first.isoformat()}: no memory of {cmd.subject_id!r} is covered any more"
