"""A history of every kind of change, made through the ledger (so the events in the log
are the ones production writes): writes, a summary, a supersession, a conflict, a
reinforcement, a confirmation, a consent revocation, a redaction, an erasure, an erasure
of a replacement that reinstates the version it superseded (and, in a chain of three, the
middle version erased first, then the last: the first is reinstated), an erasure with its history,
and a sweep that expires a memory and regenerates the summary derived from it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from contracts import EraseMemories, RedactMemory, RevokeConsent, utc_now
from tests.builders import later, memory_write
from workers.bootstrap import Services


@dataclass(frozen=True)
class History:
    """Memory ids of the history, by what happened to them."""

    active: str
    superseded: str
    successor: str
    conflicting: tuple[str, str]
    revoked: str
    redacted: str
    erased: str
    expired: str
    summary: str
    reinstated: str
    """Superseded, then live again (``needs_confirmation``) when its replacement was erased."""
    with_history: tuple[str, str]
    """An earlier version and its replacement, erased together (``with_history``)."""
    reinstated_through_chain: str
    """The first of ``A <- B <- C``: live again when ``B``, then ``C`` were erased."""


def make_history(svc: Services, subject: str = "alice") -> History:
    """Write the history for ``subject`` through ``svc.ledger`` (nothing is projected here)."""
    p = svc.principal()
    ledger = svc.ledger

    def write(content: str, **fields: object) -> str:
        mid = ledger.write(p, memory_write(subject, content, **fields)).memory_id
        assert mid is not None
        return mid

    active = write("Alice deploys with Kubernetes")
    write("alice deploys with kubernetes.")  # a restatement: reinforcement of `active`
    superseded = write("Alice prefers short answers", key="answer_length")
    successor = write("Alice prefers detailed answers", key="answer_length")

    def doc(content: str, source: str) -> str:
        prov = {"writer": "importer", "written_at": utc_now(), "source_ref": source}
        return write(content, key="employer", veracity="imported", provenance=prov)

    conflicting = (doc("Alice works at Acme", "cv.pdf"), doc("Alice works at Globex", "crm"))
    revoked = write(
        "Alice's phone is 555-0100",
        provenance={"writer": "w", "written_at": utc_now(), "consent_ref": "consent-7"},
    )
    ledger.revoke_consent(p, RevokeConsent(subject_id=subject, consent_ref="consent-7"))
    redacted = write("Alice's badge is 90210 and she sits at 4F")
    ledger.redact(p, subject, RedactMemory(memory_id=redacted, replacement="Alice's badge is [redacted]"))
    erased = write("Alice's home address is 1 Main St")
    ledger.erase(p, EraseMemories(subject_id=subject, memory_ids=(erased,), reason="subject asked"))
    expired = write("Alice is in Lisbon this week", retention={"expires_at": later(2), "basis": "session"})
    summary = write(
        "Alice deploys with Kubernetes and is in Lisbon this week",
        kind="summary",
        provenance={"writer": "summariser", "written_at": utc_now(), "derived_from": [active, expired]},
    )
    reinstated = write("Alice sits at desk 4F", key="desk")
    replacement = write("Alice sits at desk 5B", key="desk")  # a statement: supersedes it
    ledger.erase(p, EraseMemories(subject_id=subject, memory_ids=(replacement,), reason="subject asked"))
    chain = (write("Alice's locker is 12", key="locker"), write("Alice's locker is 31", key="locker"))
    ledger.erase(p, EraseMemories(subject_id=subject, memory_ids=chain[1:], reason="asked", with_history=True))
    bays = [write(f"Alice parks in bay {n}", key="parking") for n in (1, 2, 3)]  # each supersedes the one before
    for bay in bays[1:]:
        ledger.erase(p, EraseMemories(subject_id=subject, memory_ids=(bay,), reason="subject asked"))
    ledger.sweep(p, utc_now() + timedelta(days=3))
    return History(
        active,
        superseded,
        successor,
        conflicting,
        revoked,
        redacted,
        erased,
        expired,
        summary,
        reinstated,
        chain,
        bays[0],
    )
