"""Batched writes to PostgreSQL for a projection's batch of events, in log order.

A projection that wrote each event with its own statements paid a network round trip
per statement (the facts replay spent 71% of its time waiting on them). A
:class:`SqlBatch` sends every statement of a batch in one pipeline (psycopg's pipeline
mode: statements are queued and the results are read at the end) and folds the rows
inserted into one table into one ``INSERT ... SELECT ... FROM jsonb_to_recordset(...)``
whose text never changes (so psycopg parses it once and PostgreSQL plans it once: a
multi-row ``VALUES`` list is a new statement for every row count, and parsing its
thousands of placeholders took half of a facts replay).

The effects are those of the statements run one by one in the order given. An insert is
buffered until a later statement touches one of the memories it names (the buffer is
sent first) or the batch ends; with ``inserts_first`` every statement waits instead until
the inserts of the whole batch are sent, which is the same thing when no statement given
before an insert touches a row that insert would create (the facts projection: a
memory's ``MemoryWritten``, revision 1, is applied before any other change of it, or not
at all, by the revision rule). Buffered inserts of the same key keep the first row (the
one the log order inserts; later ones would be ``ON CONFLICT DO NOTHING`` no-ops).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

MAX_ROWS = 2000
"""Rows per ``INSERT`` statement (more are sent as several statements)."""


@dataclass(frozen=True)
class InsertInto:
    """One table's inserts: ``columns`` are (name, PostgreSQL type) pairs, ``suffix``
    follows the ``SELECT`` (e.g. ``ON CONFLICT DO NOTHING``). The rows are sent as ONE
    JSON array of objects, turned back into rows by ``jsonb_to_recordset`` (so the
    statement's text never changes, and encoding the rows is ``json.dumps``, in C, not a
    Python dumper per value: psycopg's array dumpers took half of a facts replay).
    Values: ``str``, numbers, ``bool``, ``None``, aware ``datetime`` (sent in ISO 8601),
    lists (for array types) and ``Jsonb`` (for ``jsonb``: its object is sent)."""

    table: str
    columns: tuple[tuple[str, str], ...]
    suffix: str = ""

    @property
    def sql(self) -> str:
        """``INSERT INTO table (columns) SELECT columns FROM jsonb_to_recordset(%s) ...``."""
        names = ", ".join(name for name, _ in self.columns)
        types = ", ".join(f"{name} {kind}" for name, kind in self.columns)
        rows = f"jsonb_to_recordset(%s::jsonb) AS u({types})"
        return f"INSERT INTO {self.table} ({names}) SELECT {names} FROM {rows} {self.suffix}"

    def document(self, rows: Sequence[Sequence[Any]]) -> str:
        """The rows as the JSON text ``sql`` takes."""
        names = [name for name, _ in self.columns]
        return json.dumps([dict(zip(names, row, strict=True)) for row in rows], default=_json_value)


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Jsonb):
        return value.obj
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not a value SqlBatch sends")


@dataclass
class _Buffer:
    into: InsertInto
    rows: dict[Hashable, Sequence[Any]] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)


class SqlBatch:
    """The statements of one batch of events on one connection, inside the caller's
    transaction. Use it as a context manager: on exit without an error the buffered
    inserts (then, with ``inserts_first``, the statements) are sent and the pipeline's
    results read, raising the first statement error: the transaction is then aborted,
    nothing of the batch commits, and the batch is retried whole."""

    def __init__(self, conn: psycopg.Connection, inserts_first: bool = False) -> None:
        self._conn = conn
        self._inserts_first = inserts_first
        self._buffers: dict[str, _Buffer] = {}
        self._held: list[tuple[str, Sequence[Any]]] = []
        self._pipeline: Any = None

    def __enter__(self) -> SqlBatch:
        self._pipeline = self._conn.pipeline()
        self._pipeline.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.flush()
                for query, params in self._held:
                    self._conn.execute(query, params, prepare=True)
                self._held.clear()
        finally:
            self._pipeline.__exit__(*exc)

    def insert(self, into: InsertInto, row: Sequence[Any], key: Hashable, touches: Sequence[str]) -> None:
        """Buffer one row for ``into``. ``key`` identifies the row (the first row of a key
        is kept); ``touches``: the memories a later statement may change it through (a
        later :meth:`execute` touching one of them sends the buffer first).

        Raises:
            ValueError: the row does not have one value per column.
        """
        if len(row) != len(into.columns):
            raise ValueError(f"row: {len(row)} values for {len(into.columns)} columns of {into.table}")
        buffer = self._buffers.get(into.table)
        if buffer is None:
            buffer = self._buffers[into.table] = _Buffer(into)
        buffer.rows.setdefault(key, row)
        buffer.touched.update(touches)
        if len(buffer.rows) >= MAX_ROWS:
            self._send(buffer)

    def execute(self, query: str, params: Sequence[Any], touches: Sequence[str] = ()) -> None:
        """Queue one statement (no result is read). Buffered inserts of the memories it
        ``touches`` are sent before it, so it sees them, as in log order (with
        ``inserts_first``, every insert of the batch is sent before it)."""
        if self._inserts_first:
            self._held.append((query, params))
            return
        wanted = set(touches)
        for buffer in self._buffers.values():
            if buffer.rows and not wanted.isdisjoint(buffer.touched):
                self._send(buffer)
        self._conn.execute(query, params, prepare=True)

    def flush(self) -> None:
        """Send every buffered insert."""
        for buffer in self._buffers.values():
            self._send(buffer)

    def _send(self, buffer: _Buffer) -> None:
        if not buffer.rows:
            return
        rows = list(buffer.rows.values())
        buffer.rows.clear()
        buffer.touched.clear()
        self._conn.execute(buffer.into.sql, (buffer.into.document(rows),), prepare=True)
