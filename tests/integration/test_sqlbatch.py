"""SqlBatch on PostgreSQL: one pipeline per batch, inserts folded into multi-row
statements, and the effects in the order the statements were given."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from projections.sqlbatch import MAX_ROWS, SqlBatch

pytestmark = pytest.mark.integration

COLUMNS = ("memory_id", "revision", "status")
INSERT = "ON CONFLICT (memory_id) DO NOTHING"


def _table(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE t (memory_id text PRIMARY KEY, revision int NOT NULL, status text NOT NULL)")


def test_statements_see_the_inserts_given_before_them_and_the_first_row_of_a_key_wins(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with conn.transaction(), SqlBatch(conn) as batch:
            batch.insert("t", COLUMNS, ("a", 1, "active"), "a", ("a",), INSERT)
            batch.insert("t", COLUMNS, ("b", 1, "active"), "b", ("b",), INSERT)
            batch.insert("t", COLUMNS, ("a", 1, "other"), "a", ("a",), INSERT)  # a later copy: no effect
            batch.execute(
                "UPDATE t SET status = 'superseded', revision = 2 WHERE memory_id = %s AND revision < 2", ("a",), ("a",)
            )
            batch.insert("t", COLUMNS, ("a", 1, "again"), "a", ("a",), INSERT)  # after the update: conflicts, no effect
            batch.execute("DELETE FROM t WHERE memory_id = %s", ("b",), ("b",))
            batch.insert("t", COLUMNS, ("c", 1, "active"), "c", ("c",), INSERT)
        rows = conn.execute("SELECT memory_id, revision, status FROM t ORDER BY 1").fetchall()
    assert rows == [("a", 2, "superseded"), ("c", 1, "active")]


def test_more_rows_than_one_statement_takes_are_all_inserted(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with conn.transaction(), SqlBatch(conn) as batch:
            for n in range(MAX_ROWS * 2 + 7):
                batch.insert("t", COLUMNS, (f"m{n}", 1, "active"), f"m{n}", (f"m{n}",), INSERT)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (MAX_ROWS * 2 + 7,)


def test_a_failing_statement_fails_the_batch_and_nothing_of_it_commits(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with pytest.raises(psycopg.errors.NotNullViolation):
            with conn.transaction(), SqlBatch(conn) as batch:
                batch.insert("t", COLUMNS, ("a", 1, "active"), "a", ("a",), INSERT)
                batch.execute("UPDATE t SET status = NULL WHERE memory_id = %s", ("a",), ("a",))
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
