"""Admission rules of a write that depend on the ledger's state (the stateless ones are
in ``contracts`` and ``ledger.policy``): withdrawn consent, and what a derived memory
(an inference or a summary) may be made from; and what a withdrawal of consent must
name.

A derived memory restates its sources, so it may not widen their use (purpose
limitation and storage limitation, GDPR art. 5(1)(b) and (e)): it keeps their purpose,
stays within their scope, is at least as sensitive as the most sensitive of them, and
is made only from sources that are usable now.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from contracts import MemoryWrite, RevokeConsent
from ledger import state
from ledger.errors import InvalidCommandError, UnknownMemoryError

SENSITIVITY_ORDER = ("public", "internal", "personal", "restricted")
"""Sensitivity classes from least to most sensitive."""


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
    article = "an" if cmd.kind[0] in "aeiou" else "a"
    for mid in cmd.provenance.derived_from:
        head = known.get(mid)
        if head is None or head.subject_id != cmd.subject_id:
            raise UnknownMemoryError(mid, "provenance.derived_from")
        if head.status not in usable:
            raise InvalidCommandError(
                "provenance.derived_from", f"memory {mid!r} is {head.status}: {article} {cmd.kind} needs usable sources"
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
                f"{value!r} matches no memory of subject {cmd.subject_id!r}; pass --allow-unmatched"
                " (RevokeConsent.allow_unmatched) to withdraw consent before anything was written under it",
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
