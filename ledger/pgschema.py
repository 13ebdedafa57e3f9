"""Creating tables without disturbing a running system.

``CREATE ... IF NOT EXISTS`` still takes table locks, so running it on every start of
every process deadlocks with writers (seen under load: a worker starting while an
ingest holds row locks). ``ensure_schema`` runs the DDL only when its marker table is
missing, under a transaction-scoped advisory lock so that concurrent starters create it
once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)

_SCHEMA_LOCK = 0x6D656D6C  # "meml": one advisory lock key for all DDL of this project


def ensure_schema(conn: psycopg.Connection, marker_table: str, ddl: str) -> bool:
    """Run ``ddl`` unless ``marker_table`` exists; returns whether it ran."""
    if conn.execute("SELECT to_regclass(%s)", (marker_table,)).fetchone() != (None,):
        return False
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        if conn.execute("SELECT to_regclass(%s)", (marker_table,)).fetchone() != (None,):
            return False
        conn.execute(ddl)
    return True


def vacuum(pool: ConnectionPool, tables: Sequence[str], full: bool = False, lock_timeout_s: float = 5.0) -> None:
    """``VACUUM`` the given tables (trusted names), in autocommit mode: an ``UPDATE`` or
    ``DELETE`` leaves the old row version in the table file until vacuum, so a destroyed
    data key or a removed text would stay on disk.

    A plain ``VACUUM`` frees the space of old row versions but does not overwrite it: the
    bytes stay until the page is rewritten. ``full=True`` runs ``VACUUM FULL``, which
    writes the table into a new file and deletes the old one; it holds an exclusive lock
    on the table meanwhile, so it is meant for small tables (the key store), and it gives
    up after ``lock_timeout_s`` seconds of waiting for the lock (then a plain ``VACUUM``
    runs). Best effort: a failure is logged, not raised. Copies in the WAL stay until its
    segments are recycled, and in backups for as long as they are kept (README, "What
    erasure removes from disk").
    """
    try:
        with pool.connection() as conn:
            conn.autocommit = True
            try:
                conn.execute(f"SET lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
                for table in tables:
                    try:
                        conn.execute(f"VACUUM {'FULL ' if full else ''}{table}")
                    except psycopg.errors.LockNotAvailable:
                        log.warning("VACUUM FULL %s: the table stayed busy; a plain VACUUM runs instead", table)
                        conn.execute(f"VACUUM {table}")
            finally:
                conn.execute("RESET lock_timeout")
                conn.autocommit = False
    except psycopg.Error as exc:
        log.warning("vacuum of %s failed (autovacuum will do it later): %s", ", ".join(tables), exc)
