"""The reference fold: what each event does to each store, as a deliberately simple model.

This module is the specification of the projections. It folds events, in log order, into
the rows every store should hold, in plain Python: dictionaries, no database, no index,
and no code shared with the stores' apply paths (``projections.facts``, ``vectors``,
``summaries``, ``cache``). Property tests deliver the same events to the real stores,
duplicated and with older events after newer ones, and compare; ``memledger verify``
compares a live projection with it. A bug in a store's own code then shows as a
difference instead of being folded the same way twice.

Sealed fields are read through a :class:`~projections.reference.readable.Readable`
(today's keys and tombstones), so the fold is what a replay from offset 0 builds.

**The revision rule (invariant 2).** Every event names the memories it changes and the
revision each one reaches (``contracts.touched_memories``). Each store keeps a *mark* per
memory: the last revision it applied and the memory's status then (no content). A change
to a memory applies only if its revision is newer than the memory's mark; an event that
is newer for none of its memories changes nothing at all (no row, no history, no
conflict, no invalidation). An erasure is the exception: its removals always apply
(removing cannot bring anything back), and it marks its memories ``erased``. A
whole-subject erasure (``request_kind`` ``subject``) at the first position its request
is read also removes every row, point and summary of its subject held then, named in
the event or not (the ledger's heads may not know every memory); read again at a later
offset it removes only the memories it names.

**Status after an event** (the mark's status): ``MemoryWritten`` ``active``, or
``needs_confirmation`` for an inference not confirmed; ``SummaryDerived`` ``active``;
``MemorySuperseded`` ``superseded``; ``MemoryConfirmed`` ``active``;
``ConflictDetected`` ``needs_confirmation``; ``MemoryReinstated``
``needs_confirmation``; ``ConsentRevoked`` ``revoked``;
``RetentionExpired`` ``expired`` (``revoked`` for reason ``consent_grace``);
``ErasureRequested`` ``erased``; ``MemoryRedacted`` the status its ``state`` records
(the memory's when it was redacted; as it was when it records none);
``MemoryReinforced`` leaves it.

**A memory is readable** when it is not tombstoned and the sealed text of its last write
or redaction opens; its personal fields (key, scope id, references) are read only then.

What each event does (for each memory of the event that passes the revision rule):

- facts (``facts_vN``, one row per memory, not for summaries):
  ``MemoryWritten`` creates the row unless the memory is tombstoned: the text when
  readable (else ``content`` NULL), ``content_hmac`` from the event, key and scope id
  from the personal fields (NULL when unreadable), provenance = the clear provenance
  plus the references present, ``written_at`` from the provenance, ``updated_at`` from
  the event. Every later change sets ``revision`` and ``updated_at``:
  ``MemoryRedacted`` (not tombstoned) sets ``content`` (the new text, NULL when
  unreadable) and ``content_hmac``, and, when the new personal fields open, key, scope
  id and the references; ``MemoryReinforced`` sets ``confidence``;
  ``MemorySuperseded`` the status and ``superseded_by``; ``MemoryConfirmed`` the status
  and ``confirmed``; ``ConflictDetected`` the status; ``MemoryReinstated`` (not
  tombstoned) the status, ``superseded_by`` NULL and ``confirmed`` false (the row kept
  its text while superseded; the event's text is not read here); ``ConsentRevoked`` and
  ``RetentionExpired`` the status and drop content, key, scope id and the references;
  ``ErasureRequested`` deletes the row.
- history (``facts_history_vN``, one row per memory and revision, every kind): event
  type and id, status after it (NULL when it leaves the status), producer, time, log
  position, and ``content_hmac``: the event's fingerprint for ``MemoryWritten`` and
  ``MemoryRedacted`` of a memory not tombstoned, else NULL. ``ErasureRequested`` clears
  ``content_hmac`` in every row of its memories.
- conflicts (``facts_conflicts_vN``): ``ConflictDetected`` adds one row (its id,
  purpose, scope type, member ids in event order, time, event id); never changed after.
- vectors (one point per usable memory, never a summary): ``MemoryWritten`` of a
  readable memory makes a point (payload: ids, subject, purpose, scope type and id,
  ``scope_key``, kind, status, revision, ``expires_at`` in epoch seconds, the embedding
  model, ``derived_from``, ``content_hmac``; the vector embeds the text).
  ``MemoryRedacted`` of a readable memory whose status is ``active`` or
  ``needs_confirmation`` (re)makes the point from the new text and fingerprint (scope id
  from the new personal fields). ``MemoryConfirmed`` and ``ConflictDetected`` set a
  point's status and revision, ``MemoryReinforced`` its revision. ``MemoryReinstated``
  of a readable memory that is not a summary makes the point again (its replacement's
  supersession deleted it; a claim reinstated because its rival was erased has its point
  made anew) from the state, text, fingerprint and personal fields the event carries. ``MemorySuperseded``,
  ``ConsentRevoked``, ``RetentionExpired`` and ``ErasureRequested`` delete it.
- summaries (one row per stored summary): ``SummaryDerived`` stores the summary when
  neither it nor any of its sources is tombstoned and its text and personal fields open
  (the row: ids, text, fingerprint, purpose, scope, ``derived_from``, provenance, times,
  key, class, confidence, veracity, confirmed); with ``replaces`` it deletes the summary
  it regenerates. ``MemorySuperseded``, ``MemoryRedacted``, ``ConsentRevoked``,
  ``RetentionExpired`` and ``ErasureRequested`` of a memory delete that memory's summary
  row and every summary derived from it; ``MemoryReinstated`` brings none back.
- cache: recall results are not folded from events; the store keeps the marks. An event
  newer than a mark of the subject deletes every result of the subject; an erasure
  delivered again deletes the results holding one of its memories, and only those; a
  result holding a memory at a revision older than its mark is never stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contracts import (
    ClearProvenance,
    ConflictDetected,
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryBody,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemoryReinforced,
    MemoryReinstated,
    MemorySuperseded,
    MemoryWritten,
    PersonalFields,
    RetentionExpired,
    SummaryDerived,
    touched_memories,
)
from ledger.eventlog import LogPosition
from projections.reference.readable import Readable

Row = dict[str, Any]
"""One expected row: column -> value, as a Postgres row reads back in Python (datetimes
aware, arrays as lists, jsonb as dicts)."""

REFERENCES = ("turn_id", "tool_call_id", "consent_ref", "source_ref")
"""The provenance references among the personal fields."""

USABLE = ("active", "needs_confirmation")
"""Statuses whose memories have a vector point."""


@dataclass(frozen=True)
class Mark:
    """A store's marker for one memory: the last revision applied and the status then
    (``None`` when no event so far said it). No content."""

    subject_id: str
    revision: int
    status: str | None


@dataclass(frozen=True)
class ExpectedPoint:
    """A vector point the reference expects: its payload without ``model`` (the store's
    embedder names it) and the text its vector embeds."""

    payload: dict[str, Any]
    text: str


@dataclass
class _Memory:
    """What the fold remembers of a written memory for later events: its clear body and
    its scope id (when its personal fields opened)."""

    subject_id: str
    body: MemoryBody
    scope_id: str | None


class ReferenceFold:
    """Folds events, in log order, into the rows each store should hold (see the module
    docstring for the rules). Apply with :meth:`apply`; read the expected state from the
    attributes:

    Attributes:
        facts: memory_id -> facts row (every column of ``facts_vN`` but ``tsv``).
        history: (memory_id, revision) -> history row.
        conflicts: conflict_id -> conflicts row.
        summaries: memory_id -> summaries row (every column but ``tsv``).
        points: memory_id -> expected vector point.
        marks: memory_id -> the mark every store keeps.
    """

    def __init__(self, readable: Readable) -> None:
        self.readable = readable
        self.facts: dict[str, Row] = {}
        self.history: dict[tuple[str, int], Row] = {}
        self.conflicts: dict[str, Row] = {}
        self.summaries: dict[str, Row] = {}
        self.points: dict[str, ExpectedPoint] = {}
        self.marks: dict[str, Mark] = {}
        self._memories: dict[str, _Memory] = {}
        self._subject_erasures: dict[str, LogPosition] = {}

    def fold(self, items: Iterable[tuple[Event, LogPosition]]) -> ReferenceFold:
        """Apply every (event, position) in order; returns ``self``."""
        for event, position in items:
            self.apply(event, position)
        return self

    def apply(self, event: Event, position: LogPosition) -> None:
        """Apply one event read at ``position`` (the revision rule decides what changes)."""
        refs = touched_memories(event)
        fresh = [r for r in refs if r.revision > self._revision(r.memory_id)]
        if isinstance(event, ErasureRequested):
            self._erased(event, refs, fresh, position)
            return
        if not fresh:
            return
        statuses = {r.memory_id: self._status_after(event, r.memory_id) for r in fresh}
        if isinstance(event, MemoryWritten):
            self._written(event, position)
        elif isinstance(event, SummaryDerived):
            self._summary(event, position)
        elif isinstance(event, MemoryRedacted):
            self._redacted(event, position)
        elif isinstance(event, MemoryReinstated):
            self._reinstated(event, position)
        else:
            self._changed(event, fresh, position)
        for r in fresh:
            self.marks[r.memory_id] = Mark(event.subject_id, r.revision, statuses[r.memory_id])

    # -- the rules ----------------------------------------------------------------------

    def _revision(self, memory_id: str) -> int:
        mark = self.marks.get(memory_id)
        return 0 if mark is None else mark.revision

    def _status_after(self, event: Event, memory_id: str) -> str | None:
        if isinstance(event, MemoryWritten):
            unconfirmed = event.memory.kind == "inference" and not event.memory.confirmed
            return "needs_confirmation" if unconfirmed else "active"
        if isinstance(event, SummaryDerived | MemoryConfirmed):
            return "active"
        if isinstance(event, MemorySuperseded):
            return "superseded"
        if isinstance(event, ConflictDetected | MemoryReinstated):
            return "needs_confirmation"
        if isinstance(event, ConsentRevoked):
            return "revoked"
        if isinstance(event, ErasureRequested):
            return "erased"
        if isinstance(event, RetentionExpired):
            return "revoked" if event.reason == "consent_grace" else "expired"
        if isinstance(event, MemoryRedacted) and event.state is not None:
            return event.state.status  # the memory's status when it was redacted
        previous = self.marks.get(memory_id)  # reinforced: as it was
        return None if previous is None else previous.status

    def _tombstoned(self, *memory_ids: str) -> bool:
        return any(m in self.readable.tombstoned for m in memory_ids)

    def _written(self, e: MemoryWritten, position: LogPosition) -> None:
        m = e.memory
        gone = self._tombstoned(e.memory_id)
        text = None if gone else self.readable.text(m.content)
        personal = None if text is None else self.readable.fields(m.personal)
        status = "needs_confirmation" if m.kind == "inference" and not m.confirmed else "active"
        self._memories[e.memory_id] = _Memory(e.subject_id, m, None if personal is None else personal.scope_id)
        self._history(e, position, e.memory_id, e.revision, None if gone else m.content_hmac)
        if gone:
            return
        self.facts.setdefault(
            e.memory_id,
            {
                "memory_id": e.memory_id,
                "subject_id": e.subject_id,
                "revision": e.revision,
                "status": status,
                "kind": m.kind,
                "content": text,
                "content_hmac": m.content_hmac,
                "key": None if personal is None else personal.key,
                "purpose": m.purpose,
                "scope_type": m.scope_type,
                "scope_id": None if personal is None else personal.scope_id,
                "sensitivity": m.sensitivity,
                "retention_basis": m.retention.basis,
                "expires_at": m.retention.expires_at,
                "confirmed": m.confirmed,
                "confidence": m.confidence,
                "veracity": m.veracity,
                "provenance": provenance(m.provenance, personal),
                "derived_from": list(m.provenance.derived_from),
                "superseded_by": None,
                "written_at": m.provenance.written_at,
                "updated_at": e.occurred_at,
            },
        )
        if text is not None and personal is not None and m.kind != "summary":
            self.points[e.memory_id] = self._point(e.memory_id, e.revision, status, m.content_hmac, text)

    def _summary(self, e: SummaryDerived, position: LogPosition) -> None:
        m = e.memory
        self._history(e, position, e.memory_id, e.revision, None)
        if not self._tombstoned(e.memory_id, *m.provenance.derived_from):
            text = self.readable.text(m.content)
            personal = None if text is None else self.readable.fields(m.personal)
            if text is not None and personal is not None:
                self.summaries.setdefault(e.memory_id, _summary_row(e, text, personal))
        if e.replaces is not None:
            self.summaries.pop(e.replaces, None)

    def _redacted(self, e: MemoryRedacted, position: LogPosition) -> None:
        gone = self._tombstoned(e.memory_id)
        text = None if gone else self.readable.text(e.content)
        personal = None if text is None else self.readable.fields(e.personal)
        self._history(e, position, e.memory_id, e.revision, None if gone else e.content_hmac)
        row = None if gone else self.facts.get(e.memory_id)
        if row is not None:
            row.update(content=text, content_hmac=e.content_hmac, revision=e.revision, updated_at=e.occurred_at)
            if personal is not None:
                row.update(key=personal.key, scope_id=personal.scope_id)
                row["provenance"] = row["provenance"] | {k: v for k, v in personal.references().items() if v}
        memory = self._memories.get(e.memory_id)
        if memory is not None and personal is not None:
            memory.scope_id = personal.scope_id
        status = self._status_after(e, e.memory_id)
        kind = memory.body.kind if memory is not None else None if e.state is None else e.state.kind
        if text is not None and personal is not None and kind not in (None, "summary") and status in USABLE:
            assert status is not None
            self.points[e.memory_id] = self._point(e.memory_id, e.revision, status, e.content_hmac, text, e)
        self._invalidate([e.memory_id])

    def _reinstated(self, e: MemoryReinstated, position: LogPosition) -> None:
        self._history(e, position, e.memory_id, e.revision, None, status_changed=True)
        if self._tombstoned(e.memory_id):
            return
        row = self.facts.get(e.memory_id)
        if row is not None:
            row.update(
                status="needs_confirmation",
                superseded_by=None,
                confirmed=False,
                revision=e.revision,
                updated_at=e.occurred_at,
            )
        text = self.readable.text(e.content)
        personal = None if text is None else self.readable.fields(e.personal)
        if text is not None and personal is not None and e.state.kind != "summary":
            self.points[e.memory_id] = self._point(
                e.memory_id, e.revision, "needs_confirmation", e.content_hmac, text, e
            )

    def _changed(self, e: Event, fresh: Sequence[MemoryRef], position: LogPosition) -> None:
        """Every event but writes, redactions and erasures: status, confidence, points."""
        drop_content = isinstance(e, ConsentRevoked | RetentionExpired)
        for ref in fresh:
            status = self._status_after(e, ref.memory_id)
            self._history(e, position, ref.memory_id, ref.revision, None, not isinstance(e, MemoryReinforced))
            row = self.facts.get(ref.memory_id)
            if row is not None:
                row.update(revision=ref.revision, updated_at=e.occurred_at)
                if isinstance(e, MemoryReinforced):
                    row["confidence"] = e.confidence
                else:
                    row["status"] = status
                if isinstance(e, MemorySuperseded):
                    row["superseded_by"] = e.superseded_by
                if isinstance(e, MemoryConfirmed):
                    row["confirmed"] = True
                if drop_content:
                    row.update(content=None, key=None, scope_id=None)
                    row["provenance"] = {k: v for k, v in row["provenance"].items() if k not in REFERENCES}
            point = self.points.get(ref.memory_id)
            if point is None:
                continue
            if isinstance(e, MemorySuperseded | ConsentRevoked | RetentionExpired):
                del self.points[ref.memory_id]
            elif isinstance(e, MemoryConfirmed | ConflictDetected | MemoryReinforced):
                changes: dict[str, Any] = {"revision": ref.revision}
                if not isinstance(e, MemoryReinforced):
                    changes["status"] = status
                self.points[ref.memory_id] = ExpectedPoint(point.payload | changes, point.text)
        if isinstance(e, ConflictDetected):
            self.conflicts.setdefault(
                e.conflict_id,
                {
                    "conflict_id": e.conflict_id,
                    "subject_id": e.subject_id,
                    "purpose": e.purpose,
                    "scope_type": e.scope_type,
                    "memory_ids": [r.memory_id for r in e.affected],
                    "detected_at": e.occurred_at,
                    "event_id": e.event_id,
                },
            )
        if isinstance(e, MemorySuperseded | ConsentRevoked | RetentionExpired):
            self._invalidate([r.memory_id for r in fresh])

    def _erased(
        self, e: ErasureRequested, refs: Sequence[MemoryRef], fresh: Sequence[MemoryRef], position: LogPosition
    ) -> None:
        ids = {r.memory_id for r in refs}
        if e.request_kind == "subject" and self._subject_erasures.setdefault(e.request_id, position) == position:
            held = [*self.facts.values(), *self.summaries.values(), *(p.payload for p in self.points.values())]
            ids |= {str(row["memory_id"]) for row in held if row["subject_id"] == e.subject_id}
            ids |= {m for (m, _), row in self.history.items() if row["subject_id"] == e.subject_id}
        for memory_id in ids:
            self.facts.pop(memory_id, None)
            self.points.pop(memory_id, None)
        for (memory_id, _), row in self.history.items():
            if memory_id in ids:
                row["content_hmac"] = None
        for ref in fresh:
            self._history(e, position, ref.memory_id, ref.revision, None, status_changed=True)
            self.marks[ref.memory_id] = Mark(e.subject_id, ref.revision, "erased")
        self._invalidate(sorted(ids))

    def _invalidate(self, memory_ids: Sequence[str]) -> None:
        """Delete the summaries among ``memory_ids`` and every summary derived from one."""
        gone = set(memory_ids)
        for summary_id in [s for s, row in self.summaries.items() if s in gone or gone & set(row["derived_from"])]:
            del self.summaries[summary_id]

    def _history(
        self,
        e: Event,
        position: LogPosition,
        memory_id: str,
        revision: int,
        content_hmac: str | None,
        status_changed: bool = False,
    ) -> None:
        self.history.setdefault(
            (memory_id, revision),
            {
                "memory_id": memory_id,
                "revision": revision,
                "subject_id": e.subject_id,
                "event_type": e.type,
                "event_id": e.event_id,
                "status": self._status_after(e, memory_id) if status_changed else None,
                "producer": e.producer,
                "occurred_at": e.occurred_at,
                "content_hmac": content_hmac,
                "log_partition": position.partition,
                "log_offset": position.offset,
            },
        )

    def _point(
        self,
        memory_id: str,
        revision: int,
        status: str,
        content_hmac: str | None,
        text: str,
        carrier: MemoryRedacted | MemoryReinstated | None = None,
    ) -> ExpectedPoint:
        memory = self._memories.get(memory_id)
        if memory is not None and not isinstance(carrier, MemoryReinstated):
            kind, purpose, scope_type = memory.body.kind, memory.body.purpose, memory.body.scope_type
            expires_at, derived_from = memory.body.retention.expires_at, memory.body.provenance.derived_from
            subject_id, scope_id = memory.subject_id, memory.scope_id
        else:  # a reinstatement, or a redaction whose write is not in the folded part of the log: its own state
            assert carrier is not None and carrier.state is not None
            state = carrier.state
            kind, purpose, scope_type = state.kind, state.purpose, state.scope_type
            expires_at, derived_from = state.expires_at, state.derived_from
            fields = self.readable.fields(carrier.personal)
            subject_id, scope_id = carrier.subject_id, None if fields is None else fields.scope_id
        return ExpectedPoint(
            {
                "memory_id": memory_id,
                "subject_id": subject_id,
                "purpose": purpose,
                "scope_type": scope_type,
                "scope_id": scope_id,
                "scope_key": f"{scope_type}:{scope_id}",
                "kind": kind,
                "status": status,
                "revision": revision,
                "expires_at": epoch_s(expires_at),
                "derived_from": list(derived_from),
                "content_hmac": content_hmac,
            },
            text,
        )


def provenance(clear: ClearProvenance, personal: PersonalFields | None) -> dict[str, Any]:
    """A memory's provenance as the stores keep it (JSON): the clear part, plus the
    references of ``personal`` that are present."""
    out: dict[str, Any] = json.loads(clear.model_dump_json())
    if personal is not None:
        out.update({k: getattr(personal, k) for k in REFERENCES if getattr(personal, k) is not None})
    return out


def epoch_s(moment: datetime | None) -> float | None:
    """Seconds since the Unix epoch of an aware datetime (UTC), or ``None``."""
    return None if moment is None else moment.timestamp()


def _summary_row(e: SummaryDerived, text: str, personal: PersonalFields) -> Row:
    m = e.memory
    return {
        "memory_id": e.memory_id,
        "subject_id": e.subject_id,
        "revision": e.revision,
        "content": text,
        "content_hmac": m.content_hmac,
        "purpose": m.purpose,
        "scope_type": m.scope_type,
        "scope_id": personal.scope_id,
        "derived_from": list(m.provenance.derived_from),
        "provenance": provenance(m.provenance, personal),
        "written_at": m.provenance.written_at,
        "expires_at": m.retention.expires_at,
        "key": personal.key,
        "sensitivity": m.sensitivity,
        "confidence": m.confidence,
        "veracity": m.veracity,
        "confirmed": m.confirmed,
    }
