"""A subject's memories as the facts projection holds them: status, key, revision, what
superseded what, and each memory's content-free history. One read for every caller (the
HTTP route, ``memledger memories``, the agent tools).

Rows come from the stable facts views (the serving version), and the live summaries from
the stable summaries view (the facts projection keeps no summary); an erased memory has no
fact row any more, so it is listed from the ``tombstones`` table, with its id, the
request that erased it and when, and nothing else. Text and the other fields the ledger
seals as personal (``contracts.PersonalFields``: the key, the scope id, the provenance
references) are returned only when the caller asks ``with_content`` (it holds a
``read`` grant: the caller decides); the status, kind, purpose and revision are
returned to every caller allowed to list. History rows keep ids, times, event types,
producers and log positions only (no content, no fingerprint).

Pagination is by keyset on ``memory_id`` (UUIDv7, so in write order): ``after`` is the
last id of the previous page. A listing may be narrowed to one purpose, to keys that
start with a prefix (a key-value reader's namespace) and to memories not expired at a
given time (what recall may return, swept or not); each keyed memory carries
``first_written_at``, when its key was first given a value of those still held.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from projections.facts import FactsTables

LIVE = ("active", "needs_confirmation")
"""Statuses listed without ``include_all``."""

MAX_PAGE = 500
"""The largest page ``list_memories`` returns."""

_MEMORY_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A memory id in canonical form (a UUID, RFC 9562)."""

REFERENCES = ("turn_id", "tool_call_id", "source_ref", "consent_ref")
"""Provenance references: personal fields, returned only ``with_content``."""


@dataclass(frozen=True)
class MemoryEntry:
    """One memory of a subject. Times are aware UTC datetimes. ``superseded_by`` names
    the memory that replaced this one, ``supersedes`` the ones this one replaced;
    ``content`` is ``None`` unless asked for, or when the text may no longer be read
    (revoked, expired, erased); so are ``key``, the scope id and the provenance
    references (sealed with the text). ``erased_by`` is the erasure request of an erased memory,
    whose other fields are then unknown (``None``, or empty). ``first_written_at`` is the
    ``written_at`` of the oldest fact row of the subject with the same purpose, scope and
    key (superseded rows count; erased, revoked and expired rows have no key any more):
    since when the key has had a value (``None`` without a key)."""

    memory_id: str
    subject_id: str
    status: str
    revision: int | None
    kind: str | None
    key: str | None
    purpose: str | None
    scope: dict[str, str | None]
    sensitivity: str | None
    confirmed: bool | None
    confidence: float | None
    written_at: datetime | None
    updated_at: datetime | None
    expires_at: datetime | None
    provenance: dict[str, Any]
    superseded_by: str | None = None
    supersedes: list[str] = field(default_factory=list)
    content: str | None = None
    erased_by: str | None = None
    erased_at: datetime | None = None
    first_written_at: datetime | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One revision of a memory: the event that made it, where the log holds it, and the
    status after it (``None`` when the event left the status as it was)."""

    revision: int
    event_type: str
    event_id: str
    status: str | None
    producer: str
    occurred_at: datetime
    log_partition: int
    log_offset: int


@dataclass(frozen=True)
class MemoryPage:
    """One page of ``list_memories``; ``next_after`` is the ``after`` of the next page
    (``None`` on the last page)."""

    memories: list[MemoryEntry]
    next_after: str | None


_COLUMNS = """
  memory_id, subject_id, status, revision, kind, key, purpose, scope_type, scope_id, sensitivity, confirmed,
  confidence, written_at, updated_at, expires_at, provenance, superseded_by, content,
  NULL::text AS erased_by, NULL::timestamptz AS erased_at
"""

_ERASED_COLUMNS = """
  t.memory_id, t.subject_id, 'erased' AS status, NULL::int, NULL::text, NULL::text, NULL::text, NULL::text,
  NULL::text, NULL::text, NULL::boolean, NULL::float8, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
  NULL::jsonb, NULL::text, NULL::text, t.request_id, t.erased_at, NULL::timestamptz
"""


_SUMMARY_COLUMNS = """
  memory_id, subject_id, 'active'::text AS status, revision, 'summary'::text AS kind, key, purpose, scope_type,
  scope_id, sensitivity, confirmed, confidence, written_at, written_at AS updated_at, expires_at, provenance,
  NULL::text AS superseded_by, content, NULL::text AS erased_by, NULL::timestamptz AS erased_at,
  NULL::timestamptz AS first_written_at
