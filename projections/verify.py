"""Verifying a live projection against a fresh fold of the log (``memledger verify``).

For a projection ``name_vN`` the check is:

1. read the live projection's stored positions (per partition: the last offset it
   applied) and, for the Postgres projections, its rows in the same REPEATABLE READ
   snapshot, so rows and positions belong together;
2. fold the log, from offset 0 up to and including those positions and no further, with
   the projection's own apply code into a scratch target: a new Postgres schema
   ``memledger_verify_<hex>`` searched before the live ones (facts, summaries; it also
   holds the fold's own positions and receipts, so nothing live is written), or an
   in-memory Qdrant collection (vectors); records the live runner would dead-letter
   (undecodable, or a key that differs from ``subject_id``) are skipped the same way;
3. compare a checksum per subject first (md5 of the subject's rows as canonical JSON),
   then, for each subject whose checksums differ, row by row and column by column.

What is compared:

- facts: every column of ``facts_vN`` (except the generated ``tsv``, a function of
  ``content``), of ``facts_history_vN`` and of ``facts_conflicts_vN``;
- summaries: every column of ``summaries_vN`` (except ``tsv``);
- vectors: the set of point ids, every payload field (revision, status, model,
  content_hmac, ...), and each vector by cosine similarity: a point whose vectors have
  cosine below ``VECTOR_COSINE_MIN`` differs. The fold re-embeds with the configured
  embedder; the hashing embedder is deterministic, so its vectors agree to rounding.

Not compared: erasure receipts and positions (they record when things were applied),
the cache projection (entries are dropped, not folded).

Content is never printed: a ``content`` value is shown as its length and a SHA-256
fingerprint; other values are truncated to ``VALUE_CHARS`` characters.

A live projection that is behind is compared at its own position; but the fold opens
memory text with today's keys, so a memory whose key an event after that position
destroyed (erasure, revocation, expiry, redaction) cannot be folded as the live
projection still holds it. Differences on such memories are listed as ``pending``
(explained by events the projection has not applied yet), not as differences.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from contracts import (
    ConsentRevoked,
    ErasureRequested,
    Event,
    MemoryRedacted,
    RetentionExpired,
    UnknownEventError,
    decode_event,
    touched_memories,
)
from ledger.crypto import Keyring
from ledger.eventlog import EventLog, LogPosition
from projections import base, embedding_queue, marks
from projections.base import ContentAccess, PositionedProjection
from projections.comparison import (
    VECTOR_COSINE_MIN,
    Difference,
    TableSpec,
    compare_points,
    compare_rows,
    cosine,
    render_value,
    tables_of,
)
from projections.embedding import Embedder
from projections.errors import UnreadableErasureError, VerifyError
from projections.facts import FactsProjection
from projections.facts import schema_sql as facts_schema_sql
from projections.reference.check import (
    MARKS,
    ReferenceFeed,
    compare_marks,
    compare_tables,
    compare_vectors,
    expected_marks,
    expected_points,
    expected_tables,
    live_marks,
    live_tables,
)
from projections.runner import decode_records
from projections.summaries import SummariesProjection
from projections.summaries import schema_sql as summaries_schema_sql
from projections.vector_index import VectorIndex, VectorPoint
from projections.wording import counted

__all__ = [
    "VECTOR_COSINE_MIN",
    "VERIFIABLE",
    "Difference",
    "FoldStats",
    "TableSpec",
    "VerifyError",
    "VerifyReport",
    "compare_points",
    "compare_rows",
    "cosine",
    "destroyed_after",
    "fold",
    "render_value",
    "subject_checksums",
    "subject_rows",
    "tables_of",
    "verify_postgres",
    "verify_vectors",
]

VERIFIABLE = ("facts", "summaries", "vectors")
"""The projections ``verify`` can check."""

BOOKKEEPING = ("projection_positions", "erasure_receipts", "revision_marks")
"""The shared tables a fold writes (its positions, receipts and revision marks): the
scratch schema must hold its own."""

_KEY_DESTROYING = (ErasureRequested, ConsentRevoked, RetentionExpired, MemoryRedacted)
"""Events whose appending destroyed a data key (or tombstoned the memory)."""

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``."""


