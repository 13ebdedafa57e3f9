"""SqlBatch on PostgreSQL: one pipeline per batch, inserts folded into one statement per
table, and the effects of the statements given one by one, in order."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from projections.sqlbatch import MAX_ROWS, InsertInto, SqlBatch

pytestmark = pytest.mark.integration

INTO = InsertInto(
    "t", (("memory_id", "text"), ("revision", "integer"), ("tags", "text[]")), "ON CONFLICT (memory_id) DO NOTHING"
)
UPDATE = "UPDATE t SET tags = tags || '{updated}', revision = %s WHERE memory_id = %s AND revision < %s"


def _table(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE t (memory_id text PRIMARY KEY, revision int NOT NULL, tags text[] NOT NULL)")


def _rows(conn: psycopg.Connection) -> list[tuple[object, ...]]:
    return conn.execute("SELECT memory_id, revision, tags FROM t ORDER BY 1").fetchall()


def test_statements_see_the_inserts_given_before_them_and_the_first_row_of_a_key_wins(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with conn.transaction(), SqlBatch(conn) as batch:
            batch.insert(INTO, ("a", 1, ["x", "y"]), "a", ("a",))
            batch.insert(INTO, ("b", 1, []), "b", ("b",))
            batch.insert(INTO, ("a", 1, ["other"]), "a", ("a",))  # a later copy: no effect
            batch.execute(UPDATE, (2, "a", 2), ("a",))
            batch.insert(INTO, ("a", 1, ["again"]), "a", ("a",))  # after the update: a conflict, no effect
            batch.execute("DELETE FROM t WHERE memory_id = %s", ("b",), ("b",))
            batch.insert(INTO, ("c", 1, ["z"]), "c", ("c",))
        assert _rows(conn) == [("a", 2, ["x", "y", "updated"]), ("c", 1, ["z"])]


def test_with_inserts_first_every_statement_runs_after_the_batch_inserts(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with conn.transaction(), SqlBatch(conn, inserts_first=True) as batch:
            batch.execute(UPDATE, (2, "a", 2), ("a",))  # given first, runs after a is inserted
            batch.insert(INTO, ("a", 1, ["x"]), "a", ("a",))
        assert _rows(conn) == [("a", 2, ["x", "updated"])]


def test_more_rows_than_one_statement_takes_are_all_inserted(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with conn.transaction(), SqlBatch(conn) as batch:
            for n in range(MAX_ROWS * 2 + 7):
                batch.insert(INTO, (f"m{n}", 1, [str(n)]), f"m{n}", (f"m{n}",))
        assert conn.execute("SELECT count(*), sum(cardinality(tags)) FROM t").fetchone() == (
            MAX_ROWS * 2 + 7,
            MAX_ROWS * 2 + 7,
        )


def test_a_failing_statement_fails_the_batch_and_nothing_of_it_commits(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        _table(conn)
        with pytest.raises(psycopg.errors.NotNullViolation):
            with conn.transaction(), SqlBatch(conn) as batch:
                batch.insert(INTO, ("a", 1, []), "a", ("a",))
                batch.execute("UPDATE t SET revision = NULL WHERE memory_id = %s", ("a",), ("a",))
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
