"""Conflicts as the facts projection records them: which memories of a subject make
different claims for one key, and whether the conflict is still open.

The ledger appends ``ConflictDetected`` when live memories with the same subject,
purpose, scope and key disagree, and resolves a conflict only by appending further
events (``MemorySuperseded``, ``MemoryConfirmed``, ...): there is no "resolved" event.
A conflict is therefore *open* while two or more of its members are still live
(``active`` or ``needs_confirmation``) in the facts table.

The slot's ``key`` and scope id are personal fields, sealed in each member's events
(``contracts.PersonalFields``): they are read from the members' fact rows, so they
disappear with the last member whose key is still readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from contracts import iso_utc
from projections.facts import FactsTables

LIVE_STATUSES = ("active", "needs_confirmation")
"""Statuses in which a memory still makes its claim."""

SOURCE_FIELDS = ("writer", "source_ref", "turn_id", "tool_call_id")
"""The provenance fields that say where a member's claim came from."""


@dataclass(frozen=True)
class ConflictMember:
    """One memory of a conflict. ``status`` is ``erased`` when its fact row is gone;
    ``content`` is ``None`` when the text may no longer be read (revoked, expired,
    erased); ``source`` holds the provenance fields of :data:`SOURCE_FIELDS` that are set."""

    memory_id: str
    status: str
    content: str | None
    veracity: str | None
    source: dict[str, str]
    written_at: datetime | None


@dataclass(frozen=True)
class Conflict:
    """One detected conflict; ``open`` while two or more members are live and no later
    conflict holds all of its members and more (a further claim in the same slot makes the
    ledger detect a conflict among all the claims: the earlier one is ``merged_into`` it).
    ``key`` and ``scope["id"]`` are ``None`` once no member's personal fields are readable."""

    conflict_id: str
    key: str | None
    purpose: str
    scope: dict[str, str | None]
    detected_at: datetime
    open: bool
    members: list[ConflictMember] = field(default_factory=list)
    merged_into: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (times as ISO 8601 UTC strings)."""
        return {
            "conflict_id": self.conflict_id,
            "key": self.key,
            "purpose": self.purpose,
            "scope": self.scope,
            "detected_at": iso_utc(self.detected_at),
            "open": self.open,
            "merged_into": self.merged_into,
            "members": [
                {
                    "memory_id": m.memory_id,
                    "status": m.status,
                    "content": m.content,
                    "veracity": m.veracity,
                    "source": m.source,
                    "written_at": iso_utc(m.written_at) if m.written_at else None,
                }
                for m in self.members
            ],
        }


def list_conflicts(
    pool: ConnectionPool, tables: FactsTables, subject_id: str, include_resolved: bool = False
) -> list[Conflict]:
    """The conflicts of ``subject_id``, oldest first (by ``detected_at``, then id).

    Members are listed in the order of the event's ``affected``. Only open conflicts are
    returned unless ``include_resolved``. The caller authorises the reader (a ``read``
    grant on the subject). Raises psycopg errors when the facts tables are unreachable.
    """
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT * FROM {tables.conflicts} WHERE subject_id = %s ORDER BY detected_at, conflict_id",
            (subject_id,),
        )
        conflicts = cur.fetchall()
        ids = sorted({m for c in conflicts for m in c["memory_ids"]})
        cur.execute(
            f"SELECT memory_id, status, content, veracity, provenance, written_at, key, scope_id FROM {tables.facts}"
            " WHERE memory_id = ANY(%s)",
            (ids,),
        )
        facts = {r["memory_id"]: r for r in cur.fetchall()}
    out = []
    for c in conflicts:
        members = [_member(m, facts.get(m)) for m in c["memory_ids"]]
        merged_into = next((o["conflict_id"] for o in conflicts if set(o["memory_ids"]) > set(c["memory_ids"])), None)
        is_open = merged_into is None and sum(m.status in LIVE_STATUSES for m in members) >= 2
        slot = next((facts[m] for m in c["memory_ids"] if m in facts and facts[m]["key"] is not None), None)
        if is_open or include_resolved:
            out.append(
                Conflict(
                    conflict_id=c["conflict_id"],
                    key=None if slot is None else slot["key"],
                    purpose=c["purpose"],
                    scope={"type": c["scope_type"], "id": None if slot is None else slot["scope_id"]},
                    detected_at=c["detected_at"],
                    open=is_open,
                    members=members,
                    merged_into=merged_into,
                )
            )
    return out


def open_conflicts_of(conn: psycopg.Connection, tables: FactsTables, memory_ids: Sequence[str]) -> dict[str, list[str]]:
    """For each of ``memory_ids`` that is a member of an open conflict: memory id ->
    the ids of those conflicts (sorted). Ids in no open conflict are absent."""
    if not memory_ids:
        return {}
    rows = conn.execute(
        f"""
        SELECT c.conflict_id, c.memory_ids FROM {tables.conflicts} c
         WHERE c.memory_ids && %s::text[]
           AND NOT EXISTS (SELECT 1 FROM {tables.conflicts} later
                            WHERE later.memory_ids @> c.memory_ids AND NOT c.memory_ids @> later.memory_ids)
           AND (SELECT count(*) FROM {tables.facts} f
                 WHERE f.memory_id = ANY(c.memory_ids) AND f.status = ANY(%s)) >= 2
         ORDER BY c.conflict_id
        """,
        (list(memory_ids), list(LIVE_STATUSES)),
    ).fetchall()
    wanted = set(memory_ids)
    out: dict[str, list[str]] = {}
    for conflict_id, members in rows:
        for m in members:
            if m in wanted:
                out.setdefault(m, []).append(conflict_id)
    return out


def _member(memory_id: str, row: dict[str, Any] | None) -> ConflictMember:
    if row is None:
        return ConflictMember(memory_id, "erased", None, None, {}, None)
    prov = row["provenance"] or {}
    source = {f: str(prov[f]) for f in SOURCE_FIELDS if prov.get(f)}
    return ConflictMember(memory_id, row["status"], row["content"], row["veracity"], source, row["written_at"])
