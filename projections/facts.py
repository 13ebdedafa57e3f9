"""The facts projection (Postgres): the current state of every memory, a content-free
history of every revision, the conflicts the ledger detected, and a full-text search
column.

Every event is applied in one transaction together with the projection's position, so
a record is applied exactly once however often it is delivered. Changes are
revision-guarded: an event whose revision is not newer than the row's changes nothing.
Summaries live in the summaries projection, not here.

Text that may no longer be read is not kept: a revoked or expired memory's row keeps its
metadata with ``content`` NULL, exactly as a replay (where the ledger has destroyed its
data key) rebuilds it. Every timestamp written comes from the event, so a rebuild from the
log is equal to the live table row for row (invariant 8).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb
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
    RetentionExpired,
    full_provenance,
    touched_memories,
)
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema
from projections import base

FTS_CONFIG = "english"


@dataclass(frozen=True)
class FactsTables:
    """The table names of facts version ``version``; ``version=None`` names the stable
    views (``facts``, ``facts_history``, ``facts_conflicts``) over the serving version,
    which is what readers use (:mod:`projections.versions`)."""

    version: int | None = 1

    @property
    def _suffix(self) -> str:
        return "" if self.version is None else f"_v{self.version}"

    @property
    def facts(self) -> str:
        """Current state, one row per memory: ``facts_vN``."""
        return f"facts{self._suffix}"

    @property
    def history(self) -> str:
        """Content-free history, one row per (memory, revision): ``facts_history_vN``."""
        return f"facts_history{self._suffix}"

    @property
    def conflicts(self) -> str:
        """One row per ``ConflictDetected``: ``facts_conflicts_vN``."""
        return f"facts_conflicts{self._suffix}"


STABLE = FactsTables(None)
"""The stable views readers go through."""


def schema_sql(version: int) -> str:
    """DDL of facts version ``version``: ``facts_vN``, ``facts_history_vN`` and
    ``facts_conflicts_vN`` (every statement idempotent, so it also completes an older
    schema that lacks the conflicts table)."""
    return f"""
CREATE TABLE IF NOT EXISTS facts_v{version} (
    memory_id        text PRIMARY KEY,
    subject_id       text NOT NULL,
    revision         integer NOT NULL,
    status           text NOT NULL,
    kind             text NOT NULL,
    content          text,
    content_hmac     text,
    key              text,
    purpose          text NOT NULL,
    scope_type       text NOT NULL,
    scope_id         text,
    sensitivity      text NOT NULL,
    retention_basis  text NOT NULL,
    expires_at       timestamptz,
    confirmed        boolean NOT NULL,
    confidence       double precision NOT NULL,
    veracity         text NOT NULL,
    provenance       jsonb NOT NULL,
    derived_from     text[] NOT NULL DEFAULT '{{}}',
    superseded_by    text,
    written_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    tsv              tsvector GENERATED ALWAYS AS (to_tsvector('{FTS_CONFIG}', coalesce(content, ''))) STORED
);
CREATE INDEX IF NOT EXISTS facts_v{version}_subject ON facts_v{version} (subject_id, purpose, status);
CREATE INDEX IF NOT EXISTS facts_v{version}_tsv ON facts_v{version} USING gin (tsv);
CREATE INDEX IF NOT EXISTS facts_v{version}_hmac ON facts_v{version} (content_hmac);
CREATE TABLE IF NOT EXISTS facts_history_v{version} (
    memory_id     text NOT NULL,
    revision      integer NOT NULL,
    subject_id    text NOT NULL,
    event_type    text NOT NULL,
    event_id      text NOT NULL,
    status        text,
    producer      text NOT NULL,
    occurred_at   timestamptz NOT NULL,
    content_hmac  text,
    log_partition integer NOT NULL,
    log_offset    bigint NOT NULL,
    PRIMARY KEY (memory_id, revision)
);
CREATE TABLE IF NOT EXISTS facts_conflicts_v{version} (
    conflict_id   text PRIMARY KEY,
    subject_id    text NOT NULL,
    purpose       text NOT NULL,
    scope_type    text NOT NULL,
    memory_ids    text[] NOT NULL,
    detected_at   timestamptz NOT NULL,
    event_id      text NOT NULL
);
CREATE INDEX IF NOT EXISTS facts_conflicts_v{version}_subject ON facts_conflicts_v{version} (subject_id);
CREATE INDEX IF NOT EXISTS facts_conflicts_v{version}_members ON facts_conflicts_v{version} USING gin (memory_ids);
"""


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
    event leaves the status as it is (a write, reinforcement or redaction)."""
    if isinstance(event, RetentionExpired) and event.reason == "consent_grace":
        return "revoked"  # the grace for keeping a revoked memory's content ended
    return _STATUS_BY_EVENT.get(event.type)


_CONTENT_GONE = (ConsentRevoked, RetentionExpired)
"""Events after which a memory's text and personal fields (key, scope id, provenance
references) must not be readable in facts: a replay cannot read them either once the
data key is destroyed."""

