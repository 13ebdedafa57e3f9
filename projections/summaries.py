"""The summaries projection (Postgres): derived summaries with their lineage.

A summary is stored with ``derived_from`` (the memory ids it was made from). When any
source is superseded, redacted, revoked, expired or erased, every summary derived from
it is dropped: a summary must not outlive the evidence it restates. A regenerated summary
(``SummaryDerived.replaces``) also drops the summary it replaces; being derived only from
sources that are still valid, it survives the invalidation that caused it.

Each row carries what recall needs to return it as an item (key, sensitivity, confidence,
veracity, confirmed); a summary row exists only while it is valid, so its status is
always ``active``.
"""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from contracts import (
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryRedacted,
    MemorySuperseded,
    RetentionExpired,
    SummaryDerived,
    full_provenance,
    touched_memories,
)
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema
from projections import base


def schema_sql(version: int) -> str:
    """DDL of ``summaries_vN``."""
    return f"""
CREATE TABLE IF NOT EXISTS summaries_v{version} (
    memory_id     text PRIMARY KEY,
    subject_id    text NOT NULL,
    revision      integer NOT NULL,
    content       text NOT NULL,
    content_hmac  text,
    purpose       text NOT NULL,
    scope_type    text NOT NULL,
    scope_id      text NOT NULL,
    derived_from  text[] NOT NULL,
    provenance    jsonb NOT NULL,
    written_at    timestamptz NOT NULL,
    expires_at    timestamptz,
    tsv           tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
);
CREATE INDEX IF NOT EXISTS summaries_v{version}_subject ON summaries_v{version} (subject_id, purpose);
CREATE INDEX IF NOT EXISTS summaries_v{version}_derived ON summaries_v{version} USING gin (derived_from);
CREATE INDEX IF NOT EXISTS summaries_v{version}_tsv ON summaries_v{version} USING gin (tsv);
ALTER TABLE summaries_v{version}
    ADD COLUMN IF NOT EXISTS key          text,
    ADD COLUMN IF NOT EXISTS sensitivity  text NOT NULL DEFAULT 'internal',
    ADD COLUMN IF NOT EXISTS confidence   double precision NOT NULL DEFAULT 0.7,
    ADD COLUMN IF NOT EXISTS veracity     text NOT NULL DEFAULT 'inferred',
    ADD COLUMN IF NOT EXISTS confirmed    boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS summaries_v{version}_recall ON summaries_v{version} (subject_id, purpose, expires_at);
"""


def schema_marker(version: int) -> str:
    """The relation whose presence means ``schema_sql(version)`` has run in full (the
    last index it creates: an older schema without the recall columns lacks it)."""
    return f"summaries_v{version}_recall"


_INVALIDATING = (MemorySuperseded, MemoryRedacted, ConsentRevoked, RetentionExpired, ErasureRequested)


class SummariesProjection(base.TransactionalProjection):
    """Stores ``SummaryDerived`` events; drops summaries whose sources were invalidated."""

    name = "summaries"

    def __init__(self, pool: ConnectionPool, content: base.ContentAccess, version: int = 1) -> None:
        super().__init__(pool, version)
        self._content = content
        self.table = self.table_name(version)
        self.vacuum_tables = (self.table,)
        with pool.connection() as conn:
            ensure_schema(conn, schema_marker(version), schema_sql(version))

    @staticmethod
    def table_name(version: int) -> str:
        """The table of summaries version ``version``: ``summaries_vN``."""
        return f"summaries_v{version}"

    def reset(self) -> None:
        """Empty this version's table and forget its positions, for a rebuild in place
        (truncated, not dropped: the stable view may select from it)."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(schema_sql(self.version))
            conn.execute(f"TRUNCATE {self.table}")
            base.clear_positions(conn, self.id)

    def drop(self) -> None:
        """Drop this version's table and positions (retiring it; erasure receipts stay)."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(f"DROP TABLE IF EXISTS {self.table}")
            base.clear_positions(conn, self.id)

    def _apply_one(self, conn: psycopg.Connection, event: Event, position: LogPosition) -> None:
        if isinstance(event, SummaryDerived):
            self._derived(conn, event)
            if event.replaces is not None:
                conn.execute(f"DELETE FROM {self.table} WHERE memory_id = %s", (event.replaces,))
        elif isinstance(event, _INVALIDATING):
            removed = self._drop_derived(conn, [r.memory_id for r in touched_memories(event)])
            if isinstance(event, ErasureRequested) and event.request_kind == "subject":
                # a whole subject: every summary of it, whether or not the ledger's heads knew it
                removed += conn.execute(f"DELETE FROM {self.table} WHERE subject_id = %s", (event.subject_id,)).rowcount
            if isinstance(event, ErasureRequested):
                base.write_receipt(conn, event.request_id, "summaries", self.id, position, removed)

    def _derived(self, conn: psycopg.Connection, e: SummaryDerived) -> None:
        if self._content.erased_among([e.memory_id, *e.memory.provenance.derived_from], conn):
            return  # the summary, or a source it restates, is tombstoned: store nothing of it
        text = self._content.open(e.memory_id, e.memory.content, conn, e.occurred_at)
        if text is None:
            return
        personal = self._content.personal(e.memory_id, e.memory.personal, conn)
        if personal is None:
            return  # its key was destroyed between the two reads: nothing of it may be stored
        m = e.memory
        conn.execute(
            f"""
            INSERT INTO {self.table} (memory_id, subject_id, revision, content, content_hmac, purpose, scope_type,
                scope_id, derived_from, provenance, written_at, expires_at, key, sensitivity, confidence,
                veracity, confirmed)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (memory_id) DO NOTHING
            """,
            (
                e.memory_id,
                e.subject_id,
                e.revision,
                text,
                m.content_hmac,
                m.purpose,
                m.scope_type,
                personal.scope_id,
                list(m.provenance.derived_from),
                Jsonb(full_provenance(m.provenance, personal)),
                m.provenance.written_at,
                m.retention.expires_at,
                personal.key,
                m.sensitivity,
                m.confidence,
                m.veracity,
                m.confirmed,
            ),
        )

    def _drop_derived(self, conn: psycopg.Connection, memory_ids: list[str]) -> int:
        return conn.execute(
            f"DELETE FROM {self.table} WHERE derived_from && %s::text[] OR memory_id = ANY(%s)",
            (memory_ids, memory_ids),
        ).rowcount