@dataclass
class VerifyReport:
    """The outcome of verifying one projection.

    Attributes:
        projection: the projection id, e.g. ``facts_v1``.
        positions: partition -> last offset folded (the live projection's positions).
        events_folded: records folded into the scratch target.
        records_skipped: records the fold skipped as the live runner would dead-letter them.
        subjects: subjects seen on either side.
        subjects_differing: subjects whose checksums differ.
        rows_compared: rows (or points) compared, live and fold together.
        differences: every difference from the fold not explained by a pending event.
        pending: differences on memories whose key an event after the projection's
            position destroyed (the projection is behind; not counted as a failure).
        reference_differences: every difference from the reference fold
            (``projections.reference``: the specification, sharing no apply code with the
            projection) not explained by a pending event; ``against="reference"``.
        reference_pending: the reference's differences on such pending memories.
        compared: what was compared, in words.
        warnings: e.g. the live projection moved during the check.
    """

    projection: str
    positions: dict[int, int]
    events_folded: int = 0
    records_skipped: int = 0
    subjects: int = 0
    subjects_differing: int = 0
    rows_compared: int = 0
    differences: list[Difference] = field(default_factory=list)
    pending: list[Difference] = field(default_factory=list)
    reference_differences: list[Difference] = field(default_factory=list)
    reference_pending: list[Difference] = field(default_factory=list)
    compared: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the live projection equals the fold and the reference (pending
        differences aside)."""
        return not self.differences and not self.reference_differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "projection": self.projection,
            "ok": self.ok,
            "positions": {str(p): o for p, o in sorted(self.positions.items())},
            "events_folded": self.events_folded,
            "records_skipped": self.records_skipped,
            "subjects": self.subjects,
            "subjects_differing": self.subjects_differing,
            "rows_compared": self.rows_compared,
            "differences": [d.to_dict() for d in self.differences],
            "pending": [d.to_dict() for d in self.pending],
            "reference_differences": [d.to_dict() for d in self.reference_differences],
            "reference_pending": [d.to_dict() for d in self.reference_pending],
            "compared": self.compared,
            "warnings": self.warnings,
        }

    def render(self) -> str:
        """Human-readable lines: the verdict, then one line per difference."""
        at = ", ".join(f"p{p}@{o}" for p, o in sorted(self.positions.items())) or "nothing applied"
        verdict = "OK" if self.ok else counted(len(self.differences) + len(self.reference_differences), "difference")
        lines = [
            f"{self.projection}: {verdict}; folded {counted(self.events_folded, 'event')} up to {at}"
            f" ({self.records_skipped} skipped as dead letters); {counted(self.subjects, 'subject')},"
            f" {self.subjects_differing} differing; {counted(self.rows_compared, 'row')} compared",
            f"  compared: {self.compared}",
        ]
        for d in (*self.differences, *self.reference_differences):
            lines.append(
                f"  DIFF {d.table} subject {d.subject_id} {d.key} {d.column}: live {d.live} | {d.against} {d.fold}"
            )
        for d in (*self.pending, *self.reference_pending):
            lines.append(
                f"  pending {d.table} subject {d.subject_id} {d.key} {d.column}: live {d.live} | {d.against} {d.fold}"
                " (a later event the projection has not applied destroyed this memory's key)"
            )
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# -- the fold ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoldStats:
    """Records folded and records skipped (what the live runner dead-letters)."""

    events: int
    skipped: int


def fold(
    log: EventLog,
    projection: PositionedProjection,
    upto: Mapping[int, int],
    batch: int = 500,
    progress: Progress | None = None,
    observe: Callable[[list[tuple[Event, LogPosition]]], None] | None = None,
) -> FoldStats:
    """Apply every record of ``log`` with offset <= ``upto[partition]`` to ``projection``
    (partitions absent from ``upto`` are not read), in log order per partition, in
    batches of ``batch`` records; ``observe`` (the reference fold) gets each batch too.
    Undecodable records and records whose key differs from the event's subject are
    skipped, as the live runner dead-letters them (the same decode step,
    ``projections.runner.decode_records``).

    Raises:
        UnreadableErasureError: a record is an ``ErasureRequested`` this reader cannot
            read: the live runner stops at it, never skips it, so neither does the fold
            (run verify with a reader that can read it).
        whatever the projection's store raises (no retries: a verify run simply fails).
    """
    total = sum(o + 1 for o in upto.values())
    events = skipped = 0
    for partition, last in sorted(upto.items()):
        offset = 0
        while offset <= last:
            records = log.read(partition, offset, min(batch, last - offset + 1))
            if not records:
                break
            items: list[tuple[Event, LogPosition]] = []
            for item in decode_records([r for r in records if r.offset <= last], {}):
                if item.stall is not None:
                    r = item.record
                    raise UnreadableErasureError(projection.id, r.partition, r.offset, 1, item.stall)
                if item.event is None:
                    skipped += 1
                    continue
                items.append((item.event, item.record.position))
            projection.apply_batch(items)
            if observe is not None:
                observe(items)
            events += len(items)
            offset = records[-1].offset + 1
            if progress is not None:
                progress(f"fold {projection.id}", events + skipped, total)
    return FoldStats(events, skipped)


def destroyed_after(log: EventLog, positions: Mapping[int, int], batch: int = 500) -> set[str]:
    """Memory ids whose data key (or whole memory) an event after ``positions`` destroyed:
    the targets of erasures, revocations, expiries and redactions the projection has not
    applied yet. Undecodable records are ignored."""
    gone: set[str] = set()
    for partition, end in log.end_offsets().items():
        offset = positions.get(partition, -1) + 1
        while offset < end:
            records = log.read(partition, offset, min(batch, end - offset))
            if not records:
                break
            for record in records:
                try:
                    event = decode_event(record.value)
                except UnknownEventError:
                    continue
                if isinstance(event, _KEY_DESTROYING):
                    gone.update(r.memory_id for r in touched_memories(event))
            offset = records[-1].offset + 1
    return gone


# -- Postgres projections ------------------------------------------------------------------


def _ddl(name: str, version: int) -> str:
    return facts_schema_sql(version) if name == "facts" else summaries_schema_sql(version)


def _relation(table: str | sql.Composable, schema: str | None) -> sql.Composable:
    if isinstance(table, sql.Composable):
        return table
    return sql.Identifier(schema, table) if schema else sql.Identifier(table)


def subject_checksums(conn: psycopg.Connection, spec: TableSpec, schema: str | None) -> dict[str, str]:
    """``{subject_id: md5}`` over the subject's rows of ``spec`` as canonical JSON (``tsv``
    left out), in key order; run with the session time zone set to UTC."""
    order = sql.SQL(", ").join(sql.Identifier(k) for k in spec.keys)
    query = sql.SQL(
        "SELECT subject_id, md5(string_agg((to_jsonb(t) - 'tsv')::text, E'\\n' ORDER BY {order}))"
        " FROM {table} t GROUP BY subject_id"
    ).format(order=order, table=_relation(spec.name, schema))
    return {str(s): str(h) for s, h in conn.execute(query)}


def subject_rows(
    conn: psycopg.Connection, spec: TableSpec, schema: str | None, subjects: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """``{row key: row as a JSON dict}`` of ``spec``'s rows of ``subjects`` (``tsv`` left out)."""
    query = sql.SQL("SELECT to_jsonb(t) - 'tsv' FROM {table} t WHERE subject_id = ANY(%s)").format(
        table=_relation(spec.name, schema)
    )
    out: dict[str, dict[str, Any]] = {}
    for (row,) in conn.execute(query, (list(subjects),)):
        out[spec.key_of(row)] = row
    return out


