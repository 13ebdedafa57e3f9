"""The summaries projection (Postgres): derived summaries with their lineage.

A summary is stored with ``derived_from`` (the memory ids it was made from). When any
source is superseded, redacted, revoked, expired or erased, every summary derived from
it is dropped: a summary must not outlive the evidence it restates. A regenerated summary
(``SummaryDerived.replaces``) also drops the summary it replaces; being derived only from
sources that are still valid, it survives the invalidation that caused it.

Revision-guarded (``projections.marks``): the projection keeps a mark (last revision,
status) in ``revision_marks`` for every memory its events touch, summaries and sources
alike, read once per batch and saved in the transaction of its rows and position; an
event changes only memories it is newer for.
So a ``SummaryDerived`` delivered again after one of its sources was superseded does
not bring the summary back, and a source's old redaction delivered again does not drop
the summary derived after it. An erasure's deletions always apply; a whole-subject
erasure, where it is first applied, removes every summary of its subject
(``base.whole_subject_erasures``).

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
)
from ledger.eventlog import LogPosition
from ledger.pgschema import ensure_schema
from projections import base, marks
from projections.opening import Opened, OpenedContent
from projections.sqlbatch import InsertInto, SqlBatch


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
    opens_content = True
    _content: base.ContentAccess

    def __init__(self, pool: ConnectionPool, content: base.ContentAccess, version: int = 1) -> None:
        super().__init__(pool, version)
        self._content = content
        self.table = self.table_name(version)
        self.vacuum_tables = (self.table,)
        self._insert = InsertInto(self.table, _COLUMNS, "ON CONFLICT (memory_id) DO NOTHING")
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

    def _apply_events(
        self, conn: psycopg.Connection, todo: list[tuple[Event, LogPosition]], opened: OpenedContent | None
    ) -> None:
        """Apply the batch: one tombstone query (each summary and its sources) and the
        summaries' content opened once, then its statements in one pipeline
        (``projections.sqlbatch``): summaries inserted with one multi-row ``INSERT``, the
        invalidations of consecutive events deleted with one ``DELETE`` (each sent before
        the first later insert it would remove, as in log order); an erasure deletes on
        its own, so that its receipt counts what it removed (a whole-subject erasure,
        where it is first applied, every summary of its subject:
        ``base.whole_subject_erasures``)."""
        book = marks.load_book(conn, self.id, [e for e, _ in todo])
        plan = book.plan(todo)
        derived = [e for e, _, _ in plan if isinstance(e, SummaryDerived)]
        erased = self._content.erased_among(
            [m for e in derived for m in (e.memory_id, *e.memory.provenance.derived_from)], conn
        )
        readable = [e for e in derived if not erased.intersection((e.memory_id, *e.memory.provenance.derived_from))]
        if opened is None or not opened.covers(readable):
            opened = self._content.open_events(readable, conn)
        stored = {e.event_id for e in readable}
        whole = base.whole_subject_erasures(conn, "summaries", self.id, [(e, p) for e, p, _ in plan])
        with SqlBatch(conn) as batch:
            pending = _Invalidations(self.table, batch)
            for event, position, fresh in plan:
                if isinstance(event, SummaryDerived):
                    if event.event_id in stored:
                        pending.before({event.memory_id, *event.memory.provenance.derived_from})
                        self._derived(batch, event, opened.of(event))
                    if event.replaces is not None:
                        pending.replaced.add(event.replaces)
                elif isinstance(event, ErasureRequested):
                    pending.send()
                    self._erased(batch, event, position, position in whole)
                elif isinstance(event, _INVALIDATING):
                    pending.sources.update(r.memory_id for r in fresh)
            pending.send()
            marks.save_marks(conn, self.id, book.changed())

    def _derived(self, batch: SqlBatch, e: SummaryDerived, content: Opened) -> None:
        if content.text is None:
            return
        personal = content.personal
        if personal is None:
            return  # its key was destroyed between the two reads: nothing of it may be stored
        m = e.memory
        row = (
            e.memory_id,
            e.subject_id,
            e.revision,
            content.text,
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
        )
        touches = (e.memory_id, *m.provenance.derived_from)
        batch.insert(self._insert, row, e.memory_id, touches)

    def _erased(self, batch: SqlBatch, e: ErasureRequested, position: LogPosition, whole_subject: bool) -> None:
        ids = [r.memory_id for r in e.affected]
        # a whole subject: every summary of it, whether or not the ledger's heads knew it
        # (the summaries the log inserted before the erasure are sent first)
        subject = e.subject_id if whole_subject else None
        if whole_subject:
            batch.flush()
        batch.execute(
            f"WITH gone AS (DELETE FROM {self.table} WHERE derived_from && %s::text[] OR memory_id = ANY(%s)"
            " OR subject_id = %s RETURNING 1)"
            " INSERT INTO erasure_receipts (request_id, store, projection, log_partition, log_offset, items_removed)"
            " SELECT %s, 'summaries', %s, %s, %s, count(*) FROM gone ON CONFLICT DO NOTHING",
            (ids, ids, subject, e.request_id, self.id, position.partition, position.offset),
            ids,
        )


class _Invalidations:
    """Deletions of summaries gathered over consecutive events and sent as one statement:
    ``sources`` (delete the summaries of, and derived from, these memories) and
    ``replaced`` (delete these summaries: regenerated ones)."""

    def __init__(self, table: str, batch: SqlBatch) -> None:
        self._table = table
        self._batch = batch
        self.sources: set[str] = set()
        self.replaced: set[str] = set()

    def before(self, touches: set[str]) -> None:
        """Send the pending deletions if they would remove a summary that ``touches``
        names (its id or a source), which the log inserts after them."""
        if not touches.isdisjoint(self.sources) or not touches.isdisjoint(self.replaced):
            self.send()

    def send(self) -> None:
        if not self.sources and not self.replaced:
            return
        sources, replaced = sorted(self.sources), sorted(self.replaced)
        self.sources.clear()
        self.replaced.clear()
        self._batch.execute(
            f"DELETE FROM {self._table} WHERE derived_from && %s::text[] OR memory_id = ANY(%s)",
            (sources, sources + replaced),
            sources + replaced,
        )


_COLUMNS = (
    ("memory_id", "text"),
    ("subject_id", "text"),
    ("revision", "integer"),
    ("content", "text"),
    ("content_hmac", "text"),
    ("purpose", "text"),
    ("scope_type", "text"),
    ("scope_id", "text"),
    ("derived_from", "text[]"),
    ("provenance", "jsonb"),
    ("written_at", "timestamptz"),
    ("expires_at", "timestamptz"),
    ("key", "text"),
    ("sensitivity", "text"),
    ("confidence", "double precision"),
    ("veracity", "text"),
    ("confirmed", "boolean"),
)
