"""The commit marker of every command: one ``ledger_commits`` row, written in the
command's own transaction.

When the connection is lost while a transaction is committing, the client cannot tell
whether the commit took place. The marker answers it afterwards: the command committed
if and only if its row exists (``was_committed``, asked on a new connection). Rows are
kept for ``KEEP_S`` seconds, long enough to ask.
"""

from __future__ import annotations

import logging
import time

import psycopg
from psycopg_pool import ConnectionPool

from ledger import write_behind
from ledger.pgschema import ensure_schema

log = logging.getLogger(__name__)

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS ledger_commits (
    command_id    text PRIMARY KEY,
    command       text NOT NULL,
    events        integer NOT NULL,
    committed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_commits_at ON ledger_commits (committed_at);
"""

KEEP_S = 86_400
"""How long a commit marker is kept, in seconds (one day)."""


def install(conn: psycopg.Connection) -> None:
    """Create ``ledger_commits`` if missing."""
    ensure_schema(conn, "ledger_commits", SCHEMA_SQL)


def record(conn: psycopg.Connection, command_id: str, command: str, events: int) -> None:
    """Write the marker of ``command_id`` in the caller's (the command's) transaction."""
    write_behind.insert(conn, "ledger_commits", ("command_id", "command", "events"), (command_id, command, events))


def was_committed(pool: ConnectionPool, command_id: str, attempts: int = 5, wait_s: float = 0.5) -> bool | None:
    """Whether the command ``command_id`` committed, asked on a new connection: ``True`` or
    ``False``, or ``None`` when PostgreSQL did not answer after ``attempts`` tries
    ``wait_s`` seconds apart."""
    for attempt in range(attempts):
        try:
            with pool.connection() as conn:
                row = conn.execute("SELECT 1 FROM ledger_commits WHERE command_id = %s", (command_id,)).fetchone()
            return row is not None
        except psycopg.Error as exc:
            log.warning("asking whether command %s committed failed (attempt %d): %s", command_id, attempt + 1, exc)
            time.sleep(wait_s)
    return None


def prune(conn: psycopg.Connection, keep_s: float = KEEP_S) -> int:
    """Delete markers older than ``keep_s`` seconds; returns how many."""
    return conn.execute(
        "DELETE FROM ledger_commits WHERE committed_at < now() - make_interval(secs => %s)", (keep_s,)
    ).rowcount
