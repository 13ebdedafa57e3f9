"""Creating tables without disturbing a running system.

``CREATE ... IF NOT EXISTS`` still takes table locks, so running it on every start of
every process deadlocks with writers (seen under load: a worker starting while an
ingest holds row locks). ``ensure_schema`` runs the DDL only when its marker table is
missing, under a transaction-scoped advisory lock so that concurrent starters create it
once.
"""

from __future__ import annotations

import logging
import time
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


def vacuum(
    pool: ConnectionPool,
    tables: Sequence[str],
    full: bool = False,
    lock_timeout_s: float = 5.0,
    snapshot_wait_s: float = 15.0,
) -> None:
    """``VACUUM`` the given tables (trusted names), in autocommit mode: an ``UPDATE`` or
    ``DELETE`` leaves the old row version in the table file until vacuum, so a destroyed
    data key or a removed text would stay on disk.

    A plain ``VACUUM`` frees the space of old row versions but does not overwrite it: the
    bytes stay until the page is rewritten. ``full=True`` runs ``VACUUM FULL``, which
    writes the table into a new file and deletes the old one; it holds an exclusive lock
    on the table meanwhile, so it is meant for small tables (the key store), and it gives
    up after ``lock_timeout_s`` seconds of waiting for the lock (then a plain ``VACUUM``
    runs). ``VACUUM FULL`` also copies every row version that a snapshot still open in the
    database may see (PostgreSQL's "recently dead" rows): one transaction begun before the
    deleting command committed, such as autovacuum's own ``ANALYZE`` or a long read, kept
    the old version in the new file. So it first waits, up to ``snapshot_wait_s`` seconds,
    for such snapshots to end (``wait_for_older_snapshots``). Best effort: a failure or a wait that
    gives up is logged, not raised. Copies in the WAL stay until its segments are recycled,
    and in backups for as long as they are kept (README, "What erasure removes from disk").
    """
    try:
        with pool.connection() as conn:
            conn.autocommit = True
            try:
                if full and (n := wait_for_older_snapshots(conn, snapshot_wait_s)):
                    log.warning(
                        "VACUUM FULL %s: %d older snapshot(s) still open after %.0f s; the row versions they "
                        "may see stay in the new file until the next rewrite (memledger compact)",
                        ", ".join(tables),
                        n,
                        snapshot_wait_s,
                    )
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


def wait_for_older_snapshots(conn: psycopg.Connection, timeout_s: float) -> int:
    """Wait, up to ``timeout_s`` seconds (polling every 50 ms), until no other session of
    this database holds a snapshot or a transaction id taken before this call: a
    ``backend_xmin`` or ``backend_xid`` (in ``pg_stat_activity``) older than a transaction
    id taken by this call (``pg_current_xact_id``), compared by ``age`` (wraparound-safe),
    means the row versions deleted before the call may still be visible to that session
    (an open transaction's own id holds back the removal horizon, PostgreSQL's
    ``ComputeXidHorizons``) and no vacuum may remove them. Returns how many sessions still
    hold one (0: every row version deleted before the call is now removable). ``conn`` must be
    in autocommit mode (a transaction of its own would be one such snapshot)."""
    # a transaction id of its own (autocommit: it ends with the statement): every id assigned
    # before the call is older. A snapshot's xmax is not that bound: it is one past the last
    # *completed* id, so a transaction still open and the newest of all would pass for younger
    row = conn.execute("SELECT pg_current_xact_id()::xid::text").fetchone()
    horizon = str(row[0]) if row else "0"
    deadline = time.monotonic() + timeout_s
    while True:
        counted = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND (age(backend_xmin) > age(%s::text::xid) OR age(backend_xid) > age(%s::text::xid))",
            (horizon, horizon),
        ).fetchone()
        n = int(counted[0]) if counted else 0
        if n == 0 or time.monotonic() >= deadline:
            return n
        time.sleep(0.05)
