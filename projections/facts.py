"""The facts projection (Postgres): the current state of every memory, a content-free
history of every revision, the conflicts the ledger detected, and a full-text search
column.

Every event is applied in one transaction together with the projection's position, so
a record is applied exactly once however often it is delivered. Changes are
revision-guarded (``projections.marks``): the history holds one row per memory and
revision applied, and outlives the memory's row, so it is this store's revision mark;
an event changes a memory only if its revision is newer than the memory's last one in
the history, so a copy of an older event (a duplicate in the log at a later offset, a
``MemoryWritten`` after the memory's erasure) changes nothing, not even the history or
the conflicts. An erasure's deletions always apply; a whole-subject erasure, where it is
first applied, removes every row of its subject (``base.whole_subject_erasures``).
Summaries live in the summaries projection, not here.

A batch is applied with one query for its memories' marks, one for their tombstones and
its content opened once, then every statement in one pipeline (``projections.sqlbatch``),
the marks advanced in memory in log order as the statements are queued.

Text that may no longer be read is not kept: a revoked or expired memory's row keeps its
metadata with ``content`` NULL, exactly as a replay (where the ledger has destroyed its
data key) rebuilds it. Every timestamp written comes from the event, so a rebuild from the
log is equal to the live table row for row (invariant 8).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    MemoryRef,
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
from projections import base, marks
from projections.marks import status_after
from projections.opening import Opened, OpenedContent, sealed_events
from projections.sqlbatch import InsertInto, SqlBatch

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


def source_index_sql(version: int) -> str:
    """DDL of the index of a subject's memories by source (``provenance.source_ref``):
    recall reads the neighbours of its anchors through it. Added after the first
    schemas, so it is also ensured on its own (:class:`FactsProjection`)."""
    return (
        f"CREATE INDEX IF NOT EXISTS facts_v{version}_source"
        f" ON facts_v{version} (subject_id, (provenance->>'source_ref'));"
    )


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
{source_index_sql(version)}
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


_CONTENT_GONE = (ConsentRevoked, RetentionExpired)
"""Events after which a memory's text and personal fields (key, scope id, provenance
references) must not be readable in facts: a replay cannot read them either once the
data key is destroyed."""

_REFERENCES = ("turn_id", "tool_call_id", "consent_ref", "source_ref")
"""The provenance references among the personal fields (``contracts.PersonalFields``)."""


class FactsProjection(base.TransactionalProjection):
    """Postgres facts table + history. Reads ``facts_v{version}``."""

    name = "facts"
    opens_content = True
    _content: base.ContentAccess

    def __init__(self, pool: ConnectionPool, content: base.ContentAccess, version: int = 1) -> None:
        super().__init__(pool, version)
        self._content = content
        self.tables = FactsTables(version)
        self.table = self.tables.facts
        self.history = self.tables.history
        self.vacuum_tables = (self.table, self.history)
        self._inserts = _Inserts.of(self.tables)
        with pool.connection() as conn:
            ensure_schema(conn, self.tables.conflicts, schema_sql(version))
            ensure_schema(conn, f"{self.table}_source", source_index_sql(version))

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

    def _apply_events(
        self, conn: psycopg.Connection, todo: list[tuple[Event, LogPosition]], opened: OpenedContent | None
    ) -> None:
        """Apply the batch: one tombstone query for its write-type events and its content
        opened once (``opened`` when the pass opened it, else here), then every statement
        of the batch in one pipeline, fact and history inserts folded into multi-row
        ``INSERT``s (``projections.sqlbatch``). Every change is revision-guarded by a
        condition on the write itself: an insert is ``ON CONFLICT DO NOTHING``, an update
        applies only ``WHERE revision < <the event's revision>``."""
        book = self._marks(conn, [e for e, _ in todo])
        plan = book.plan(todo)
        writes = [e for e, _, _ in plan if isinstance(e, base.WRITE_EVENTS)]
        erased = self._content.erased_among([e.memory_id for e in writes], conn)
        # a reinstatement's text is the row's own already (kept while it was superseded)
        sealed = sealed_events([e for e in writes if e.memory_id not in erased and not isinstance(e, MemoryReinstated)])
        if opened is None or not opened.covers(sealed):
            opened = self._content.open_events(sealed, conn)
        whole = base.whole_subject_erasures(conn, "facts", self.id, [(e, p) for e, p, _ in plan])
        # the statements after a whole-subject erasure go in a batch of their own: its DELETE
        # of the subject's rows must not see the inserts the log makes after it
        segments: list[list[tuple[Event, LogPosition, tuple[MemoryRef, ...]]]] = [[]]
        for step in plan:
            segments[-1].append(step)
            if step[1] in whole:
                segments.append([])
        for segment in segments:
            with SqlBatch(conn, inserts_first=True) as batch:
                for event, position, fresh in segment:
                    self._apply_one(batch, event, position, fresh, erased, opened, position in whole)

    def _marks(self, conn: psycopg.Connection, events: Sequence[Event]) -> marks.MarkBook:
        """The marks of the memories ``events`` touch: the history's last revision of each
        (one history row per memory and revision applied, kept after the row is erased,
        so it is the facts store's revision mark), in one query."""
        ids = list(dict.fromkeys(r.memory_id for e in events for r in touched_memories(e)))
        rows = conn.execute(
            f"SELECT memory_id, subject_id, max(revision) FROM {self.history} WHERE memory_id = ANY(%s)"
            " GROUP BY memory_id, subject_id",
            (ids,),
        ).fetchall()
        return marks.MarkBook({str(m): marks.Mark(str(s), int(r), None) for m, s, r in rows})

    def _apply_one(
        self,
        batch: SqlBatch,
        event: Event,
        position: LogPosition,
        fresh: tuple[MemoryRef, ...],
        erased: set[str],
        opened: OpenedContent,
        whole_subject: bool = False,
    ) -> None:
        """Queue what ``event`` does, for the memories it is ``fresh`` for (newer than their
        marks; an erasure's deletions apply to all of its memories, and to every row of
        its subject when ``whole_subject``: ``base.whole_subject_erasures``)."""
        keep_hmac = False
        if isinstance(event, base.WRITE_EVENTS) and event.memory_id in erased:
            pass  # tombstoned: nothing of it is stored, even if its key can still be read; history stays content-free
        elif isinstance(event, MemoryWritten):
            keep_hmac = self._written(batch, event, opened.of(event))
        elif isinstance(event, MemoryRedacted):
            keep_hmac = self._redacted(batch, event, opened.of(event))
        elif isinstance(event, ErasureRequested):
            self._erased(batch, event, position, whole_subject)
        elif isinstance(event, MemoryReinforced):
            self._reinforced(batch, event)
        elif isinstance(event, MemoryReinstated):
            self._reinstated(batch, event)
        elif isinstance(
            event, MemorySuperseded | MemoryConfirmed | ConflictDetected | ConsentRevoked | RetentionExpired
        ):
            self._status(batch, event, fresh)
            if isinstance(event, ConflictDetected):
                self._conflict(batch, event)
        self._history(batch, event, position, keep_hmac, fresh)

    # -- per event ----------------------------------------------------------------------

    def _written(self, batch: SqlBatch, e: MemoryWritten, content: Opened) -> bool:
        # text None (not tombstoned: that was checked): a later redaction, revocation or
        # expiry destroyed this text's key; keep the row without content or personal fields
        # (a MemoryRedacted event further on fills them in)
        text, personal = content.text, content.personal
        m = e.memory
        status = "needs_confirmation" if m.kind == "inference" and not m.confirmed else "active"
        row = (
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
        )
        batch.insert(self._inserts.facts, row, e.memory_id, (e.memory_id,))
        return True

    def _redacted(self, batch: SqlBatch, e: MemoryRedacted, content: Opened) -> bool:
        # text None (not tombstoned): replaying a memory whose keys a later revocation,
        # expiry or redaction destroyed; the row gets this revision without text, as live
        text, personal = content.text, content.personal
        batch.execute(
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
            (e.memory_id,),
        )
        return True

    def _reinforced(self, batch: SqlBatch, e: MemoryReinforced) -> None:
        batch.execute(
            f"UPDATE {self.table} SET confidence = %s, revision = %s, updated_at = %s"
            " WHERE memory_id = %s AND revision < %s",
            (e.confidence, e.revision, e.occurred_at, e.memory_id, e.revision),
            (e.memory_id,),
        )

    def _reinstated(self, batch: SqlBatch, e: MemoryReinstated) -> None:
        """The memory is live again, awaiting confirmation: no longer superseded and not
        confirmed (a claim whose rival was erased was live already: it is no longer
        disputed). Its row kept its content while it was superseded (a row whose text a
        replay could not open has none, and gets none here either: its key is gone)."""
        batch.execute(
            f"UPDATE {self.table} SET status = 'needs_confirmation', superseded_by = NULL, confirmed = false,"
            " revision = %s, updated_at = %s WHERE memory_id = %s AND revision < %s",
            (e.revision, e.occurred_at, e.memory_id, e.revision),
            (e.memory_id,),
        )

    def _status(self, batch: SqlBatch, e: Event, fresh: Sequence[MemoryRef]) -> None:
        status = status_after(e)
        superseded_by = e.superseded_by if isinstance(e, MemorySuperseded) else None
        confirmed = True if isinstance(e, MemoryConfirmed) else None
        drop_content = isinstance(e, _CONTENT_GONE)
        for ref in fresh:
            batch.execute(
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
                (ref.memory_id,),
            )

    def _conflict(self, batch: SqlBatch, e: ConflictDetected) -> None:
        row = (
            e.conflict_id,
            e.subject_id,
            e.purpose,
            e.scope_type,
            [r.memory_id for r in e.affected],
            e.occurred_at,
            e.event_id,
        )
        batch.insert(self._inserts.conflicts, row, e.conflict_id, ())

    def _erased(self, batch: SqlBatch, e: ErasureRequested, position: LogPosition, whole_subject: bool) -> None:
        ids = [r.memory_id for r in e.affected]
        # a whole subject: every row of it, whether or not the ledger's heads knew the memory
        subject = e.subject_id if whole_subject else None
        # the receipt counts the rows the DELETE removed, in the same statement (no result
        # is read back in the pipeline)
        batch.execute(
            f"WITH gone AS (DELETE FROM {self.table} WHERE memory_id = ANY(%s) OR subject_id = %s RETURNING 1)"
            " INSERT INTO erasure_receipts (request_id, store, projection, log_partition, log_offset, items_removed)"
            " SELECT %s, 'facts', %s, %s, %s, count(*) FROM gone ON CONFLICT DO NOTHING",
            (ids, subject, e.request_id, self.id, position.partition, position.offset),
            ids,
        )
        batch.execute(
            f"UPDATE {self.history} SET content_hmac = NULL WHERE memory_id = ANY(%s) OR subject_id = %s",
            (ids, subject),
            ids,
        )
        batch.execute(
            base.RECEIPT_SQL, (e.request_id, "history", self.id, position.partition, position.offset, len(ids))
        )

    def _history(
        self, batch: SqlBatch, e: Event, position: LogPosition, keep_hmac: bool, fresh: Sequence[MemoryRef]
    ) -> None:
        hmac = None
        if keep_hmac and isinstance(e, MemoryWritten):
            hmac = e.memory.content_hmac
        elif keep_hmac and isinstance(e, MemoryRedacted):
            hmac = e.content_hmac
        status = status_after(e)
        for ref in fresh:
            row = (
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
            )
            batch.insert(self._inserts.history, row, (ref.memory_id, ref.revision), (ref.memory_id,))


