"""Batched writes to PostgreSQL for a projection's batch of events, in log order.

A projection that wrote each event with its own statements paid a network round trip
per statement (the facts replay spent 71% of its time waiting on them). A
:class:`SqlBatch` sends every statement of a batch in one pipeline (psycopg's pipeline
mode: statements are queued and the results are read at the end) and folds the inserts
of many events into one multi-row ``INSERT`` per table.

The order of effects is the log order, as if each statement ran on its own: an insert is
buffered only until a statement touches a row it inserts (that statement then waits for
the buffered rows to be sent first), and statements are sent in the order they are
given. Buffered inserts of the same key keep the first row (the one the log order would
insert; later ones are ``ON CONFLICT DO NOTHING`` no-ops anyway).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

MAX_ROWS = 1000
"""Rows per multi-row ``INSERT`` (each row's values are parameters: PostgreSQL allows 65535)."""


@dataclass
class _Inserts:
    """Rows buffered for one ``INSERT INTO table (columns) VALUES ... <suffix>``."""

    head: str
    suffix: str
    width: int
    rows: dict[Hashable, Sequence[Any]] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)


class SqlBatch:
    """The statements of one batch of events on one connection, inside the caller's
    transaction. Use it as a context manager: on exit without an error the buffered
    inserts are sent and the pipeline's results read (raising the first statement error:
    the transaction is then aborted, nothing of the batch commits, and the batch is
    retried whole)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self._inserts: dict[str, _Inserts] = {}
        self._pipeline: Any = None

    def __enter__(self) -> SqlBatch:
        self._pipeline = self._conn.pipeline()
        self._pipeline.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.flush()
        finally:
            self._pipeline.__exit__(*exc)

    def insert(
        self,
        table: str,
        columns: Sequence[str],
        row: Sequence[Any],
        key: Hashable,
        touches: Sequence[str],
        suffix: str = "",
    ) -> None:
        """Buffer one row for ``INSERT INTO table (columns) VALUES ... suffix`` (e.g.
        ``ON CONFLICT DO NOTHING``). ``key`` identifies the row (the first row of a key
        is kept); ``touches``: the memories a later statement may change it through (a
        later :meth:`execute` touching one of them sends the buffer first)."""
        if len(row) != len(columns):
            raise ValueError(f"row: {len(row)} values for {len(columns)} columns of {table}")
        name = f"{table}\x00{','.join(columns)}\x00{suffix}"
        buffer = self._inserts.get(name)
        if buffer is None:
            buffer = self._inserts[name] = _Inserts(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ", suffix, len(columns)
            )
        buffer.rows.setdefault(key, row)
        buffer.touched.update(touches)
        if len(buffer.rows) >= MAX_ROWS:
            self._send(buffer)

    def execute(self, query: str, params: Sequence[Any], touches: Sequence[str] = ()) -> None:
        """Queue one statement (no result is read). Buffered inserts of the memories it
        ``touches`` are sent before it, so it sees them, as in log order."""
        self.send_touching(touches)
        self._conn.execute(query, params, prepare=True)

    def send_touching(self, touches: Sequence[str]) -> None:
        """Send the buffered inserts of the memories ``touches`` names."""
        wanted = set(touches)
        for buffer in self._inserts.values():
            if buffer.rows and not wanted.isdisjoint(buffer.touched):
                self._send(buffer)

    def flush(self) -> None:
        """Send every buffered insert."""
        for buffer in self._inserts.values():
            self._send(buffer)

    def _send(self, buffer: _Inserts) -> None:
        if not buffer.rows:
            return
        rows = list(buffer.rows.values())
        buffer.rows.clear()
        buffer.touched.clear()
        placeholders = "(" + ", ".join(["%s"] * buffer.width) + ")"
        query = buffer.head + ", ".join([placeholders] * len(rows)) + (" " + buffer.suffix if buffer.suffix else "")
        self._conn.execute(query, [value for row in rows for value in row], prepare=False)
