"""The vectors projection's queue of memory revisions waiting to be embedded.

The vectors projection applies events in log order quickly (payloads, statuses,
deletions, erasure receipts, positions) and leaves the slow part, embedding, to a step
of its own (``VectorsProjection.embed_pending``). A write whose vector is not computed
yet is held in ``vectors_pending_vN``, one row per memory, in the transaction that
stores the projection's position: the payload its point will carry (the same fields, in
clear, as the point's payload: no text), its revision, and the write's text still sealed
under the memory's data key (as in the log: destroying the key makes it unreadable).
Later events of the memory change the row in log order, as they would change the point;
an erasure, supersession, revocation or expiry deletes it. The embedding step writes a
point only for a row that is still there with the same text (``text_event``), holding
its row lock while it does, so nothing the in-order apply removed comes back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from contracts.memory import SealedText
from ledger.eventlog import LogPosition


def table_name(version: int) -> str:
    """The queue of vectors version ``version``: ``vectors_pending_vN``."""
    return f"vectors_pending_v{version}"


def schema_sql(version: int) -> str:
    """DDL of the queue of vectors version ``version``."""
    table = table_name(version)
    return f"""
CREATE TABLE IF NOT EXISTS {table} (
    memory_id      text PRIMARY KEY,
    subject_id     text NOT NULL,
    revision       integer NOT NULL,
    payload        jsonb NOT NULL,
    text_sealed    jsonb NOT NULL,
    text_event     text NOT NULL,
    occurred_at    timestamptz NOT NULL,
    log_partition  integer NOT NULL,
    log_offset     bigint NOT NULL,
    queued_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {table}_position ON {table} (log_partition, log_offset);
CREATE INDEX IF NOT EXISTS {table}_queued ON {table} (queued_at);
"""


@dataclass(frozen=True)
class PendingText:
    """The text a point's vector must embed: sealed as in its write event (``event_id``,
    at log ``position``, occurred at ``occurred_at``, UTC)."""

    sealed: SealedText
    event_id: str
    occurred_at: datetime
    position: LogPosition


@dataclass(frozen=True)
class PendingRow:
    """One queued memory: the payload its point will carry (``revision`` is the
    payload's) and the text to embed."""

    memory_id: str
    subject_id: str
    revision: int
    payload: dict[str, Any]
    text: PendingText


_COLUMNS = "memory_id, subject_id, revision, payload, text_sealed, text_event, occurred_at, log_partition, log_offset"


def _row(values: Sequence[Any]) -> PendingRow:
    memory_id, subject_id, revision, payload, sealed, event_id, occurred_at, partition, offset = values
    text = PendingText(SealedText.model_validate(sealed), str(event_id), occurred_at, LogPosition(partition, offset))
    return PendingRow(str(memory_id), str(subject_id), int(revision), dict(payload), text)


def lock(conn: psycopg.Connection, version: int, memory_ids: Sequence[str]) -> dict[str, PendingRow]:
    """The queued rows of ``memory_ids``, locked until the caller's transaction ends (in
    memory id order, so two lockers never deadlock)."""
    if not memory_ids:
        return {}
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM {table_name(version)} WHERE memory_id = ANY(%s) ORDER BY memory_id FOR UPDATE",
        (sorted(set(memory_ids)),),
    ).fetchall()
    return {r.memory_id: r for r in map(_row, rows)}


def of_subject(conn: psycopg.Connection, version: int, subject_id: str) -> list[str]:
    """The memories of ``subject_id`` with a write queued (not locked: :func:`lock` them)."""
    rows = conn.execute(f"SELECT memory_id FROM {table_name(version)} WHERE subject_id = %s", (subject_id,))
    return [str(r[0]) for r in rows]


def oldest(conn: psycopg.Connection, version: int, limit: int) -> list[PendingRow]:
    """Up to ``limit`` queued rows, first queued first (not locked)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM {table_name(version)} ORDER BY queued_at, memory_id LIMIT %s", (limit,)
    ).fetchall()
    return [_row(r) for r in rows]


def put(conn: psycopg.Connection, version: int, rows: Sequence[PendingRow]) -> None:
    """Queue ``rows`` (replacing a memory's row)."""
    if not rows:
        return
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table_name(version)} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (memory_id) DO UPDATE SET subject_id = EXCLUDED.subject_id, revision = EXCLUDED.revision,"
            " payload = EXCLUDED.payload, text_sealed = EXCLUDED.text_sealed, text_event = EXCLUDED.text_event,"
            " occurred_at = EXCLUDED.occurred_at, log_partition = EXCLUDED.log_partition,"
            " log_offset = EXCLUDED.log_offset, queued_at = clock_timestamp()",
            [
                (
                    r.memory_id,
                    r.subject_id,
                    r.revision,
                    Jsonb(r.payload),
                    Jsonb(json.loads(r.text.sealed.model_dump_json())),
                    r.text.event_id,
                    r.text.occurred_at,
                    r.text.position.partition,
                    r.text.position.offset,
                )
                for r in rows
            ],
        )


def remove(conn: psycopg.Connection, version: int, memory_ids: Sequence[str]) -> None:
    """Take ``memory_ids`` off the queue."""
    if memory_ids:
        conn.execute(f"DELETE FROM {table_name(version)} WHERE memory_id = ANY(%s)", (list(memory_ids),))


def _exists(conn: psycopg.Connection, version: int) -> bool:
    return conn.execute("SELECT to_regclass(%s)", (table_name(version),)).fetchone() != (None,)


def first_pending(conn: psycopg.Connection, version: int) -> dict[int, int]:
    """Per partition, the lowest log offset of a queued write (partitions with none are
    absent): the projection's points are complete up to just before it. A version whose
    queue was never created has none."""
    if not _exists(conn, version):
        return {}
    rows = conn.execute(
        f"SELECT log_partition, min(log_offset) FROM {table_name(version)} GROUP BY log_partition"
    ).fetchall()
    return {int(p): int(o) for p, o in rows}


def count(conn: psycopg.Connection, version: int) -> int:
    """Rows queued (0 when the version's queue was never created)."""
    if not _exists(conn, version):
        return 0
    row = conn.execute(f"SELECT count(*) FROM {table_name(version)}").fetchone()
    return int(row[0]) if row else 0


def memory_ids(conn: psycopg.Connection, version: int) -> set[str]:
    """The memories with a write queued (none when the version's queue was never created)."""
    if not _exists(conn, version):
        return set()
    return {str(r[0]) for r in conn.execute(f"SELECT memory_id FROM {table_name(version)}")}