"""
SUMMARIES = "summaries"
"""The stable view of the serving summaries version: a live summary is a row of it (the
facts projection keeps no summary; a regenerated one replaces its row)."""


def _summaries_select(cur: Any, tables: FactsTables) -> str | None:
    """``SELECT`` of the live summaries as fact rows (``_SUMMARY_COLUMNS``) for a listing of
    the stable views (``None`` for a versioned facts table, or before the summaries
    projection made its view)."""
    if tables.version is not None:
        return None
    if cur.execute("SELECT to_regclass(%s) AS r", (SUMMARIES,)).fetchone()["r"] is None:
        return None
    return f"SELECT * FROM (SELECT {_SUMMARY_COLUMNS} FROM {SUMMARIES}) f"


def _erased_union(tables: FactsTables, with_summaries: bool, match: str) -> str:
    """``UNION ALL`` of the erased memories of ``%(subject)s`` matching ``match`` (an SQL
    condition on the tombstone ``t``), from the ``tombstones`` table, but those whose rows
    the facts (or, ``with_summaries``, the summaries) projection has not removed yet."""
    sql = (
        f" UNION ALL SELECT {_ERASED_COLUMNS} FROM tombstones t WHERE t.subject_id = %(subject)s AND {match}"
        f" AND NOT EXISTS (SELECT 1 FROM {tables.facts} f WHERE f.memory_id = t.memory_id)"
    )
    if with_summaries:
        sql += f" AND NOT EXISTS (SELECT 1 FROM {SUMMARIES} s WHERE s.memory_id = t.memory_id)"
    return sql


def _facts_select(tables: FactsTables) -> str:
    """The fact rows' columns (``_COLUMNS``) and ``first_written_at``, from ``tables.facts`` as ``f``."""
    first = (
        f"(SELECT min(o.written_at) FROM {tables.facts} o WHERE o.subject_id = f.subject_id"
        " AND o.purpose = f.purpose AND o.scope_type = f.scope_type AND o.scope_id IS NOT DISTINCT FROM f.scope_id"
        " AND o.key = f.key) AS first_written_at"
    )
    return f"SELECT {_COLUMNS}, {first} FROM {tables.facts} f"