def connect_args(pool: ConnectionPool) -> tuple[str, dict[str, Any]]:
    """The conninfo and connection keyword arguments ``pool`` connects with."""
    conninfo = pool.conninfo if isinstance(pool.conninfo, str) else pool.conninfo()
    kwargs = pool.kwargs if not callable(pool.kwargs) else pool.kwargs()
    return conninfo, dict(kwargs or {})


@contextmanager
def scratch_schema(pool: ConnectionPool) -> Iterator[tuple[str, ConnectionPool]]:
    """A new schema and a small pool whose ``search_path`` puts it before the live one,
    so unqualified table names the projection creates or writes resolve to the scratch
    schema, and the ones it only reads (``tombstones``, ``memory_keys``) to the live
    ones. The schema is dropped afterwards."""
    schema = f"memledger_verify_{uuid.uuid4().hex[:12]}"
    with pool.connection() as conn:
        live_path = str(conn.execute("SELECT current_setting('search_path')").fetchone()[0])  # type: ignore[index]
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.commit()
    path = sql.SQL("SET search_path TO {}, {}").format(sql.Identifier(schema), sql.SQL(live_path))

    def configure(conn: psycopg.Connection) -> None:
        conn.execute(path)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.commit()

    conninfo, kwargs = connect_args(pool)
    scratch = ConnectionPool(conninfo, kwargs=kwargs, min_size=1, max_size=2, configure=configure, open=False)
    try:
        scratch.open(wait=True, timeout=30)
        yield schema, scratch
    finally:
        scratch.close()
        with pool.connection() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            conn.commit()


