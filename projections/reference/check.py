"""Comparing real stores with the reference fold: the rows a Postgres projection holds
(read as Python values) and the points of a vector index, against what
:class:`~projections.reference.fold.ReferenceFold` expects. Each difference is a
:class:`~projections.comparison.Difference` with ``against="reference"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from contracts import Event
from ledger.crypto import Keyring
from ledger.eventlog import LogPosition
from projections.comparison import Difference, TableSpec, compare_points, compare_rows, tables_of
from projections.embedding import Embedder
from projections.reference.fold import ReferenceFold, Row
from projections.reference.readable import Readable, read_sealed
from projections.vector_index import VectorIndex, VectorPoint

GENERATED_COLUMNS = frozenset({"tsv"})
"""Columns computed by Postgres from others (left out of every comparison)."""

Tables = dict[str, dict[str, Row]]
"""table name -> row key (``TableSpec.key_of``) -> row."""


def expected_tables(fold: ReferenceFold, name: Literal["facts", "summaries"], version: int) -> Tables:
    """The rows the reference expects in each table of projection ``name_v{version}``.

    Raises:
        VerifyError: ``name`` is not a Postgres projection.
    """
    specs = tables_of(name, version)
    sources: Sequence[Mapping[Any, Row]] = (
        (fold.facts, fold.history, fold.conflicts) if name == "facts" else (fold.summaries,)
    )
    return {
        spec.name: {spec.key_of(row): row for row in rows.values()} for spec, rows in zip(specs, sources, strict=True)
    }


def live_tables(
    conn: psycopg.Connection,
    name: Literal["facts", "summaries"],
    version: int,
    subjects: Sequence[str] | None = None,
) -> Tables:
    """The rows of projection ``name_v{version}`` (of ``subjects`` only, when given), as
    Python values, without generated columns.

    Raises:
        VerifyError: ``name`` is not a Postgres projection. psycopg.Error.
    """
    out: Tables = {}
    for spec in tables_of(name, version):
        query = sql.SQL("SELECT * FROM {}").format(sql.Identifier(spec.name))
        params: tuple[Any, ...] = ()
        if subjects is not None:
            query = query + sql.SQL(" WHERE subject_id = ANY(%s)")
            params = (list(subjects),)
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            rows = [{k: v for k, v in r.items() if k not in GENERATED_COLUMNS} for r in cur.fetchall()]
        out[spec.name] = {spec.key_of(r): r for r in rows}
    return out


def compare_tables(live: Tables, expected: Tables, specs: Sequence[TableSpec]) -> list[Difference]:
    """Every difference between live rows and the reference's, table by table."""
    out: list[Difference] = []
    for spec in specs:
        found = compare_rows(spec.name, live.get(spec.name, {}), expected.get(spec.name, {}), spec)
        out += [replace(d, against="reference") for d in found]
    return out


def expected_points(
    fold: ReferenceFold, embedder: Embedder, subjects: Sequence[str] | None = None
) -> dict[str, VectorPoint]:
    """The points the reference expects (of ``subjects``, when given), their vectors
    embedded with ``embedder`` and their payload naming its model."""
    chosen = {m: p for m, p in fold.points.items() if subjects is None or p.payload["subject_id"] in subjects}
    vectors = embedder.embed([p.text for p in chosen.values()]) if chosen else []
    return {
        m: VectorPoint(m, tuple(v), p.payload | {"model": embedder.model_name})
        for (m, p), v in zip(chosen.items(), vectors, strict=True)
    }


def live_points(index: VectorIndex, subjects: Sequence[str] | None = None, batch: int = 256) -> dict[str, VectorPoint]:
    """Every point of ``index`` (of ``subjects``, when given)."""
    ids = index.scroll_ids() if subjects is None else [m for s in subjects for m in index.scroll_ids(s)]
    out: dict[str, VectorPoint] = {}
    for i in range(0, len(ids), batch):
        out.update(index.retrieve(ids[i : i + batch]))
    return out


def compare_vectors(
    collection: str, live: Mapping[str, VectorPoint], expected: Mapping[str, VectorPoint]
) -> tuple[set[str], list[Difference]]:
    """Subjects that differ and every difference between live points and the
    reference's (ids, every payload field, vectors by cosine)."""
    differing, found = compare_points(collection, live, expected)
    return differing, [replace(d, against="reference") for d in found]


MARKS = TableSpec("revision_marks", ("memory_id",))
"""The revision marks of one projection (``projections.marks``), keyed by memory."""


def expected_marks(fold: ReferenceFold, subjects: Sequence[str] | None = None) -> dict[str, Row]:
    """The marks the reference expects every store to keep (of ``subjects``, when given)."""
    return {
        m: {"memory_id": m, "subject_id": k.subject_id, "revision": k.revision, "status": k.status}
        for m, k in fold.marks.items()
        if subjects is None or k.subject_id in subjects
    }


def live_marks(conn: psycopg.Connection, projection: str, subjects: Sequence[str] | None = None) -> dict[str, Row]:
    """The marks ``projection`` keeps in ``revision_marks`` (of ``subjects``, when given)."""
    query = "SELECT memory_id, subject_id, revision, status FROM revision_marks WHERE projection = %s"
    params: tuple[Any, ...] = (projection,)
    if subjects is not None:
        query += " AND subject_id = ANY(%s)"
        params += (list(subjects),)
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return {str(r["memory_id"]): dict(r) for r in cur.fetchall()}


def compare_marks(projection: str, live: Mapping[str, Row], expected: Mapping[str, Row]) -> list[Difference]:
    """Every difference between a store's marks and the reference's."""
    found = compare_rows(f"revision_marks[{projection}]", live, expected, MARKS)
    return [replace(d, against="reference") for d in found]


class ReferenceFeed:
    """A reference fold fed a batch at a time (``projections.verify.fold``'s ``observe``):
    the sealed fields of each batch are opened with today's keys through ``pool`` and
    ``keyring``, and its tombstones looked up with ``erased_among``, before it is folded."""

    def __init__(
        self, pool: ConnectionPool, keyring: Keyring, erased_among: Callable[[Sequence[str]], set[str]]
    ) -> None:
        self.fold = ReferenceFold(Readable())
        self._pool = pool
        self._keyring = keyring
        self._erased_among = erased_among

    def __call__(self, items: Sequence[tuple[Event, LogPosition]]) -> None:
        with self._pool.connection() as conn:
            self.fold.readable.extend(read_sealed(conn, self._keyring, [e for e, _ in items], self._erased_among))
        self.fold.fold(items)
