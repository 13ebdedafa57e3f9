"""Creating tables without disturbing a running system.

``CREATE ... IF NOT EXISTS`` still takes table locks, so running it on every start of
every process deadlocks with writers (seen under load: a worker starting while an
ingest holds row locks). ``ensure_schema`` runs the DDL only when its marker table is
missing, under a transaction-scoped advisory lock so that concurrent starters create it
once.
"""

from __future__ import annotations

import psycopg

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