def _require_isolated(scratch: ConnectionPool, schema: str, tables: Sequence[str]) -> None:
    """Check that every table a fold writes resolves to the scratch schema.

    Raises:
        VerifyError: one resolves elsewhere (the fold would write a live table).
    """
    with scratch.connection() as conn:
        for table in tables:
            row = conn.execute(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.oid = to_regclass(%s)",
                (table,),
            ).fetchone()
            if row is None or row[0] != schema:
                raise VerifyError(f"scratch: {table} resolves to {row[0] if row else 'nothing'}, not {schema}")


def _classify(report: VerifyReport, found: list[Difference], pending_ids: set[str]) -> None:
    for d in found:
        pending = d.memory_id is not None and d.memory_id in pending_ids
        if d.against == "reference":
            (report.reference_pending if pending else report.reference_differences).append(d)
        else:
            (report.pending if pending else report.differences).append(d)


def verify_postgres(
    pool: ConnectionPool,
    keyring: Keyring,
    log: EventLog,
    name: Literal["facts", "summaries"],
    version: int = 1,
    progress: Progress | None = None,
) -> VerifyReport:
    """Verify the Postgres projection ``name_v{version}`` (see the module docstring).

    Raises:
        VerifyError: unknown projection, or the scratch schema is not isolated.
        psycopg.Error: the database failed.
    """
    specs = tables_of(name, version)
    projection_id = f"{name}_v{version}"
    conninfo, kwargs = connect_args(pool)
    with psycopg.connect(conninfo, **kwargs) as live:
        live.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        live.read_only = True
        try:
            live.execute("SET LOCAL TIME ZONE 'UTC'")
            positions = base.load_positions(live, projection_id)  # the snapshot starts here
            live_sums = {s.name: subject_checksums(live, s, None) for s in specs}
            report = VerifyReport(projection_id, positions)
            with scratch_schema(pool) as (schema, scratch):
                with scratch.connection() as conn:
                    conn.execute(base.SCHEMA_SQL + marks.SCHEMA_SQL)
                    conn.execute(_ddl(name, version))
                    conn.commit()
                _require_isolated(scratch, schema, [*BOOKKEEPING, *(s.name for s in specs)])
                content = ContentAccess(scratch, keyring)
                projection: PositionedProjection = (
                    FactsProjection(scratch, content, version)
                    if name == "facts"
                    else SummariesProjection(scratch, content, version)
                )
                reference = ReferenceFeed(scratch, keyring, content.erased_among)
                stats = fold(log, projection, positions, progress=progress, observe=reference)
                report.events_folded, report.records_skipped = stats.events, stats.skipped
                pending_ids = destroyed_after(log, positions)
                subjects: set[str] = set()
                differing: set[str] = set()
                with scratch.connection() as conn:
                    for spec in specs:
                        fold_sums = subject_checksums(conn, spec, schema)
                        live_sum = live_sums[spec.name]
                        subjects |= set(fold_sums) | set(live_sum)
                        bad = sorted(s for s in set(fold_sums) | set(live_sum) if fold_sums.get(s) != live_sum.get(s))
                        differing |= set(bad)
                        if not bad:
                            continue
                        a = subject_rows(live, spec, None, bad)
                        b = subject_rows(conn, spec, schema, bad)
                        report.rows_compared += len(a) + len(b)
                        _classify(report, compare_rows(spec.name, a, b, spec), pending_ids)
                    live_marked = live_marks(live, projection_id)
                    if name == "summaries":  # facts' marks are its history, compared above
                        folded = compare_rows(
                            f"revision_marks[{projection_id}]", live_marked, live_marks(conn, projection_id), MARKS
                        )
                        _classify(report, folded, pending_ids)
                    conn.commit()
                expected = expected_tables(reference.fold, name, version)
                found = compare_tables(live_tables(live, name, version), expected, specs)
                if name == "summaries":
                    found += compare_marks(projection_id, live_marked, expected_marks(reference.fold))
                _classify(report, found, pending_ids)
        finally:
            live.rollback()
    report.subjects, report.subjects_differing = len(subjects), len(differing)
    marked = ", revision_marks" if name == "summaries" else ""
    report.compared = (
        "every column except tsv of "
        + ", ".join(s.name for s in specs)
        + marked
        + "; per-subject md5 first, then row by row; and every row against the reference fold"
    )
    return report