def list_memories(
    pool: ConnectionPool,
    tables: FactsTables,
    subject_id: str,
    *,
    include_all: bool = False,
    with_content: bool = False,
    limit: int = 100,
    after: str | None = None,
    purpose: str | None = None,
    key: str | None = None,
    key_prefix: str | None = None,
    unexpired_at: datetime | None = None,
) -> MemoryPage:
    """The memories of ``subject_id`` in ``memory_id`` order, at most ``limit`` (1 to
    ``MAX_PAGE``) after the id ``after``: live ones (``active``, ``needs_confirmation``),
    or with ``include_all`` every status, erased memories included. ``purpose``: only
    that purpose's; ``key``: only memories with that key; ``key_prefix``: only those
    whose key starts with it (each of the three leaves erased memories out: they keep
    none of them); ``unexpired_at`` (aware UTC): only
    memories whose ``expires_at`` is later, or none. The caller has authorised the
    reader. Raises ``ValueError`` (field ``limit``) for a limit outside 1..``MAX_PAGE``,
    (field ``after``) for an ``after`` that is not a memory id, and psycopg errors when
    the facts tables are unreachable."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit: must be between 1 and {MAX_PAGE}")
    if after is not None:
        after = after.strip().lower()
        if not _MEMORY_ID.fullmatch(after):  # other text sorts before or after every id: all or none
            raise ValueError("after: must be a memory id (a UUID: the next_after of the page before)")
    params: dict[str, Any] = {
        "subject": subject_id,
        "after": after or "",
        "limit": limit + 1,
        "live": list(LIVE),
        "purpose": purpose,
        "key": key,
        "key_prefix": key_prefix,
        "now": unexpired_at,
    }
    where = "subject_id = %(subject)s AND memory_id > %(after)s"
    if purpose is not None:
        where += " AND purpose = %(purpose)s"
    if key is not None:
        where += " AND key = %(key)s"
    if key_prefix is not None:
        where += " AND starts_with(key, %(key_prefix)s)"
    if unexpired_at is not None:
        where += " AND (expires_at IS NULL OR expires_at > %(now)s)"
    if not include_all:
        where += " AND status = ANY(%(live)s)"
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        sql = f"{_facts_select(tables)} WHERE {where}"
        summaries = _summaries_select(cur, tables)
        if summaries is not None:
            sql += f" UNION ALL {summaries} WHERE {where}"
        if include_all and purpose is None and key is None and key_prefix is None:
            sql += _erased_union(tables, summaries is not None, "t.memory_id > %(after)s")
        sql = f"SELECT * FROM ({sql}) m ORDER BY memory_id LIMIT %(limit)s"
        rows = cur.execute(sql, params).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        replaced = _supersedes(cur, tables, subject_id, [r["memory_id"] for r in rows])
    entries = [_entry(r, replaced.get(r["memory_id"], []), with_content) for r in rows]
    return MemoryPage(entries, entries[-1].memory_id if more and entries else None)


def get_memory(
    pool: ConnectionPool, tables: FactsTables, subject_id: str, memory_id: str, *, with_content: bool = False
) -> MemoryEntry | None:
    """One memory of ``subject_id`` (an erased one from its tombstone), or ``None`` when
    no memory of that subject has this id (another subject's memory is not revealed)."""
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        summaries = _summaries_select(cur, tables)
        also = (
            "" if summaries is None else f" UNION ALL {summaries} WHERE subject_id = %(subject)s AND memory_id = %(id)s"
        )
        row = cur.execute(
            f"{_facts_select(tables)} WHERE subject_id = %(subject)s AND memory_id = %(id)s{also}"
            + _erased_union(tables, summaries is not None, "t.memory_id = %(id)s"),
            {"subject": subject_id, "id": memory_id},
        ).fetchone()
        if row is None:
            return None
        replaced = _supersedes(cur, tables, subject_id, [memory_id])
    return _entry(row, replaced.get(memory_id, []), with_content)


def memory_history(pool: ConnectionPool, tables: FactsTables, subject_id: str, memory_id: str) -> list[HistoryEntry]:
    """The content-free history of one memory of ``subject_id``, by revision (empty for
    an unknown id or another subject's memory)."""
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT revision, event_type, event_id, status, producer, occurred_at, log_partition, log_offset"
            f" FROM {tables.history} WHERE subject_id = %s AND memory_id = %s ORDER BY revision",
            (subject_id, memory_id),
        ).fetchall()
    return [HistoryEntry(int(r[0]), r[1], r[2], r[3], r[4], r[5], int(r[6]), int(r[7])) for r in rows]


def _supersedes(cur: Any, tables: FactsTables, subject_id: str, ids: Sequence[str]) -> dict[str, list[str]]:
    """For each of ``ids``: the memories of the subject it superseded, in id order."""
    if not ids:
        return {}
    cur.execute(
        f"SELECT superseded_by, memory_id FROM {tables.facts} WHERE subject_id = %s AND superseded_by = ANY(%s)"
        " ORDER BY memory_id",
        (subject_id, list(ids)),
    )
    out: dict[str, list[str]] = {}
    for row in cur.fetchall():
        out.setdefault(row["superseded_by"], []).append(row["memory_id"])
    return out


def _entry(row: dict[str, Any], supersedes: list[str], with_content: bool) -> MemoryEntry:
    provenance = dict(row["provenance"] or {})
    if not with_content:
        provenance = {k: v for k, v in provenance.items() if k not in REFERENCES}
    return MemoryEntry(
        memory_id=row["memory_id"],
        subject_id=row["subject_id"],
        status=row["status"],
        revision=row["revision"],
        kind=row["kind"],
        key=row["key"] if with_content else None,
        purpose=row["purpose"],
        scope={"type": row["scope_type"], "id": row["scope_id"] if with_content else None},
        sensitivity=row["sensitivity"],
        confirmed=row["confirmed"],
        confidence=row["confidence"],
        written_at=row["written_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        provenance=provenance,
        superseded_by=row["superseded_by"],
        supersedes=supersedes,
        content=row["content"] if with_content else None,
        erased_by=row["erased_by"],
        erased_at=row["erased_at"],
        first_written_at=row["first_written_at"],
    )
