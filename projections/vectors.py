"""The vectors projection: one point per live memory in a vector index (Qdrant), with
the payload recall filters on (subject, purpose, scope, status, kind, expires_at),
its revision and the embedding model that made the vector.

Writes are idempotent and revision-guarded: a point is (re)written only when the event's
revision is newer than the point's; the position is stored after the index write.
A memory that stops being usable (superseded, revoked, expired, erased) loses its point
(a whole-subject erasure, where it is first applied, removes every point and queued write
of its subject, known to the ledger's heads or not: ``base.whole_subject_erasures``);
one in a detected conflict keeps it with status ``needs_confirmation`` (so recall's status
filter leaves it out unless unconfirmed memories are asked for), and a reinforcement only
bumps its revision. A memory reinstated after its replacement was erased
(``MemoryReinstated``) gets its point back, embedded from the text the event carries; a
claim reinstated because its rival in a conflict was erased gets its point made anew so.

**Two steps: in log order, then embedding.** Applying a batch in log order is fast: it
reads the batch's current points (and queued writes) once, folds the events over them in
memory, then writes the net effect: one ``delete`` and one ``upsert`` call to the index,
the erasure receipts and the positions (in the same PostgreSQL transaction, after the
index writes). A write needs a vector, and embedding is slow (MiniLM: a few hundred texts
a second): with ``defer_embedding`` (the live vectors worker) the write is queued
(``projections.embedding_queue``) in that transaction instead, and ``embed_pending``
computes the vectors apart, so an erasure's receipt never waits behind the embedding
backlog. A queued write becomes a point only if its row is still there with the same
text when its vector is ready; later events of the memory change or delete the row in
log order, exactly as they would change or delete the point. Without
``defer_embedding`` (replays, ``verify``, the embedded mode) the batch's writes are
embedded before the batch commits.

**Reusing vectors.** ``reuse`` is another version's collection built with the same
model: a write whose memory has a point there with the same ``model`` and
``content_hmac`` (the keyed fingerprint of the text: the same text) takes that point's
vector instead of embedding the text again (a replay to a new version with the same
embedder). Texts that do need embedding are embedded in one call per batch, which sorts
them by length (``MiniLMEmbedder``).

The collection is ensured when the projection is built or, if the index cannot be
reached then, before the first write: a process can start, and an erasure be issued,
while Qdrant is down; the erasure then waits in the runner's retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from contracts import (
    ConflictDetected,
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryConfirmed,
    MemoryRedacted,
    MemoryRef,
    MemoryReinforced,
    MemoryReinstated,
    MemorySuperseded,
    MemoryWritten,
    RedactedState,
    RetentionExpired,
    SummaryDerived,
    touched_memories,
)
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema
from projections import base, embedding_queue, marks
from projections.embedding import Embedder
from projections.embedding_queue import PendingRow, PendingText
from projections.opening import Opened, OpenedContent, SealedItem, sealed_events
from projections.vector_index import VectorIndex, VectorIndexError, VectorIndexUnreachableError, VectorPoint

log = logging.getLogger(__name__)

EMBED_BATCH = 256
"""Queued writes ``embed_pending`` takes at a time (texts are sorted by length within it)."""

REUSE_PAUSE_S = 60
"""After ``reuse`` failed to answer, seconds during which texts are embedded without asking it."""

_REMOVING = (MemorySuperseded, ConsentRevoked, RetentionExpired, ErasureRequested)
"""Events after which their memories have no point."""

_POINT_WRITES = (MemoryWritten, MemoryRedacted, MemoryReinstated)
"""Events whose text (re)makes a memory's point."""


def scope_key(scope_type: str, scope_id: str) -> str:
    """The payload value that scope filters match: ``"document:D"``, ``"workspace:W"``, ``"subject:S"``."""
    return f"{scope_type}:{scope_id}"


@dataclass(frozen=True)
class _Slot:
    """What the store holds for one memory while a batch is folded: the payload its
    point carries (``model`` is added when it is written) and either the stored
    ``vector`` or the ``text`` waiting to be embedded."""

    payload: dict[str, Any]
    vector: tuple[float, ...] | None = None
    text: PendingText | None = None

    @property
    def revision(self) -> int:
        return int(self.payload.get("revision", 0))

    @property
    def subject_id(self) -> str | None:
        value = self.payload.get("subject_id")
        return None if value is None else str(value)


