"""The vectors projection: one point per live memory in a vector index (Qdrant), with
the payload recall filters on (subject, purpose, scope, status, kind, expires_at),
its revision and the embedding model that made the vector.

Writes are idempotent and revision-guarded: a point is (re)written only when the event's
revision is newer than the point's; the position is stored after the index write.
A memory that stops being usable (superseded, revoked, expired, erased) loses its point;
one in a detected conflict keeps it with status ``needs_confirmation`` (so recall's status
filter leaves it out unless unconfirmed memories are asked for), and a reinforcement only
bumps its revision. A memory reinstated after its replacement was erased
(``MemoryReinstated``) gets its point back, embedded from the text the event carries.

The collection is ensured when the projection is built or, if the index cannot be
reached then, before the first write: a process can start, and an erasure be issued,
while Qdrant is down; the erasure then waits in the runner's retries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from contracts import (
    ConflictDetected,
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryConfirmed,
    MemoryRedacted,
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
from projections import base
from projections.embedding import Embedder
from projections.vector_index import VectorIndex, VectorIndexUnreachableError, VectorPoint

log = logging.getLogger(__name__)


def scope_key(scope_type: str, scope_id: str) -> str:
    """The payload value that scope filters match: ``"document:D"``, ``"workspace:W"``, ``"subject:S"``."""
    return f"{scope_type}:{scope_id}"


class VectorsProjection(base.PositionedProjection):
    """Vector index of memories (summaries excluded: they live in the summaries store)."""

    name = "vectors"

    def __init__(
        self,
        pool: ConnectionPool,
        index: VectorIndex,
        embedder: Embedder,
        content: base.ContentAccess,
        version: int = 1,
    ) -> None:
        super().__init__(pool, version)
        self._index = index
        self._embedder = embedder
        self._content = content
        self._collection_ready = False
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
            base.clear_positions(conn, self.id)

    def drop(self) -> None:
        """Delete this version's collection and positions (retiring it)."""
        self._index.drop_collection()
        with self._pool.connection() as conn, conn.transaction():
            base.clear_positions(conn, self.id)

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]]) -> None:
        """Apply events in log order, embedding their texts in one batch; then write
        erasure receipts and store the positions (after the index writes)."""
        todo = self.pending(items)
        if todo:
            self.apply_many([e for e, _ in todo])
            self.commit_positions(todo, "vectors", lambda e: len(e.affected))

    def apply_many(self, events: list[Event]) -> None:
        """Apply events to the index without touching positions: write-type events of
        tombstoned memories are dropped first (``base.WRITE_EVENTS``), texts are opened and
        embedded in one batch, current points read once, then writes go in log order.
        The collection is ensured first if the index was down when this was built."""
        self._ensure_collection()
        erased = self._content.erased_among([e.memory_id for e in events if isinstance(e, base.WRITE_EVENTS)])
        events = [e for e in events if not (isinstance(e, base.WRITE_EVENTS) and e.memory_id in erased)]
        writes = [e for e in events if isinstance(e, MemoryWritten | MemoryRedacted | MemoryReinstated)]
        sealed = [
            (w.memory_id, w.memory.content if isinstance(w, MemoryWritten) else w.content, w.occurred_at)
            for w in writes
        ]
        opened = self._content.open_many(sealed)
        texts = {w.event_id: t for w, t in zip(writes, opened, strict=True) if t is not None}
        personal = self._personal([w for w in writes if w.event_id in texts])
        texts = {k: t for k, t in texts.items() if k in personal}
        vectors = dict(zip(texts, self._embedder.embed(list(texts.values())), strict=True))
        ids = list(dict.fromkeys(r.memory_id for e in events for r in touched_memories(e)))
        current = {m: dict(p.payload) for m, p in self._index.retrieve(ids).items()} if ids else {}
        for e in events:
            if isinstance(e, SummaryDerived):
                continue
            if isinstance(e, MemoryWritten | MemoryRedacted | MemoryReinstated):
                if e.event_id in vectors:
                    self._upsert(e, vectors[e.event_id], personal[e.event_id], current)
            elif isinstance(e, MemoryConfirmed):
                self._update(e.memory_id, e.revision, {"status": "active"}, current)
            elif isinstance(e, MemoryReinforced):
                self._update(e.memory_id, e.revision, {}, current, confidence=e.confidence)
            elif isinstance(e, ConflictDetected):
                for ref in e.affected:
                    self._update(ref.memory_id, ref.revision, {"status": "needs_confirmation"}, current)
            elif isinstance(e, MemorySuperseded | ConsentRevoked | RetentionExpired | ErasureRequested):
                gone = [r.memory_id for r in touched_memories(e)]
                if isinstance(e, ErasureRequested) and e.request_kind == "subject":
                    # a whole subject: every point of it, whether or not the ledger's heads knew it
                    gone += [m for m in self._index.scroll_ids(e.subject_id) if m not in gone]
                self._index.delete(gone)
                for m in gone:
                    current.pop(m, None)

    def _personal(
        self, writes: Sequence[MemoryWritten | MemoryRedacted | MemoryReinstated]
    ) -> dict[str, PersonalFields]:
        """The opened personal fields of each write, by event id (writes whose fields
        cannot be opened are left out: they get no point)."""
        if not writes:
            return {}
        out: dict[str, PersonalFields] = {}
        with self._pool.connection() as conn:
            for w in writes:
                sealed = w.memory.personal if isinstance(w, MemoryWritten) else w.personal
                fields = self._content.personal(w.memory_id, sealed, conn)
                if fields is not None:
                    out[w.event_id] = fields
        return out

    def _update(
        self,
        memory_id: str,
        revision: int,
        changes: dict[str, Any],
        current: dict[str, dict[str, Any]],
        confidence: float | None = None,
    ) -> None:
        """Set ``changes`` and ``revision`` on the payload of an existing point whose
        revision is older (``confidence`` too, if the payload holds one); no point, or a
        newer one, changes nothing."""
        payload = current.get(memory_id)
        if payload is None or int(payload.get("revision", 0)) >= revision:
            return
        update = changes | {"revision": revision}
        if confidence is not None and "confidence" in payload:
            update["confidence"] = confidence
        self._index.set_payload(memory_id, update)
        payload.update(update)

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
        """The payload of a point: every field recall filters on, its revision and model."""
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
            "model": self._embedder.model_name,
            "derived_from": list(derived_from),
            "content_hmac": content_hmac,
        }

    def _upsert(
        self,
        e: MemoryWritten | MemoryRedacted | MemoryReinstated,
        vector: list[float],
        personal: PersonalFields,
        current: dict[str, dict[str, Any]],
    ) -> None:
        existing = current.get(e.memory_id)
        if existing is not None and int(existing.get("revision", 0)) >= e.revision:
            return
        if isinstance(e, MemoryReinstated):
            s = e.state
            payload = self._payload(
                e.memory_id,
                e.subject_id,
                e.revision,
                e.content_hmac,
                s.status,
                s.kind,
                s.purpose,
                s.scope_type,
                personal.scope_id,
                s.expires_at,
                s.derived_from,
            )
        elif isinstance(e, MemoryRedacted):
            if existing is not None:
                payload = existing | {"revision": e.revision, "content_hmac": e.content_hmac}
            elif e.state is not None and e.state.status in ("active", "needs_confirmation"):
                # replaying: the original text's key was destroyed by this redaction, so
                # the point is built from the state the event carries
                payload = self._payload(
                    e.memory_id,
                    e.subject_id,
                    e.revision,
                    e.content_hmac,
                    e.state.status,
                    e.state.kind,
                    e.state.purpose,
                    e.state.scope_type,
                    personal.scope_id,
                    e.state.expires_at,
                    e.state.derived_from,
                )
            else:
                return  # no live point to rewrite (not usable any more)
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
        self._index.upsert([VectorPoint(memory_id=e.memory_id, vector=tuple(vector), payload=payload)])
        current[e.memory_id] = payload
