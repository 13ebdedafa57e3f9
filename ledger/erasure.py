"""Which memories an erasure request reaches, and what the request records besides the
``erasure_requests`` row.

An ``EraseMemories`` command names its target in exactly one way: memory ids, the
whole subject, or a source (a turn id, tool call id or document/source reference that
the memories' provenance names). Every memory derived, directly or transitively, from
a target is erased with it, so no summary or inference outlives its evidence; with
``with_history``, so is every earlier version of a target (``ledger.supersession``:
the versions it superseded, and the memories of its slot recorded before it that were
no longer live, and still hold content), and every earlier version of those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import psycopg

from contracts import EraseMemories, ErasureRequested, Scope, decode_event
from ledger import state, supersession
from ledger.crypto import Keyring
from ledger.errors import InvalidCommandError, UnknownMemoryError
from ledger.eventlog import EventLog, iter_records
from ledger.pgschema import ensure_schema
from ledger.tombstone_log import Tombstone

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS erasure_request_sources (
    request_id  text PRIMARY KEY,
    source_ref  text NOT NULL
);
"""

_SOURCE_MATCH = "(turn_id = %s OR tool_call_id = %s OR source_ref = %s)"


def install(conn: psycopg.Connection) -> None:
    """Create ``erasure_request_sources`` (request id -> the source an erasure named) if missing."""
    ensure_schema(conn, "erasure_request_sources", SCHEMA_SQL)


def erasure_targets(conn: psycopg.Connection, cmd: EraseMemories, now: datetime) -> list[str]:
    """The ids of the memories ``cmd`` erases, not yet erased, in a stable order: the
    named memories first, then (with ``cmd.with_history``) every earlier version of
    them (``earlier_versions``; ``now`` is UTC), then everything derived from any of
    these. Locks their heads.

    Raises:
        UnknownMemoryError: a listed memory id is not a memory of the subject (field
            ``memory_ids``).
        InvalidCommandError: nothing is left to erase: field ``source_ref`` (no memory
            of the subject names the source, or all that do are erased) or
            ``memory_ids`` (all already erased). An erasure of a whole subject is never
            refused so: it also purges the rows of the subject the heads do not know.
    """
    if cmd.whole_subject:
        # none left is no refusal: the stores may still hold rows of the subject the heads do
        # not know (a restored backup, a write whose commit was lost), and every projection
        # removes every row of an erased subject whatever its id
        return [h.memory_id for h in state.heads_where(conn, cmd.subject_id, "status <> 'erased'", ())]
    if cmd.source_ref is not None:
        ref = cmd.source_ref
        heads = state.heads_where(conn, cmd.subject_id, _SOURCE_MATCH, (ref, ref, ref))
        earlier = _request_for_source(conn, cmd.subject_id, ref)
        if not heads and earlier is not None:
            raise InvalidCommandError("source_ref", f"every memory from {ref!r} is already erased (by {earlier})")
        if not heads:
            raise InvalidCommandError(
                "source_ref",
                f"no memory of {cmd.subject_id!r} names {ref!r} as its turn_id, tool_call_id or source_ref"
                " (a memory whose keys are destroyed, by erasure, revocation or expiry, keeps no provenance"
                " references: erase it by id)",
            )
        targets = [h.memory_id for h in heads if h.status != "erased"]
        if not targets:
            raise InvalidCommandError("source_ref", f"every memory from {ref!r} is already erased")
    else:
        found = state.lock_heads(conn, cmd.memory_ids)
        for mid in cmd.memory_ids:
            if mid not in found or found[mid].subject_id != cmd.subject_id:
                raise UnknownMemoryError(mid, "memory_ids")
        targets = [m for m in dict.fromkeys(cmd.memory_ids) if found[m].status != "erased"]
        if not targets:
            raise InvalidCommandError("memory_ids", "every memory named is already erased")
    if cmd.with_history:
        history = state.lock_heads(conn, earlier_versions(conn, cmd.subject_id, targets, now))
        targets += [m for m, h in history.items() if h.status != "erased" and m not in targets]
    return targets + [m for m in state.derived_closure(conn, targets) if m not in targets]


def earlier_versions(conn: psycopg.Connection, subject_id: str, memory_ids: Sequence[str], now: datetime) -> list[str]:
    """The earlier versions of ``memory_ids`` (memories of ``subject_id``) by
    ``ledger.supersession.earlier_of``'s rule, of any status, the given ids left out,
    sorted; ``now`` is UTC. Reads the heads the chains and the slots of the memories
    lead to, and again for each earlier version found that leads further (a chain into
    another slot), without locking them: the caller locks those it changes."""
    named = list(state.read_heads(conn, memory_ids).values())
    candidates: dict[str, state.MemoryHead] = {}
    frontier, reached = named, {h.memory_id for h in named}
    found: list[str] = []
    while frontier:
        chained = state.read_heads(conn, state.earlier_versions(conn, [h.memory_id for h in frontier]))
        slots = sorted({slot[1:] for slot in map(supersession.slot_of, frontier) if slot is not None})
        candidates |= chained | {h.memory_id: h for h in state.slot_heads(conn, subject_id, slots)}
        found = supersession.earlier_of(named, candidates.values(), now)
        frontier = [candidates[m] for m in found if m not in reached]
        reached.update(h.memory_id for h in frontier)
    return found