@dataclass(frozen=True)
class _Inserts:
    """The multi-row inserts of one facts version (``projections.sqlbatch``)."""

    facts: InsertInto
    history: InsertInto
    conflicts: InsertInto

    @classmethod
    def of(cls, tables: FactsTables) -> _Inserts:
        return cls(
            InsertInto(tables.facts, _FACT_COLUMNS, "ON CONFLICT (memory_id) DO NOTHING"),
            InsertInto(tables.history, _HISTORY_COLUMNS, "ON CONFLICT DO NOTHING"),
            InsertInto(tables.conflicts, _CONFLICT_COLUMNS, "ON CONFLICT (conflict_id) DO NOTHING"),
        )


_FACT_COLUMNS = (
    ("memory_id", "text"),
    ("subject_id", "text"),
    ("revision", "integer"),
    ("status", "text"),
    ("kind", "text"),
    ("content", "text"),
    ("content_hmac", "text"),
    ("key", "text"),
    ("purpose", "text"),
    ("scope_type", "text"),
    ("scope_id", "text"),
    ("sensitivity", "text"),
    ("retention_basis", "text"),
    ("expires_at", "timestamptz"),
    ("confirmed", "boolean"),
    ("confidence", "double precision"),
    ("veracity", "text"),
    ("provenance", "jsonb"),
    ("derived_from", "text[]"),
    ("written_at", "timestamptz"),
    ("updated_at", "timestamptz"),
)
_HISTORY_COLUMNS = (
    ("memory_id", "text"),
    ("revision", "integer"),
    ("subject_id", "text"),
    ("event_type", "text"),
    ("event_id", "text"),
    ("status", "text"),
    ("producer", "text"),
    ("occurred_at", "timestamptz"),
    ("content_hmac", "text"),
    ("log_partition", "integer"),
    ("log_offset", "bigint"),
)
_CONFLICT_COLUMNS = (
    ("conflict_id", "text"),
    ("subject_id", "text"),
    ("purpose", "text"),
    ("scope_type", "text"),
    ("memory_ids", "text[]"),
    ("detected_at", "timestamptz"),
    ("event_id", "text"),
)
