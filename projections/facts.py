"""The facts projection (Postgres): the current state of every memory, a content-free
history of every revision, and a full-text search column.

Every event is applied in one transaction together with the projection's position, so
a record is applied exactly once however often it is delivered. Changes are
revision-guarded: an event whose revision is not newer than the row's changes nothing.
Summaries live in the summaries projection, not here.
"""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from contracts import (
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryConfirmed,
    MemoryRedacted,
    MemorySuperseded,
    MemoryWritten,
    RetentionExpired,
    touched_memories,
)
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema
from projections import base

FTS_CONFIG = "english"


def schema_sql(version: int) -> str:
    """DDL of facts version ``version``: ``facts_vN`` and ``facts_history_vN``."""
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
    scope_id         text NOT NULL,
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
"""


_STATUS_BY_EVENT = {
    "MemorySuperseded": "superseded",
    "MemoryConfirmed": "active",
    "ConsentRevoked": "revoked",
    "RetentionExpired": "expired",
    "ErasureRequested": "erased",
}


class FactsProjection(base.TransactionalProjection):
    """Postgres facts table + history. Reads ``facts_v{version}``."""

    name = "facts"

    def __init__(self, pool: ConnectionPool, content: base.ContentAccess, version: int = 1) -> None:
        super().__init__(pool, version)
        self._content = content
        self.table = f"facts_v{version}"
        self.history = f"facts_history_v{version}"
        with pool.connection() as conn:
            ensure_schema(conn, self.history, schema_sql(version))

    def reset(self) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(f"DROP TABLE IF EXISTS {self.table}, {self.history}")
            conn.execute(schema_sql(self.version))
            base.clear_positions(conn, self.id)

    def _apply_one(self, conn: psycopg.Connection, event: Event, position: LogPosition) -> None:
        keep_hmac = False
        if isinstance(event, MemoryWritten):
            keep_hmac = self._written(conn, event)
        elif isinstance(event, MemoryRedacted):
            keep_hmac = self._redacted(conn, event)
        elif isinstance(event, ErasureRequested):
            self._erased(conn, event, position)
        elif isinstance(event, MemorySuperseded | MemoryConfirmed | ConsentRevoked | RetentionExpired):
            self._status(conn, event)
        self._history(conn, event, position, keep_hmac)

    # -- per event ----------------------------------------------------------------------

    def _written(self, conn: psycopg.Connection, e: MemoryWritten) -> bool:
        text = self._content.open(e.memory_id, e.memory.content, conn)
        if text is None and self._content.is_tombstoned(e.memory_id, conn):
            return False  # erased before we got here: nothing of it may be stored
        # text None and no tombstone: a later redaction destroyed this text's key; keep the
        # row without content, the MemoryRedacted event further on fills it in
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
                m.key,
                m.purpose,
                m.scope.type,
                m.scope.id,
                m.sensitivity,
                m.retention.basis,
                m.retention.expires_at,
                m.confirmed,
                m.confidence,
                m.veracity,
                Jsonb(m.provenance.model_dump(mode="json")),
                list(m.provenance.derived_from),
                m.provenance.written_at,
                e.occurred_at,
            ),
        )
        return True

    def _redacted(self, conn: psycopg.Connection, e: MemoryRedacted) -> bool:
        text = self._content.open(e.memory_id, e.content, conn)
        if text is None:
            return False
        conn.execute(
            f"UPDATE {self.table} SET content = %s, content_hmac = %s, revision = %s, updated_at = %s"
            " WHERE memory_id = %s AND revision < %s",
            (text, e.content_hmac, e.revision, e.occurred_at, e.memory_id, e.revision),
        )
        return True

    def _status(self, conn: psycopg.Connection, e: Event) -> None:
        status = _STATUS_BY_EVENT[e.type]
        superseded_by = e.superseded_by if isinstance(e, MemorySuperseded) else None
        confirmed = True if isinstance(e, MemoryConfirmed) else None
        for ref in touched_memories(e):
            conn.execute(
                f"UPDATE {self.table} SET status = %s, revision = %s, updated_at = %s,"
                " superseded_by = coalesce(%s, superseded_by), confirmed = coalesce(%s, confirmed)"
                " WHERE memory_id = %s AND revision < %s",
                (status, ref.revision, e.occurred_at, superseded_by, confirmed, ref.memory_id, ref.revision),
            )

    def _erased(self, conn: psycopg.Connection, e: ErasureRequested, position: LogPosition) -> None:
        ids = [r.memory_id for r in e.affected]
        removed = conn.execute(f"DELETE FROM {self.table} WHERE memory_id = ANY(%s)", (ids,)).rowcount
        conn.execute(f"UPDATE {self.history} SET content_hmac = NULL WHERE memory_id = ANY(%s)", (ids,))
        base.write_receipt(conn, e.request_id, "facts", self.id, position, removed)
        base.write_receipt(conn, e.request_id, "history", self.id, position, len(ids))

    def _history(self, conn: psycopg.Connection, e: Event, position: LogPosition, keep_hmac: bool) -> None:
        hmac = None
        if keep_hmac and isinstance(e, MemoryWritten):
            hmac = e.memory.content_hmac
        elif keep_hmac and isinstance(e, MemoryRedacted):
            hmac = e.content_hmac
        for ref in touched_memories(e):
            status = _STATUS_BY_EVENT.get(e.type)
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
