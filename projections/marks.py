"""Revision marks: what each store keeps of the last revision it applied to each memory,
and the memory's status then, so that an older event delivered after a newer one (a
duplicate in the log, a redelivery after a crash, a relay that sends again) changes
nothing (DESIGN.md, invariant 2).

A mark holds ids, a revision and a status: no content, no personal field. Marks outlive
the rows they guard: a memory whose point or row was removed (supersession, revocation,
expiry, erasure) keeps its mark, and that is what stops its old ``MemoryWritten`` from
bringing it back. The rule (``projections.reference`` states it for every store): a
change to a memory applies only if the event's revision for it is newer than its mark;
an event newer for none of its memories changes nothing; an erasure's removals always
apply.

Where the marks live: the facts projection's history (one row per memory and revision
it applied) is its mark; the vectors and summaries projections keep theirs in
``revision_marks`` (this module), written in the transaction that stores their positions;
the cache keeps its own in Redis next to its entries (``projections.cache``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg

from contracts import (
    ErasureRequested,
    Event,
    MemoryRedacted,
    MemoryRef,
    MemoryWritten,
    RetentionExpired,
    SummaryDerived,
    touched_memories,
)
from ledger.eventlog import LogPosition

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS revision_marks (
    projection  text NOT NULL,
    memory_id   text NOT NULL,
    subject_id  text NOT NULL,
    revision    integer NOT NULL,
    status      text,
    PRIMARY KEY (projection, memory_id)
);
"""
"""One row per (projection version, memory): the last revision applied and the status."""

_STATUS_BY_EVENT = {
    "MemorySuperseded": "superseded",
    "MemoryConfirmed": "active",
    "ConflictDetected": "needs_confirmation",
    "MemoryReinstated": "needs_confirmation",
    "ConsentRevoked": "revoked",
    "RetentionExpired": "expired",
    "ErasureRequested": "erased",
}


def status_after(event: Event) -> str | None:
    """The status the memories ``event`` touches have after it, or ``None`` when the
    event leaves the status as it is (a reinforcement or redaction) or sets it from its
    content (a write or a summary: see :func:`mark_status`)."""
    if isinstance(event, RetentionExpired) and event.reason == "consent_grace":
        return "revoked"  # the grace for keeping a revoked memory's content ended
    return _STATUS_BY_EVENT.get(event.type)


def mark_status(event: Event, previous: str | None) -> str | None:
    """The status a mark records after ``event``: a write's own (``needs_confirmation``
    for an inference not confirmed, else ``active``; a summary ``active``), the event's
    (:func:`status_after`), for a redaction the status its ``state`` records, or
    ``previous`` when the event leaves it (``None``: not known)."""
    if isinstance(event, SummaryDerived):
        return "active"
    if isinstance(event, MemoryRedacted) and event.state is not None:
        return event.state.status
    if isinstance(event, MemoryWritten):
        body = event.memory
        return "needs_confirmation" if body.kind == "inference" and not body.confirmed else "active"
    return status_after(event) or previous


@dataclass(frozen=True)
class Mark:
    """A store's mark for one memory: the last revision applied, and the status then
    (``None`` when no event so far said it)."""

    subject_id: str
    revision: int
    status: str | None


class MarkBook:
    """The marks one batch reads and advances, in log order: :meth:`fresh` says which of
    an event's memories it changes, :meth:`advance` records them; :meth:`changed` is
    what the batch saves."""

    def __init__(self, marks: Mapping[str, Mark] | None = None) -> None:
        self._marks = dict(marks or {})
        self._changed: dict[str, Mark] = {}

    def get(self, memory_id: str) -> Mark | None:
        return self._marks.get(memory_id)

    def fresh(self, event: Event) -> tuple[MemoryRef, ...]:
        """The (memory, revision) pairs of ``event`` newer than their marks."""
        out = []
        for ref in touched_memories(event):
            mark = self._marks.get(ref.memory_id)
            if mark is None or ref.revision > mark.revision:
                out.append(ref)
        return tuple(out)

    def advance(self, event: Event, refs: Sequence[MemoryRef]) -> None:
        """Record ``event`` as applied to ``refs`` (those :meth:`fresh` returned)."""
        for ref in refs:
            previous = self._marks.get(ref.memory_id)
            mark = Mark(
                event.subject_id, ref.revision, mark_status(event, None if previous is None else previous.status)
            )
            self._marks[ref.memory_id] = self._changed[ref.memory_id] = mark

    def changed(self) -> dict[str, Mark]:
        """The marks advanced since this book was made."""
        return dict(self._changed)

    def plan(
        self, items: Sequence[tuple[Event, LogPosition]]
    ) -> list[tuple[Event, LogPosition, tuple[MemoryRef, ...]]]:
        """What a batch does, in log order: each event that changes something (:func:`applies`)
        with the memories it is newer for (:meth:`fresh`), the marks advanced as it goes;
        an event newer for none of its memories (a duplicate, or older than what is) is
        left out."""
        out: list[tuple[Event, LogPosition, tuple[MemoryRef, ...]]] = []
        for event, position in items:
            fresh = self.fresh(event)
            if applies(event, fresh):
                out.append((event, position, fresh))
                self.advance(event, fresh)
        return out


def applies(event: Event, fresh: Sequence[MemoryRef]) -> bool:
    """Whether ``event`` changes anything: it is newer for one of its memories, or it
    is an erasure (whose removals always apply)."""
    return bool(fresh) or isinstance(event, ErasureRequested)


def load_marks(conn: psycopg.Connection, projection: str, memory_ids: Sequence[str]) -> dict[str, Mark]:
    """The marks of ``projection`` for ``memory_ids`` (memories without one are absent)."""
    if not memory_ids:
        return {}
    rows = conn.execute(
        "SELECT memory_id, subject_id, revision, status FROM revision_marks"
        " WHERE projection = %s AND memory_id = ANY(%s)",
        (projection, list(dict.fromkeys(memory_ids))),
    ).fetchall()
    return {str(m): Mark(str(s), int(r), None if st is None else str(st)) for m, s, r, st in rows}


def load_book(conn: psycopg.Connection, projection: str, events: Sequence[Event]) -> MarkBook:
    """A :class:`MarkBook` holding the marks of every memory ``events`` touch."""
    ids = [r.memory_id for e in events for r in touched_memories(e)]
    return MarkBook(load_marks(conn, projection, ids))


def save_marks(conn: psycopg.Connection, projection: str, marks: Mapping[str, Mark]) -> None:
    """Store ``marks`` for ``projection``; a mark never moves back to an older revision."""
    if not marks:
        return
    rows = [{"m": m, "s": k.subject_id, "r": k.revision, "st": k.status} for m, k in sorted(marks.items())]
    conn.execute(  # one JSON document, not four arrays: psycopg dumps arrays value by value, in Python
        """
        INSERT INTO revision_marks (projection, memory_id, subject_id, revision, status)
        SELECT %s, m, s, r, st FROM jsonb_to_recordset(%s::jsonb) AS u(m text, s text, r int, st text)
        ON CONFLICT (projection, memory_id) DO UPDATE
           SET subject_id = EXCLUDED.subject_id, revision = EXCLUDED.revision, status = EXCLUDED.status
         WHERE revision_marks.revision < EXCLUDED.revision
        """,
        (projection, json.dumps(rows)),
    )


def clear_marks(conn: psycopg.Connection, projection: str) -> None:
    """Forget the marks of ``projection`` (its storage is being rebuilt or dropped)."""
    conn.execute("DELETE FROM revision_marks WHERE projection = %s", (projection,))
