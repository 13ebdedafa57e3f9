"""Rows a command inserts, written per batch rather than per row.

A command of the ledger inserts a head (``ledger_memories``) and a data key
(``memory_keys``) for every memory it writes. Sent one ``INSERT`` at a time, a batch of
500 writes costs 1,000 round trips to PostgreSQL; held back and sent as one ``COPY`` per
table, it costs two. While a command runs with ``deferring(conn)``, ``insert`` holds rows
back, and every statement that may read those tables first calls ``barrier(conn)``, which
sends what is held (``ledger.state`` and ``ledger.crypto`` do so before each of theirs):
a read inside the command sees every row the command inserted before it, exactly as
without deferral. The command's own staging calls ``barrier`` before it commits.

Outside ``deferring`` (any other caller of ``state`` or ``crypto``), ``insert`` writes at
once. Data keys a command created are also remembered while it runs (``data_key``), so
sealing the personal fields under a memory's new key does not read the key back.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg


class WriteBehind:
    """The rows and data keys one command holds back, per table in insertion order."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, tuple[str, ...]], list[Sequence[object]]] = {}
        self.data_keys: dict[str, bytes] = {}

    def add(self, table: str, columns: tuple[str, ...], row: Sequence[object]) -> None:
        self._rows.setdefault((table, columns), []).append(row)

    def flush(self, conn: psycopg.Connection[Any]) -> None:
        """Send every held row (one ``COPY`` per table and column list)."""
        pending, self._rows = self._rows, {}
        for (table, columns), rows in pending.items():
            with conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)


_ACTIVE: weakref.WeakKeyDictionary[psycopg.Connection[Any], WriteBehind] = weakref.WeakKeyDictionary()


@contextmanager
def deferring(conn: psycopg.Connection[Any]) -> Iterator[WriteBehind]:
    """Hold back the inserts made on ``conn`` until a ``barrier`` (the caller calls one
    before it commits). On leaving, what is still held is dropped: the caller's
    transaction is being rolled back then, or everything was sent."""
    held = WriteBehind()
    _ACTIVE[conn] = held
    try:
        yield held
    finally:
        _ACTIVE.pop(conn, None)


def active(conn: psycopg.Connection[Any]) -> WriteBehind | None:
    """The rows ``conn`` holds back, when a command runs with ``deferring``."""
    return _ACTIVE.get(conn)


def insert(conn: psycopg.Connection[Any], table: str, columns: tuple[str, ...], row: Sequence[object]) -> None:
    """Insert ``row`` into ``table`` (trusted names): held back under ``deferring``, at once
    otherwise."""
    held = _ACTIVE.get(conn)
    if held is not None:
        held.add(table, columns, row)
        return
    marks = ", ".join(["%s"] * len(columns))
    conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", tuple(row))


def barrier(conn: psycopg.Connection[Any]) -> None:
    """Send the rows ``conn`` holds back, before a statement that may read them."""
    held = _ACTIVE.get(conn)
    if held is not None:
        held.flush(conn)
