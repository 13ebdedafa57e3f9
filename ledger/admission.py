"""Admission rules of a write that depend on the ledger's state (the stateless ones are
in ``contracts`` and ``ledger.policy``): withdrawn consent, and what a derived memory
(an inference or a summary) may be made from.

A derived memory restates its sources, so it may not widen their use (purpose
limitation and storage limitation, GDPR art. 5(1)(b) and (e)): it keeps their purpose,
stays within their scope, is at least as sensitive as the most sensitive of them, and
is made only from sources that are usable now.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from contracts import MemoryWrite
from ledger import state
from ledger.errors import InvalidCommandError, UnknownMemoryError

SENSITIVITY_ORDER = ("public", "internal", "personal", "restricted")
"""Sensitivity classes from least to most sensitive."""


def admit(conn: psycopg.Connection, cmd: MemoryWrite, now: datetime) -> None:
    """Check ``cmd`` against the subject's withdrawn consents and, for a derived memory,
    against its sources (locked). ``now`` is UTC.

    Raises:
        InvalidCommandError: ``provenance.consent_ref`` withdrawn; ``purpose`` withdrawn
            and no consent reference given; a source not usable (``provenance.derived_from``:
            erased, revoked, superseded, expired, or awaiting confirmation for a summary);
            ``purpose``, ``scope`` or ``sensitivity`` looser than a source's.
        UnknownMemoryError: a source unknown or of another subject.
    """
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