def slot_claims(conn: psycopg.Connection, heads: Iterable[state.MemoryHead], now: datetime) -> list[state.MemoryHead]:
    """The live claims, locked, of the slots of the live memories among ``heads`` (those
    an erasure is about to erase, as before it), for ``ledger.supersession.rivals_left``;
    ``now`` is UTC (``state.live_in_slot``)."""
    slots = sorted(
        {slot for h in heads if h.status in state.ACTIVE_STATUSES and (slot := supersession.slot_of(h)) is not None}
    )
    claims: list[state.MemoryHead] = []
    for subject_id, purpose, scope_type, scope_id, key in slots:
        scope = Scope.model_validate({"type": scope_type, "id": scope_id})
        claims += state.live_in_slot(conn, subject_id, purpose, scope, key, now)
    return claims


def _request_for_source(conn: psycopg.Connection, subject_id: str, source_ref: str) -> str | None:
    """The latest erasure request of the subject that named ``source_ref``, if any
    (erased heads keep no provenance references, the request record does)."""
    row = conn.execute(
        "SELECT s.request_id FROM erasure_request_sources s JOIN erasure_requests r USING (request_id)"
        " WHERE r.subject_id = %s AND s.source_ref = %s ORDER BY r.requested_at DESC LIMIT 1",
        (subject_id, source_ref),
    ).fetchone()
    return None if row is None else str(row[0])


def record_source(conn: psycopg.Connection, request_id: str, cmd: EraseMemories) -> None:
    """Record the source an erasure by source named (nothing for other kinds)."""
    if cmd.source_ref is not None:
        conn.execute(
            "INSERT INTO erasure_request_sources (request_id, source_ref) VALUES (%s, %s)",
            (request_id, cmd.source_ref),
        )


def restore_tombstones(
    conn: psycopg.Connection, keyring: Keyring, tombstones: Mapping[str, Tombstone], now: datetime
) -> tuple[int, int]:
    """Bring the ledger's own tables back in line with its tombstones after Postgres (or
    part of it) was restored from a backup taken before some erasures: insert the rows
    ``tombstones`` (from the tombstone topic; empty in the embedded mode) names and the
    table lacks, then, for every tombstoned memory, destroy the data keys the backup
    brought back, drop the personal fields from its head (``state.forget_personal``) and
    mark it erased. Runs in the caller's transaction; idempotent.

    Returns (tombstone rows restored, data keys destroyed again).
    """
    restored = 0
    if tombstones:
        restored = conn.execute(
            "INSERT INTO tombstones (memory_id, subject_id, request_id, erased_at)"
            " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::timestamptz[])"
            " ON CONFLICT (memory_id) DO NOTHING",
            (
                list(tombstones),
                [t.subject_id for t in tombstones.values()],
                [t.request_id for t in tombstones.values()],
                [t.erased_at for t in tombstones.values()],
            ),
        ).rowcount
    ids = [str(r[0]) for r in conn.execute("SELECT memory_id FROM tombstones")]
    if not ids:
        return restored, 0
    destroyed = keyring.destroy(conn, ids)
    state.forget_personal(conn, ids)
    conn.execute(
        "UPDATE ledger_memories SET status = 'erased',"
        " keys_destroyed_at = coalesce(keys_destroyed_at, %s) WHERE memory_id = ANY(%s) AND status <> 'erased'",
        (now, ids),
    )
    return restored, destroyed


def restore_requests(conn: psycopg.Connection, log: EventLog) -> int:
    """Re-record the erasure requests a restored Postgres lost, from their
    ``ErasureRequested`` events in the log, for every request a tombstone names that has
    no ``erasure_requests`` row (so ``trace`` and ``erasure-report`` know it again). The
    source an erasure by source named is not in the event and stays unknown; content
    fingerprints come from the memories' heads where those still have them. Reads the
    whole log, partition by partition. Runs in the caller's transaction; idempotent.

    Returns the number of requests recorded again.
    """
    missing = {
        str(r[0])
        for r in conn.execute(
            "SELECT DISTINCT t.request_id FROM tombstones t"
            " WHERE NOT EXISTS (SELECT 1 FROM erasure_requests r WHERE r.request_id = t.request_id)"
        )
    }
    found = 0
    for record in iter_records(log) if missing else ():
        if b'"ErasureRequested"' not in record.value:
            continue
        event = decode_event(record.value)
        if not (isinstance(event, ErasureRequested) and event.request_id in missing):
            continue
        ids = [r.memory_id for r in event.affected]
        conn.execute(
            """
            INSERT INTO erasure_requests (request_id, subject_id, request_kind, memory_ids, content_hmacs,
                requested_by, reason, legal_basis, requested_at, log_partition, log_offset)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (request_id) DO NOTHING
            """,
            (
                event.request_id,
                event.subject_id,
                event.request_kind,
                ids,
                state.content_hmacs(conn, ids),
                event.requested_by,
                event.reason,
                event.legal_basis,
                event.occurred_at,
                record.partition,
                record.offset,
            ),
        )
        missing.discard(event.request_id)
        found += 1
        if not missing:
            break
    return found
