"""Stalled partitions: where a projection stopped rather than skip a record, and why.

A projection stops at an ``ErasureRequested`` it cannot read (malformed, or of a schema
version this reader cannot upcast), since an erasure is never skipped nor dead-lettered
(invariant 3). It stops on that partition only: the other partitions of the projection
go on. The stall is recorded in ``projection_stalls`` (one row per projection version
and partition: the offset of the record it stopped at, the reason, since when, UTC), so
that ``memledger lag`` and ``memledger dlq`` can show it. A stall is over once the
projection's stored position passes its offset (a reader that can read the record was
deployed and applied it): ``stalled`` leaves such rows out and ``clear`` deletes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from contracts import iso_utc
from ledger.pgschema import ensure_schema

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS projection_stalls (
    projection text NOT NULL,
    partition integer NOT NULL,
    "offset" bigint NOT NULL,
    reason text NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, partition)
);
"""


@dataclass(frozen=True)
class Stall:
    """Projection version ``projection`` (e.g. ``facts_v1``) stopped on ``partition`` at
    the record at ``offset`` for ``reason``, first at ``since`` (UTC)."""

    projection: str
    partition: int
    offset: int
    reason: str
    since: datetime

    @property
    def kind(self) -> str:
        """What stopped it, without the detail (``unreadable erasure``): a bounded value,
        fit for a metric label (the detail may quote the record)."""
        return self.reason.split(":", 1)[0].strip()

    def to_dict(self) -> dict[str, object]:
        return {
            "projection": self.projection,
            "partition": self.partition,
            "offset": self.offset,
            "reason": self.reason,
            "since": iso_utc(self.since),
        }


def record(conn: psycopg.Connection, projection: str, partition: int, offset: int, reason: str) -> None:
    """Record (or update) the stall of ``projection`` on ``partition`` at ``offset``; a
    stall seen again at the same offset keeps its ``since``. Commits on its own."""
    ensure_schema(conn, "projection_stalls", SCHEMA_SQL)
    with conn.transaction():
        conn.execute(
            """
            INSERT INTO projection_stalls (projection, partition, "offset", reason) VALUES (%s, %s, %s, %s)
            ON CONFLICT (projection, partition) DO UPDATE
               SET reason = EXCLUDED.reason,
                   since = CASE WHEN projection_stalls."offset" = EXCLUDED."offset"
                                THEN projection_stalls.since ELSE now() END,
                   "offset" = EXCLUDED."offset"
            """,
            (projection, partition, offset, reason),
        )


def clear(conn: psycopg.Connection, projection: str) -> int:
    """Delete the stalls of ``projection`` that its stored positions have passed; returns
    how many. Commits on its own."""
    if conn.execute("SELECT to_regclass('projection_stalls')").fetchone() == (None,):
        return 0
    with conn.transaction():
        cur = conn.execute(
            """
            DELETE FROM projection_stalls s USING projection_positions p
             WHERE s.projection = %s AND p.projection = s.projection AND p.partition = s.partition
               AND p."offset" >= s."offset"
            """,
            (projection,),
        )
        return cur.rowcount


def stalled(conn: psycopg.Connection, projection: str | None = None) -> list[Stall]:
    """The stalls still in force (the projection's stored position is before the stall's
    offset), of ``projection`` or of every projection version, ordered by projection and
    partition."""
    if conn.execute("SELECT to_regclass('projection_stalls')").fetchone() == (None,):
        return []
    rows = conn.execute(
        """
        SELECT s.projection, s.partition, s."offset", s.reason, s.since
          FROM projection_stalls s
          LEFT JOIN projection_positions p ON p.projection = s.projection AND p.partition = s.partition
         WHERE (%(projection)s::text IS NULL OR s.projection = %(projection)s) AND COALESCE(p."offset", -1) < s."offset"
         ORDER BY s.projection, s.partition
        """,
        {"projection": projection},
    ).fetchall()
    return [Stall(str(p), int(part), int(off), str(reason), since) for p, part, off, reason, since in rows]