# -- vectors -------------------------------------------------------------------------------


def _all_points(index: VectorIndex, batch: int = 256) -> dict[str, VectorPoint]:
    ids = index.scroll_ids()
    out: dict[str, VectorPoint] = {}
    for i in range(0, len(ids), batch):
        out.update(index.retrieve(ids[i : i + batch]))
    return out


def verify_vectors(
    pool: ConnectionPool,
    keyring: Keyring,
    log: EventLog,
    live_index: VectorIndex,
    embedder: Embedder,
    version: int = 1,
    progress: Progress | None = None,
) -> VerifyReport:
    """Verify the vectors projection ``vectors_v{version}`` whose points are in
    ``live_index`` (see the module docstring). The fold embeds with ``embedder`` into an
    in-memory Qdrant collection; its positions go to a scratch schema.

    Raises:
        VerifyError: the scratch schema is not isolated.
        VectorIndexError, psycopg.Error: a store failed.
    """
    from projections.qdrant_client_index import QdrantClientIndex
    from projections.vectors import VectorsProjection

    projection_id = f"vectors_v{version}"
    with pool.connection() as conn:
        positions = base.load_positions(conn, projection_id)
    live_points = _all_points(live_index)
    with pool.connection() as conn:
        live_marked = live_marks(conn, projection_id)
        after = base.load_positions(conn, projection_id)
    report = VerifyReport(projection_id, positions)
    if after != positions:
        report.warnings.append(
            "the live projection advanced while its points were read (is a worker running?): stop it for an exact check"
        )
    scratch_index = QdrantClientIndex.for_path(":memory:", f"verify_{projection_id}")
    try:
        with scratch_schema(pool) as (schema, scratch):
            queue = embedding_queue.table_name(version)
            with scratch.connection() as conn:  # the fold's own queue too: it must not take live rows
                conn.execute(base.SCHEMA_SQL + marks.SCHEMA_SQL + embedding_queue.schema_sql(version))
                conn.commit()
            _require_isolated(scratch, schema, [*BOOKKEEPING, queue])
            content = ContentAccess(scratch, keyring)
            projection = VectorsProjection(scratch, scratch_index, embedder, content, version)
            reference = ReferenceFeed(scratch, keyring, content.erased_among)
            stats = fold(log, projection, positions, progress=progress, observe=reference)
            with scratch.connection() as conn:
                folded_marks = live_marks(conn, projection_id)
        folded = _all_points(scratch_index)
    finally:
        scratch_index.close()
    report.events_folded, report.records_skipped = stats.events, stats.skipped
    with pool.connection() as conn:  # applied in log order, its vector still being computed: no point yet
        queued = embedding_queue.memory_ids(conn, version)
    pending_ids = destroyed_after(log, positions) | queued
    differing, found = compare_points(live_index.collection, live_points, folded)
    found += compare_rows(f"revision_marks[{projection_id}]", live_marked, folded_marks, MARKS)
    _, against_reference = compare_vectors(
        live_index.collection, live_points, expected_points(reference.fold, embedder)
    )
    found += against_reference + compare_marks(projection_id, live_marked, expected_marks(reference.fold))
    _classify(report, found, pending_ids)
    report.subjects = len({str(p.payload.get("subject_id")) for p in (*live_points.values(), *folded.values())})
    report.subjects_differing = len(differing)
    report.rows_compared = len(live_points) + len(folded)
    report.compared = (
        f"point ids, every payload field (per-subject md5 first), every vector by cosine >= {VECTOR_COSINE_MIN}"
        f" (fold embedded with {embedder.model_name}) and revision_marks; and all of it against the reference fold"
    )
    return report