_REFERENCES = ("turn_id", "tool_call_id", "consent_ref", "source_ref")
"""The provenance references among the personal fields (``contracts.PersonalFields``)."""


class FactsProjection(base.TransactionalProjection):
    """Postgres facts table + history. Reads ``facts_v{version}``."""

    name = "facts"

    def __init__(self, pool: ConnectionPool, content: base.ContentAccess, version: int = 1) -> None:
        super().__init__(pool, version)
        self._content = content
        self.tables = FactsTables(version)
        self.table = self.tables.facts
        self.history = self.tables.history
        self.vacuum_tables = (self.table, self.history)
        with pool.connection() as conn:
            ensure_schema(conn, self.tables.conflicts, schema_sql(version))

    def reset(self) -> None:
        """Empty this version's tables and forget its positions, for a rebuild in place
        (the stable views may select from them, so they are truncated, not dropped; a
        schema change goes into a new version)."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(schema_sql(self.version))
            conn.execute(f"TRUNCATE {self.table}, {self.history}, {self.tables.conflicts}")
            base.clear_positions(conn, self.id)

    def drop(self) -> None:
        """Drop this version's tables and positions (retiring it; erasure receipts stay).
        Raises psycopg errors, e.g. while a stable view still selects from them."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(f"DROP TABLE IF EXISTS {self.table}, {self.history}, {self.tables.conflicts}")
            base.clear_positions(conn, self.id)

    def _apply_one(self, conn: psycopg.Connection, event: Event, position: LogPosition) -> None:
        keep_hmac = False
        if isinstance(event, base.WRITE_EVENTS) and self._content.erased_among([event.memory_id], conn):
            pass  # tombstoned: nothing of it is stored, even if its key can still be read; history stays content-free
        elif isinstance(event, MemoryWritten):
            keep_hmac = self._written(conn, event)
        elif isinstance(event, MemoryRedacted):
            keep_hmac = self._redacted(conn, event)
        elif isinstance(event, ErasureRequested):
            self._erased(conn, event, position)
        elif isinstance(event, MemoryReinforced):
            self._reinforced(conn, event)
        elif isinstance(event, MemoryReinstated):
            self._reinstated(conn, event)
        elif isinstance(
            event, MemorySuperseded | MemoryConfirmed | ConflictDetected | ConsentRevoked | RetentionExpired
        ):
            self._status(conn, event)
            if isinstance(event, ConflictDetected):
                self._conflict(conn, event)
        self._history(conn, event, position, keep_hmac)

    # -- per event ----------------------------------------------------------------------

    def _written(self, conn: psycopg.Connection, e: MemoryWritten) -> bool:
        text = self._content.open(e.memory_id, e.memory.content, conn, e.occurred_at)
        if text is None and self._content.is_tombstoned(e.memory_id, conn):
            return False  # erased before we got here: nothing of it may be stored
        # text None and no tombstone: a later redaction, revocation or expiry destroyed this
        # text's key; keep the row without content or personal fields (a MemoryRedacted
        # event further on fills them in)
        personal = None if text is None else self._content.personal(e.memory_id, e.memory.personal, conn)
        m = e.memory
        status = "needs_confirmation" if m.kind == "inference" and not m.confirmed else "active"
        conn.execute(
            f"""
            INSERT INTO {self.table} (memory_id, subject_id, revision, status, kind, content, content_hmac, key,
                purpose, scope_type, scope_id, sensitivity, retention_basis, expires_at, confirmed, confidence,
                veracity, provenance, derived_from, written_at, updated_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (memory_id) DO NOTHING
            """,
            (
                e.memory_id,
                e.subject_id,
                e.revision,
                status,
                m.kind,
                text,
                m.content_hmac,
                None if personal is None else personal.key,
                m.purpose,
                m.scope_type,
                None if personal is None else personal.scope_id,
                m.sensitivity,
                m.retention.basis,
                m.retention.expires_at,
                m.confirmed,
                m.confidence,
                m.veracity,
                Jsonb(full_provenance(m.provenance, personal)),
                list(m.provenance.derived_from),
                m.provenance.written_at,
                e.occurred_at,
            ),
        )
        return True

    def _redacted(self, conn: psycopg.Connection, e: MemoryRedacted) -> bool:
        text = self._content.open(e.memory_id, e.content, conn, e.occurred_at)
        if text is None and self._content.is_tombstoned(e.memory_id, conn):
            return False
        # text None and no tombstone: replaying a memory whose keys a later revocation,
        # expiry or redaction destroyed; the row gets this revision without text, as live
        personal = None if text is None else self._content.personal(e.memory_id, e.personal, conn)
        conn.execute(
            f"UPDATE {self.table} SET content = %s, content_hmac = %s, revision = %s, updated_at = %s,"
            " key = CASE WHEN %s THEN %s ELSE key END, scope_id = CASE WHEN %s THEN %s ELSE scope_id END,"
            " provenance = provenance || %s WHERE memory_id = %s AND revision < %s",
            (
                text,
                e.content_hmac,
                e.revision,
                e.occurred_at,
                personal is not None,
                None if personal is None else personal.key,
                personal is not None,
                None if personal is None else personal.scope_id,
                Jsonb({} if personal is None else {k: v for k, v in personal.references().items() if v}),
                e.memory_id,
                e.revision,
            ),
        )
        return True

    def _reinforced(self, conn: psycopg.Connection, e: MemoryReinforced) -> None:
        conn.execute(
            f"UPDATE {self.table} SET confidence = %s, revision = %s, updated_at = %s"
            " WHERE memory_id = %s AND revision < %s",
            (e.confidence, e.revision, e.occurred_at, e.memory_id, e.revision),
        )

    def _reinstated(self, conn: psycopg.Connection, e: MemoryReinstated) -> None:
        """The memory is live again, awaiting confirmation: no longer superseded. Its row
        kept its content while it was superseded (a row whose text a replay could not
        open has none, and gets none here either: its key is gone)."""
        conn.execute(
            f"UPDATE {self.table} SET status = 'needs_confirmation', superseded_by = NULL, confirmed = false,"
            " revision = %s, updated_at = %s WHERE memory_id = %s AND revision < %s",
            (e.revision, e.occurred_at, e.memory_id, e.revision),
        )

    def _status(self, conn: psycopg.Connection, e: Event) -> None:
        status = status_after(e)
        superseded_by = e.superseded_by if isinstance(e, MemorySuperseded) else None
        confirmed = True if isinstance(e, MemoryConfirmed) else None
        drop_content = isinstance(e, _CONTENT_GONE)
        for ref in touched_memories(e):
            conn.execute(
                f"UPDATE {self.table} SET status = %s, revision = %s, updated_at = %s,"
                " superseded_by = coalesce(%s, superseded_by), confirmed = coalesce(%s, confirmed),"
                " content = CASE WHEN %s THEN NULL ELSE content END,"
                " key = CASE WHEN %s THEN NULL ELSE key END, scope_id = CASE WHEN %s THEN NULL ELSE scope_id END,"
                " provenance = CASE WHEN %s THEN provenance - %s::text[] ELSE provenance END"
                " WHERE memory_id = %s AND revision < %s",
                (
                    status,
                    ref.revision,
                    e.occurred_at,
                    superseded_by,
                    confirmed,
                    drop_content,
                    drop_content,
                    drop_content,
                    drop_content,
                    list(_REFERENCES),
                    ref.memory_id,
                    ref.revision,
                ),
            )

    def _conflict(self, conn: psycopg.Connection, e: ConflictDetected) -> None:
        conn.execute(
            f"""
            INSERT INTO {self.tables.conflicts} (conflict_id, subject_id, purpose, scope_type, memory_ids,
                detected_at, event_id)
            VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (conflict_id) DO NOTHING
            """,
            (
                e.conflict_id,
                e.subject_id,
                e.purpose,
                e.scope_type,
                [r.memory_id for r in e.affected],
                e.occurred_at,
                e.event_id,
            ),
        )

    def _erased(self, conn: psycopg.Connection, e: ErasureRequested, position: LogPosition) -> None:
        ids = [r.memory_id for r in e.affected]
        # a whole subject: every row of it, whether or not the ledger's heads knew the memory
        subject = e.subject_id if e.request_kind == "subject" else None
        removed = conn.execute(
            f"DELETE FROM {self.table} WHERE memory_id = ANY(%s) OR subject_id = %s", (ids, subject)
        ).rowcount
        conn.execute(
            f"UPDATE {self.history} SET content_hmac = NULL WHERE memory_id = ANY(%s) OR subject_id = %s",
            (ids, subject),
        )
        base.write_receipt(conn, e.request_id, "facts", self.id, position, removed)
        base.write_receipt(conn, e.request_id, "history", self.id, position, len(ids))

    def _history(self, conn: psycopg.Connection, e: Event, position: LogPosition, keep_hmac: bool) -> None:
        hmac = None
        if keep_hmac and isinstance(e, MemoryWritten):
            hmac = e.memory.content_hmac
        elif keep_hmac and isinstance(e, MemoryRedacted):
            hmac = e.content_hmac
        status = status_after(e)
        for ref in touched_memories(e):
            conn.execute(
                f"""
                INSERT INTO {self.history} (memory_id, revision, subject_id, event_type, event_id, status,
                    producer, occurred_at, content_hmac, log_partition, log_offset)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
                """,
                (
                    ref.memory_id,
                    ref.revision,
                    e.subject_id,
                    e.type,
                    e.event_id,
                    status,
                    e.producer,
                    e.occurred_at,
                    hmac,
                    position.partition,
                    position.offset,
                ),
            )