class VectorsProjection(base.PositionedProjection):
    """Vector index of memories (summaries excluded: they live in the summaries store)."""

    name = "vectors"
    opens_content = True
    _content: base.ContentAccess

    def __init__(
        self,
        pool: ConnectionPool,
        index: VectorIndex,
        embedder: Embedder,
        content: base.ContentAccess,
        version: int = 1,
        *,
        defer_embedding: bool = False,
        reuse: VectorIndex | None = None,
    ) -> None:
        super().__init__(pool, version)
        self._index = index
        self._embedder = embedder
        self._content = content
        self._reuse = reuse
        self._reuse_paused_until = 0.0
        self.defer_embedding = defer_embedding
        self.queued = threading.Event()
        """Set after a batch that may have queued writes commits (``defer_embedding``)."""
        self.queue = embedding_queue.table_name(version)
        self._collection_ready = False
        with pool.connection() as conn:
            ensure_schema(conn, self.queue, embedding_queue.schema_sql(version))
        try:
            self._ensure_collection()
        except VectorIndexUnreachableError as exc:
            log.warning("%s: %s; the collection is ensured before the first write", self.id, exc)

    def _ensure_collection(self) -> None:
        """Create or check the collection once per instance (until it succeeds).

        Raises:
            VectorIndexUnreachableError: the index is down (the runner retries).
            VectorIndexError: it exists with another dimension, or the engine refused.
        """
        if not self._collection_ready:
            self._index.ensure_collection(self._embedder.dim)
            self._collection_ready = True

    @property
    def index(self) -> VectorIndex:
        return self._index

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def reset(self) -> None:
        self._index.drop_collection()
        self._index.ensure_collection(self._embedder.dim)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(f"TRUNCATE {self.queue}")
            base.clear_positions(conn, self.id)

    def drop(self) -> None:
        """Delete this version's collection, its queue and positions (retiring it)."""
        self._index.drop_collection()
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(f"DROP TABLE IF EXISTS {self.queue}")
            base.clear_positions(conn, self.id)

    # -- in log order -----------------------------------------------------------------------

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]], opened: OpenedContent | None = None) -> None:
        """Apply events in log order (see the module docstring): the index writes, the
        queued writes (``defer_embedding``) or their vectors, the erasure receipts and the
        positions. ``opened``: the batch's content, when a pass opened it for every
        projection. The collection is ensured first if the index was down when this was
        built.

        Raises:
            VectorIndexError, psycopg.Error: a store failed (nothing was committed; the
                runner retries the batch, whose writes are idempotent).
        """
        self._ensure_collection()
        if opened is None:
            opened = self.open_ahead(items, self._content)

        def apply_all(conn: psycopg.Connection, todo: list[tuple[Event, LogPosition]]) -> None:
            self._apply_events(conn, todo, opened)

        base.apply_batch_in_transaction(self._pool, self.id, items, apply_all)
        if self.defer_embedding:
            self.queued.set()  # after the commit: the queue's new rows are visible now

    def _apply_events(
        self,
        conn: psycopg.Connection,
        todo: list[tuple[Event, LogPosition]],
        opened: OpenedContent | None,
    ) -> None:
        book = marks.load_book(conn, self.id, [e for e, _ in todo])
        plan = book.plan(todo)
        writes = [e for e, _, _ in plan if isinstance(e, base.WRITE_EVENTS)]
        erased = self._content.erased_among([e.memory_id for e in writes], conn)
        plan = [(e, p, f) for e, p, f in plan if not (isinstance(e, base.WRITE_EVENTS) and e.memory_id in erased)]
        texts = sealed_events([e for e, _, _ in plan if isinstance(e, _POINT_WRITES)])
        if opened is None or not opened.covers(texts):
            opened = self._content.open_events(texts, conn)
        ids = list(
            dict.fromkeys(
                r.memory_id for e, _, _ in plan if not isinstance(e, SummaryDerived) for r in touched_memories(e)
            )
        )
        whole = base.whole_subject_erasures(conn, "vectors", self.id, [(e, p) for e, p, _ in plan])
        for event, position, _ in plan:
            if position in whole:  # a whole subject: every point and queued write of it, known to the heads or not
                ids += embedding_queue.of_subject(conn, self.version, event.subject_id)
                ids += self._index.scroll_ids(event.subject_id)
        ids = list(dict.fromkeys(ids))
        queued = embedding_queue.lock(conn, self.version, ids)  # before reading points: see embedding_queue
        points = self._index.retrieve(ids) if ids else {}
        slots: dict[str, _Slot | None] = {m: _Slot(dict(p.payload), p.vector) for m, p in points.items()}
        slots.update({m: _Slot(r.payload, None, r.text) for m, r in queued.items()})
        start = dict(slots)
        removed: dict[LogPosition, int] = {}
        for event, position, fresh in plan:
            if position in whole:
                gone = {r.memory_id for r in touched_memories(event)}
                gone |= {m for m, slot in slots.items() if slot is not None and slot.subject_id == event.subject_id}
                slots.update(dict.fromkeys(gone))
                removed[position] = len(gone)
            self._fold(slots, event, position, fresh, opened)
        self._write(conn, start, slots, points, queued, opened)
        marks.save_marks(conn, self.id, book.changed())  # after the index writes, with the positions
        for event, position, _ in plan:
            if isinstance(event, ErasureRequested):
                items = removed.get(position, len(event.affected))
                base.write_receipt(conn, event.request_id, "vectors", self.id, position, items)

    def _fold(
        self,
        slots: dict[str, _Slot | None],
        e: Event,
        position: LogPosition,
        fresh: tuple[MemoryRef, ...],
        opened: OpenedContent,
    ) -> None:
        """What ``e`` does to the slots of the memories it is ``fresh`` for (newer than
        their marks; an erasure removes all of its memories)."""
        if isinstance(e, _POINT_WRITES):
            slot = self._written(slots.get(e.memory_id), e, position, opened.of(e))
            if slot is not None:
                slots[e.memory_id] = slot
        elif isinstance(e, MemoryConfirmed):
            self._update(slots, e.memory_id, e.revision, {"status": "active"})
        elif isinstance(e, MemoryReinforced):
            self._update(slots, e.memory_id, e.revision, {}, confidence=e.confidence)
        elif isinstance(e, ConflictDetected):
            for ref in fresh:
                self._update(slots, ref.memory_id, ref.revision, {"status": "needs_confirmation"})
        elif isinstance(e, _REMOVING):
            for ref in touched_memories(e) if isinstance(e, ErasureRequested) else fresh:
                slots[ref.memory_id] = None

    def _written(
        self,
        existing: _Slot | None,
        e: MemoryWritten | MemoryRedacted | MemoryReinstated,
        position: LogPosition,
        content: Opened,
    ) -> _Slot | None:
        """The slot after a write, redaction or reinstatement whose text and personal
        fields opened (a text that does not open makes no point), or ``None`` when it
        changes nothing. A reinstated memory had lost its point when it was superseded:
        the point is built again from the state and text the event carries."""
        personal = content.personal
        if content.text is None or personal is None:
            return None
        if existing is not None and existing.revision >= e.revision:
            return None
        if isinstance(e, MemoryReinstated):
            if e.state.kind == "summary":
                return None  # a summary lives in the summaries store (and is never reinstated)
            payload = self._payload_of_state(e, e.state, personal.scope_id)
            sealed = e.content
        elif isinstance(e, MemoryRedacted):
            if existing is not None:
                payload = existing.payload | {"revision": e.revision, "content_hmac": e.content_hmac}
            elif (
                e.state is not None and e.state.status in ("active", "needs_confirmation") and e.state.kind != "summary"
            ):
                # replaying: the original text's key was destroyed by this redaction, so
                # the point is built from the state the event carries (a summary has none:
                # it lives in the summaries store)
                payload = self._payload_of_state(e, e.state, personal.scope_id)
            else:
                return None  # no live point to rewrite (not usable any more)
            sealed = e.content
        else:
            m = e.memory
            status = "needs_confirmation" if m.kind == "inference" and not m.confirmed else "active"
            payload = self._payload(
                e.memory_id,
                e.subject_id,
                e.revision,
                m.content_hmac,
                status,
                m.kind,
                m.purpose,
                m.scope_type,
                personal.scope_id,
                m.retention.expires_at,
                m.provenance.derived_from,
            )
            sealed = m.content
        return _Slot(payload, None, PendingText(sealed, e.event_id, e.occurred_at, position))

    @staticmethod
    def _update(
        slots: dict[str, _Slot | None],
        memory_id: str,
        revision: int,
        changes: dict[str, Any],
        confidence: float | None = None,
    ) -> None:
        """Set ``changes`` and ``revision`` on the payload of a memory that has a point
        (or a queued write) of an older revision (``confidence`` too, if the payload holds
        one); none, or a newer one, changes nothing."""
        slot = slots.get(memory_id)
        if slot is None or slot.revision >= revision:
            return
        update = changes | {"revision": revision}
        if confidence is not None and "confidence" in slot.payload:
            update["confidence"] = confidence
        slots[memory_id] = replace(slot, payload=slot.payload | update)

    def _write(
        self,
        conn: psycopg.Connection,
        start: Mapping[str, _Slot | None],
        slots: Mapping[str, _Slot | None],
        points: Mapping[str, VectorPoint],
        queued: Mapping[str, PendingRow],
        opened: OpenedContent,
    ) -> None:
        """Write the net effect of a folded batch: one ``delete`` and one ``upsert`` call
        to the index, and the queue's rows (put and taken off) in ``conn``'s transaction.
        ``opened``: the texts the batch opened already (not opened again to embed)."""
        changed = {m: s for m, s in slots.items() if s is not start.get(m)}
        waiting = {m: s for m, s in slots.items() if s is not None and s.vector is None}
        if not self.defer_embedding:
            vectors = self._vectors_for(conn, waiting, opened)
            for m, s in waiting.items():
                changed[m] = replace(s, vector=vectors[m], text=None) if m in vectors else None
            waiting = {}
        model = {"model": self._embedder.model_name}
        kept = {m: s for m, s in changed.items() if s is not None and m in points and s.vector is points[m].vector}
        upserts = [
            VectorPoint(m, s.vector, s.payload | model)
            for m, s in changed.items()
            if s is not None and s.vector is not None and m not in kept
        ]
        deletes = [m for m, s in changed.items() if m in points and (s is None or s.vector is None)]
        self._index.delete(deletes)
        self._index.upsert(upserts)
        for m, s in kept.items():  # the same vector: only the payload changes (the stored vector is not rewritten)
            old = points[m].payload
            self._index.set_payload(m, {k: v for k, v in (s.payload | model).items() if old.get(k) != v})
        embedding_queue.put(conn, self.version, [_row(m, s) for m, s in waiting.items() if m in changed])
        embedding_queue.remove(conn, self.version, [m for m in queued if m not in waiting])

    # -- embedding ----------------------------------------------------------------------------

    def embed_pending(self, limit: int = EMBED_BATCH, lock: AbstractContextManager[object] | None = None) -> int:
        """Embed up to ``limit`` queued writes (first queued first) and turn each into its
        point, if its row is still queued with the same text (and its memory is not
        tombstoned) when the vector is ready: the rows are locked while the points are
        written and taken off the queue. ``lock``, when given, is held while they are
        written (not while embedding), as the store's other writers hold it. Returns the
        rows taken (0: the queue is empty).

        Raises:
            VectorIndexError, psycopg.Error: a store failed (nothing was taken off the
                queue; call again).
        """
        self._ensure_collection()
        with self._pool.connection() as conn:
            rows = embedding_queue.oldest(conn, self.version, limit)
        if not rows:
            return 0
        rows_by_id = {r.memory_id: r for r in rows}
        slots = {r.memory_id: _Slot(r.payload, None, r.text) for r in rows}
        with self._pool.connection() as conn:
            vectors = self._vectors_for(conn, slots)
        with lock or nullcontext(), self._pool.connection() as conn, conn.transaction():
            now = embedding_queue.lock(conn, self.version, list(slots))
            erased = self._content.erased_among(list(now), conn)
            done = {m: r for m, r in now.items() if r.text.event_id == rows_by_id[m].text.event_id}
            self._index.upsert(
                [
                    VectorPoint(m, vectors[m], r.payload | {"model": self._embedder.model_name})
                    for m, r in done.items()
                    if m in vectors and m not in erased
                ]
            )
            embedding_queue.remove(conn, self.version, list(done))
        return len(rows)

    def _vectors_for(
        self, conn: psycopg.Connection, slots: Mapping[str, _Slot], known: OpenedContent | None = None
    ) -> dict[str, tuple[float, ...]]:
        """The vectors of slots waiting for one: reused from ``reuse`` where it holds the
        same text under the same model, else embedded (one call: sorted by length inside).
        Texts are opened unless ``known`` has them (by write event id); a slot whose text
        does not open (tombstoned, key destroyed) gets none."""
        texts = {m: s.text for m, s in slots.items() if s.text is not None}
        if not texts:
            return {}
        out = self._reused({m: slots[m].payload.get("content_hmac") for m in texts})
        items = [SealedItem(t.event_id, m, t.sealed, None, t.occurred_at) for m, t in texts.items() if m not in out]
        known_refs = {} if known is None else known.by_event
        opened = self._content.open_items([i for i in items if i.ref not in known_refs], conn)
        readable = {
            i.memory_id: text
            for i in items
            if (text := (known_refs[i.ref] if i.ref in known_refs else opened.get(i.ref)).text) is not None
        }
        embedded = self._embedder.embed(list(readable.values()))
        out.update({m: tuple(v) for m, v in zip(readable, embedded, strict=True)})
        return out

    def _reused(self, fingerprints: Mapping[str, object]) -> dict[str, tuple[float, ...]]:
        """Vectors of ``reuse`` for memories whose point there has this model and the
        same fingerprint; an unreachable ``reuse`` reuses nothing."""
        wanted = [m for m, h in fingerprints.items() if h]
        if self._reuse is None or not wanted or time.monotonic() < self._reuse_paused_until:
            return {}
        try:
            found = self._reuse.retrieve(wanted)
        except VectorIndexError as exc:
            log.warning("%s: no vectors reused for %ds (%s): embedding them", self.id, REUSE_PAUSE_S, exc)
            self._reuse_paused_until = time.monotonic() + REUSE_PAUSE_S
            return {}
        model = self._embedder.model_name
        return {
            m: p.vector
            for m, p in found.items()
            if p.payload.get("model") == model and p.payload.get("content_hmac") == fingerprints[m]
        }

    def pending_count(self) -> int:
        """Writes queued for embedding."""
        with self._pool.connection() as conn:
            return embedding_queue.count(conn, self.version)

    def visible_positions(self) -> dict[int, int]:
        """Per partition, the last offset up to which every write has its point: the
        stored position, or just before the oldest write still queued."""
        with self._pool.connection() as conn:
            return visible_positions(conn, self.id, self.version)

    # -- payload ------------------------------------------------------------------------------

    def _payload_of_state(
        self, e: MemoryRedacted | MemoryReinstated, state: RedactedState, scope_id: str
    ) -> dict[str, Any]:
        """The payload of a point built from the state a redaction or reinstatement carries
        (the memory's write may be out of reach: its text's key destroyed, or its point
        deleted when it was superseded); ``scope_id`` from the event's personal fields."""
        return self._payload(
            e.memory_id,
            e.subject_id,
            e.revision,
            e.content_hmac,
            state.status,
            state.kind,
            state.purpose,
            state.scope_type,
            scope_id,
            state.expires_at,
            state.derived_from,
        )

    def _payload(
        self,
        memory_id: str,
        subject_id: str,
        revision: int,
        content_hmac: str | None,
        status: str,
        kind: str,
        purpose: str,
        scope_type: str,
        scope_id: str,
        expires_at: datetime | None,
        derived_from: Sequence[str],
    ) -> dict[str, Any]:
        """The payload of a point: every field recall filters on and its revision (the
        ``model`` is added when the point is written)."""
        return {
            "memory_id": memory_id,
            "subject_id": subject_id,
            "purpose": purpose,
            "scope_type": scope_type,
            "scope_id": scope_id,
            "scope_key": scope_key(scope_type, scope_id),
            "kind": kind,
            "status": status,
            "revision": revision,
            "expires_at": base.epoch_s(expires_at),
            "derived_from": list(derived_from),
            "content_hmac": content_hmac,
        }


def _row(memory_id: str, slot: _Slot) -> PendingRow:
    assert slot.text is not None
    payload = {k: v for k, v in slot.payload.items() if k != "model"}
    return PendingRow(memory_id, str(payload["subject_id"]), slot.revision, payload, slot.text)


def visible_positions(conn: psycopg.Connection, projection_id: str, version: int) -> dict[int, int]:
    """Per partition, the last offset up to which vectors version ``version``
    (``projection_id``) has every write's point: its stored position, lowered to just
    before the oldest write still queued for embedding."""
    done = base.load_positions(conn, projection_id)
    for partition, first in embedding_queue.first_pending(conn, version).items():
        done[partition] = min(done.get(partition, -1), first - 1)
    return done
