"""The ledger's own state in Postgres: the head (latest revision and status) of every
memory, erasure requests and tombstones.

The head table lets the ledger validate commands (unknown memory, supersession across
subjects) and assign revisions. Rows are locked ``FOR UPDATE`` while a command runs,
so two commands on one memory are serialised and revisions never collide; a plain read
(``read_heads``) takes no row lock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from contracts.events import RedactedState
from contracts.memory import PersonalFields, Scope, SealedText
from ledger import write_behind
from ledger.pgschema import ensure_schema

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS ledger_memories (
    memory_id     text PRIMARY KEY,
    subject_id    text NOT NULL,
    revision      integer NOT NULL,
    status        text NOT NULL,
    kind          text NOT NULL,
    purpose       text NOT NULL,
    scope_type    text NOT NULL,
    scope_id      text NOT NULL,
    key           text,
    consent_ref   text,
    turn_id       text,
    tool_call_id  text,
    source_ref    text,
    derived_from  text[] NOT NULL DEFAULT '{}',
    expires_at    timestamptz,
    written_at    timestamptz NOT NULL,
    content_hmac  text
);
CREATE INDEX IF NOT EXISTS ledger_memories_subject ON ledger_memories (subject_id);
CREATE INDEX IF NOT EXISTS ledger_memories_derived ON ledger_memories USING gin (derived_from);

CREATE TABLE IF NOT EXISTS erasure_requests (
    request_id     text PRIMARY KEY,
    subject_id     text NOT NULL,
    request_kind   text NOT NULL,
    memory_ids     text[] NOT NULL,
    content_hmacs  text[] NOT NULL DEFAULT '{}',
    requested_by   text NOT NULL,
    reason         text NOT NULL,
    legal_basis    text NOT NULL,
    requested_at   timestamptz NOT NULL,
    log_partition  integer,
    log_offset     bigint
);

CREATE TABLE IF NOT EXISTS tombstones (
    memory_id   text PRIMARY KEY,
    subject_id  text NOT NULL,
    request_id  text NOT NULL,
    erased_at   timestamptz NOT NULL
);
"""

LIFECYCLE_SQL = """
ALTER TABLE ledger_memories
    ADD COLUMN IF NOT EXISTS sensitivity      text NOT NULL DEFAULT 'internal',
    ADD COLUMN IF NOT EXISTS retention_basis  text NOT NULL DEFAULT 'indefinite',
    ADD COLUMN IF NOT EXISTS confidence       double precision NOT NULL DEFAULT 1.0,
    ADD COLUMN IF NOT EXISTS veracity         text NOT NULL DEFAULT 'stated',
    ADD COLUMN IF NOT EXISTS statement_hmac   text,
    ADD COLUMN IF NOT EXISTS sealed_content   jsonb,
    ADD COLUMN IF NOT EXISTS revoked_at       timestamptz,
    ADD COLUMN IF NOT EXISTS keys_destroyed_at timestamptz;
CREATE INDEX IF NOT EXISTS ledger_memories_slot ON ledger_memories (subject_id, purpose, scope_type, scope_id, key);
CREATE TABLE IF NOT EXISTS consent_revocations (
    subject_id   text NOT NULL,
    consent_ref  text NOT NULL,
    revoked_at   timestamptz NOT NULL,
    PRIMARY KEY (subject_id, consent_ref)
);
CREATE TABLE IF NOT EXISTS ledger_schema_lifecycle (applied_at timestamptz NOT NULL DEFAULT now());
"""

PERSONAL_SQL = """
ALTER TABLE ledger_memories ALTER COLUMN scope_id DROP NOT NULL;
CREATE TABLE IF NOT EXISTS ledger_schema_personal (applied_at timestamptz NOT NULL DEFAULT now());
"""

STATEMENT_SQL = """
CREATE INDEX IF NOT EXISTS ledger_memories_statement ON ledger_memories (statement_hmac);
"""

BOUNDARY_SQL = """
ALTER TABLE ledger_memories
    ADD COLUMN IF NOT EXISTS superseded_by  text,
    ADD COLUMN IF NOT EXISTS confirmed_at   timestamptz;
CREATE INDEX IF NOT EXISTS ledger_memories_superseded_by ON ledger_memories (superseded_by);
CREATE TABLE IF NOT EXISTS write_attempts (
    attempt_hmac  text PRIMARY KEY,
    subject_id    text NOT NULL,
    memory_id     text NOT NULL,
    event_ids     text[] NOT NULL,
    recorded_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS write_attempts_memory ON write_attempts (memory_id);
ALTER TABLE erasure_requests
    ADD COLUMN IF NOT EXISTS with_history      boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS reinstated        text[] NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS earlier_versions  text[] NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS ledger_schema_boundary (applied_at timestamptz NOT NULL DEFAULT now());
"""
"""Supersession links and confirmation times in the heads, the attempts of writes that
carried a turn or tool call id (``ledger.admission``: a retry changes nothing), and what
an erasure did to earlier versions (``ledger.supersession``)."""

RIVALS_SQL = """
ALTER TABLE erasure_requests ADD COLUMN IF NOT EXISTS rivals_reinstated text[] NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS ledger_schema_rivals (applied_at timestamptz NOT NULL DEFAULT now());
"""
"""The claims an erasure reinstated because it erased their last rival
(``ledger.supersession.rivals_left``)."""

SHREDDED_TABLES = ("ledger_memories", "memory_keys", "write_attempts", "memory_dlq")
"""The ledger's tables from which commands remove personal fields, data keys, attempt
fingerprints or dead letters: their old row versions keep them in the table files until
the table is rewritten (``memledger compact``)."""

ACTIVE_STATUSES = ("active", "needs_confirmation")
"""Statuses of a memory that may be used (recall, slots, sources)."""
HOLDING_STATUSES = (*ACTIVE_STATUSES, "superseded")
"""Statuses of a memory whose content is still kept (revocation and expiry reach them)."""


@dataclass(frozen=True)
class MemoryHead:
    """The ledger's view of one memory: latest revision and status."""

    memory_id: str
    subject_id: str
    revision: int
    status: str
    kind: str
    purpose: str
    derived_from: tuple[str, ...]
    scope_type: str
    scope_id: str | None
    key: str | None
    sensitivity: str
    retention_basis: str
    expires_at: datetime | None
    confidence: float
    veracity: str
    source_ref: str | None
    consent_ref: str | None
    sealed_content: SealedText | None
    revoked_at: datetime | None
    superseded_by: str | None = None
    confirmed_at: datetime | None = None

    @property
    def scope(self) -> Scope:
        """The memory's scope.

        Raises:
            ValueError: the memory was erased (its head no longer knows the scope id).
        """
        if self.scope_id is None:
            raise ValueError(f"memory {self.memory_id!r} was erased: its scope id is forgotten")
        return Scope(type=self.scope_type, id=self.scope_id)  # type: ignore[arg-type]


def _sql(conn: psycopg.Connection, query: str, params: Sequence[object] = ()) -> psycopg.Cursor[Any]:
    """Run ``query`` after sending the heads the command holds back (``ledger.write_behind``)."""
    write_behind.barrier(conn)
    return conn.execute(query, params)


def install(conn: psycopg.Connection) -> None:
    """Create the ledger's tables if missing, and add the lifecycle columns to a ledger
    created by an earlier version."""
    ensure_schema(conn, "tombstones", SCHEMA_SQL)
    ensure_schema(conn, "ledger_schema_lifecycle", LIFECYCLE_SQL)
    ensure_schema(conn, "ledger_schema_personal", PERSONAL_SQL)  # erasure forgets scope ids
    ensure_schema(conn, "ledger_memories_statement", STATEMENT_SQL)  # a batch asks for its statements at once
    ensure_schema(conn, "ledger_schema_boundary", BOUNDARY_SQL)
    ensure_schema(conn, "ledger_schema_rivals", RIVALS_SQL)


def _head(row: tuple[Any, ...]) -> MemoryHead:
    (mid, sid, rev, status, kind, purpose, derived, scope_type, scope_id, key, sensitivity, basis, expires_at,
     confidence, veracity, source_ref, consent_ref, sealed, revoked_at, superseded_by, confirmed_at) = row  # fmt: skip
    return MemoryHead(
        memory_id=str(mid),
        subject_id=str(sid),
        revision=int(rev),
        status=str(status),
        kind=str(kind),
        purpose=str(purpose),
        derived_from=tuple(derived or ()),
        scope_type=str(scope_type),
        scope_id=scope_id,
        key=key,
        sensitivity=str(sensitivity),
        retention_basis=str(basis),
        expires_at=expires_at,
        confidence=float(confidence),
        veracity=str(veracity),
        source_ref=source_ref,
        consent_ref=consent_ref,
        sealed_content=None if sealed is None else SealedText.model_validate(sealed),
        revoked_at=revoked_at,
        superseded_by=superseded_by,
        confirmed_at=confirmed_at,
    )


_HEAD_COLUMNS = (
    "memory_id, subject_id, revision, status, kind, purpose, derived_from, scope_type, scope_id, key, sensitivity,"
    " retention_basis, expires_at, confidence, veracity, source_ref, consent_ref, sealed_content, revoked_at,"
    " superseded_by, confirmed_at"
)


_BY_ID = f"SELECT {_HEAD_COLUMNS} FROM ledger_memories WHERE memory_id = ANY(%s) ORDER BY memory_id"


def lock_heads(conn: psycopg.Connection, memory_ids: Sequence[str]) -> dict[str, MemoryHead]:
    """Lock (``FOR UPDATE``, until the transaction ends) and return the heads of the
    given memories, for a command about to change them (absent ids are left out)."""
    rows = _sql(conn, _BY_ID + " FOR UPDATE", (list(memory_ids),)).fetchall()
    return {r[0]: _head(r) for r in rows}


def read_heads(conn: psycopg.Connection, memory_ids: Sequence[str]) -> dict[str, MemoryHead]:
    """The heads of the given memories as last committed, without locking them (absent
    ids are left out): for reads, which must neither wait for a command in progress nor
    hold one up. A command that acts on a head locks it again (``lock_heads``)."""
    rows = _sql(conn, _BY_ID, (list(memory_ids),)).fetchall()
    return {r[0]: _head(r) for r in rows}


def heads_where(
    conn: psycopg.Connection, subject_id: str, condition: str, params: Sequence[object], lock: bool = True
) -> list[MemoryHead]:
    """Lock and return the subject's heads matching an SQL ``condition`` (trusted text),
    ordered by memory id; with ``lock=False`` a plain read of the last committed heads
    (as ``read_heads``)."""
    rows = _sql(
        conn,
        f"SELECT {_HEAD_COLUMNS} FROM ledger_memories WHERE subject_id = %s AND ({condition})"
        f" ORDER BY memory_id{' FOR UPDATE' if lock else ''}",
        (subject_id, *params),
    ).fetchall()
    return [_head(r) for r in rows]


_LIVE_IN_SLOT = (
    "status = ANY(%s) AND kind <> 'summary' AND purpose = %s AND scope_type = %s AND scope_id = %s"
    " AND key IS NOT DISTINCT FROM %s AND (expires_at IS NULL OR expires_at > %s)"
)


def live_in_slot(
    conn: psycopg.Connection, subject_id: str, purpose: str, scope: Scope, key: str | None, now: datetime
) -> list[MemoryHead]:
    """Lock and return the live non-summary memories of one slot: the same subject,
    purpose, scope and ``key`` (DESIGN.md: the unit of supersession), active or awaiting
    confirmation and not expired at ``now`` (UTC; swept or not)."""
    return heads_where(
        conn, subject_id, _LIVE_IN_SLOT, (list(ACTIVE_STATUSES), purpose, scope.type, scope.id, key, now)
    )


def lock_subjects_against_erasure(
    conn: psycopg.Connection, subject_ids: Sequence[str], exclusive: bool = False
) -> None:
    """Take a transaction-scoped advisory lock on each subject, in sorted order and in one
    statement: shared for a command that adds memories to it (a write, a supersession,
    and those that regenerate summaries: a confirmation, a revocation, an expiry, a
    redaction), exclusive for an erasure. An erasure reads the subject's heads to decide what to
    erase, and the projections remove every row of an erased subject; a write that
    committed after that read but reached the log before the erasure would be erased
    from every store and live in the ledger. With the lock, a write either commits
    before the erasure reads (and is erased with the subject) or waits until it commits
    (and its events follow the erasure's in the log). Writes of one subject do not wait
    for each other. Taken before any other lock of the command (``lock_slots``,
    ``lock_heads``), so that two commands never wait for each other in a cycle."""
    if not subject_ids:
        return
    keys = sorted({json.dumps(["subject", s]) for s in subject_ids})
    fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    _sql(conn, f"SELECT count({fn}(hashtextextended(k, 2))) FROM unnest(%s::text[]) AS k", (keys,))


def lock_slots(conn: psycopg.Connection, slots: Sequence[tuple[str, str, Scope, str]]) -> None:
    """Take a transaction-scoped advisory lock on each slot ``(subject_id, purpose,
    scope, key)`` (DESIGN.md: the unit of supersession), in sorted order and in one
    statement, so that two commands never wait for each other in a cycle. A command that
    reads a slot's live memories to decide (a write, a supersession, a confirmation)
    takes its slot's lock first: a second command on the slot waits until the first
    commits, then reads what it wrote. Without it, two writes of one key at once each
    found the other's memory not yet committed, and the slot kept two live answers."""
    if not slots:
        return
    keys = sorted({json.dumps([s, p, scope.type, scope.id, k]) for s, p, scope, k in slots})
    _sql(conn, "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 1))) FROM unnest(%s::text[]) AS k", (keys,))


def find_statement(
    conn: psycopg.Connection,
    subject_id: str,
    purpose: str,
    scope: Scope,
    key: str | None,
    statement_hmac: str,
    now: datetime,
    sensitivity: str,
    consent_ref: str | None,
    expires_at: datetime | None,
) -> MemoryHead | None:
    """The live memory of this slot (as ``live_in_slot``) that makes the same statement
    (same normalised text, by its keyed fingerprint) under the same sensitivity class and
    consent, and that does not outlive ``expires_at``, locked; ``None`` if there is none."""
    heads = heads_where(
        conn,
        subject_id,
        _LIVE_IN_SLOT + " AND statement_hmac = %s AND sensitivity = %s AND consent_ref IS NOT DISTINCT FROM %s"
        " AND (%s::timestamptz IS NULL OR (expires_at IS NOT NULL AND expires_at <= %s))",
        (
            list(ACTIVE_STATUSES),
            purpose,
            scope.type,
            scope.id,
            key,
            now,
            statement_hmac,
            sensitivity,
            consent_ref,
            expires_at,
            expires_at,
        ),
    )
    return heads[0] if heads else None


def live_statements(conn: psycopg.Connection, subject_ids: Sequence[str], statement_hmacs: Sequence[str]) -> set[str]:
    """Which of ``statement_hmacs`` a live memory of one of ``subject_ids`` makes (one read
    for a whole batch of writes). ``find_statement`` can only find a memory whose
    statement fingerprint is among these, so a batch skips it for the others."""
    rows = _sql(
        conn,
        "SELECT DISTINCT statement_hmac FROM ledger_memories WHERE statement_hmac = ANY(%s)"
        " AND subject_id = ANY(%s) AND status = ANY(%s)",
        (list(statement_hmacs), list(subject_ids), list(ACTIVE_STATUSES)),
    ).fetchall()
    return {str(r[0]) for r in rows}


def subjects_with_revocations(conn: psycopg.Connection, subject_ids: Sequence[str]) -> set[str]:
    """Which of ``subject_ids`` ever withdrew a consent (one read for a batch): only their
    writes need the withdrawn-consent check of ``ledger.admission``."""
    rows = _sql(
        conn, "SELECT DISTINCT subject_id FROM consent_revocations WHERE subject_id = ANY(%s)", (list(subject_ids),)
    ).fetchall()
    return {str(r[0]) for r in rows}


def derived_closure(conn: psycopg.Connection, memory_ids: Sequence[str]) -> list[str]:
    """Every memory derived, directly or transitively, from any of ``memory_ids``
    (summaries and inferences), excluding the given ids themselves."""
    found: set[str] = set()
    frontier = list(memory_ids)
    while frontier:
        rows = _sql(
            conn, "SELECT memory_id FROM ledger_memories WHERE derived_from && %s::text[]", (frontier,)
        ).fetchall()
        frontier = [r[0] for r in rows if r[0] not in found and r[0] not in memory_ids]
        found.update(frontier)
    return sorted(found)


_EARLIER_SQL = """
WITH RECURSIVE earlier(memory_id) AS (
    SELECT memory_id FROM ledger_memories WHERE superseded_by = ANY(%(ids)s)
  UNION
    SELECT m.memory_id FROM ledger_memories m JOIN earlier e ON m.superseded_by = e.memory_id
)
SELECT memory_id FROM earlier WHERE memory_id <> ALL(%(ids)s) ORDER BY memory_id
"""


def earlier_versions(conn: psycopg.Connection, memory_ids: Sequence[str]) -> list[str]:
    """Every memory the given ones superseded, directly or through a chain of
    ``superseded_by`` links (``ledger.supersession``), of any status (the given ids left
    out), sorted."""
    if not memory_ids:
        return []
    return [str(r[0]) for r in _sql(conn, _EARLIER_SQL, {"ids": list(memory_ids)})]  # type: ignore[arg-type]


def slot_heads(
    conn: psycopg.Connection, subject_id: str, slots: Sequence[tuple[str, str, str, str]]
) -> list[MemoryHead]:
    """The subject's non-summary heads of any status in the given slots ``(purpose,
    scope type, scope id, key)``, as last committed (no row lock, as ``read_heads``),
    ordered by memory id. An erased head is in none: it forgot its key and scope id."""
    if not slots:
        return []
    purposes, scope_types, scope_ids, keys = (list(column) for column in zip(*slots, strict=True))
    return heads_where(
        conn,
        subject_id,
        "kind <> 'summary' AND (purpose, scope_type, scope_id, key) IN"
        " (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]))",
        (purposes, scope_types, scope_ids, keys),
        lock=False,
    )


def lock_attempts(
    conn: psycopg.Connection, attempt_hmacs: Sequence[str]
) -> dict[str, tuple[str, tuple[str, ...], datetime]]:
    """Take a transaction-scoped advisory lock on each of ``attempt_hmacs`` (in sorted
    order, in one statement, so that two commands never wait for each other in a cycle)
    and return the attempts already recorded under them: ``{hmac: (memory id, event ids,
    recorded_at)}``. A second attempt in flight at once waits for the first to end, then
    sees it (``ledger.admission``)."""
    if not attempt_hmacs:
        return {}
    keys = sorted(set(attempt_hmacs))
    _sql(conn, "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) FROM unnest(%s::text[]) AS k", (keys,))
    rows = _sql(
        conn,
        "SELECT attempt_hmac, memory_id, event_ids, recorded_at FROM write_attempts WHERE attempt_hmac = ANY(%s)",
        (keys,),
    ).fetchall()
    return {str(r[0]): (str(r[1]), tuple(r[2]), r[3]) for r in rows}


def record_attempt(
    conn: psycopg.Connection, attempt_hmac: str, subject_id: str, memory_id: str, event_ids: Sequence[str], at: datetime
) -> None:
    """Remember the first attempt of a write under its fingerprint (in the command's
    transaction: forgotten if it rolls back, and when the memory's keys are destroyed,
    ``forget_personal``); held back like the heads (``ledger.write_behind``)."""
    write_behind.insert(
        conn,
        "write_attempts",
        ("attempt_hmac", "subject_id", "memory_id", "event_ids", "recorded_at"),
        (attempt_hmac, subject_id, memory_id, list(event_ids), at),
    )


def insert_head(
    conn: psycopg.Connection,
    *,
    memory_id: str,
    subject_id: str,
    status: str,
    kind: str,
    purpose: str,
    scope_type: str,
    scope_id: str,
    key: str | None,
    consent_ref: str | None,
    turn_id: str | None,
    tool_call_id: str | None,
    source_ref: str | None,
    derived_from: Sequence[str],
    expires_at: datetime | None,
    written_at: datetime,
    content_hmac: str | None,
    sensitivity: str,
    retention_basis: str,
    confidence: float,
    veracity: str,
    statement_hmac: str | None,
    sealed_content: SealedText,
    confirmed_at: datetime | None = None,
) -> None:
    """Record a new memory at revision 1 (``confirmed_at``: when the subject confirmed
    it, if it was written confirmed); held back until the next read of the heads while a
    command defers its inserts (``ledger.write_behind``)."""
    write_behind.insert(
        conn,
        "ledger_memories",
        _INSERT_COLUMNS,
        (
            memory_id,
            subject_id,
            1,
            status,
            kind,
            purpose,
            scope_type,
            scope_id,
            key,
            consent_ref,
            turn_id,
            tool_call_id,
            source_ref,
            list(derived_from),
            expires_at,
            written_at,
            content_hmac,
            sensitivity,
            retention_basis,
            confidence,
            veracity,
            statement_hmac,
            Jsonb(sealed_content.model_dump(mode="json")),
            confirmed_at,
        ),
    )


_INSERT_COLUMNS = (
    "memory_id",
    "subject_id",
    "revision",
    "status",
    "kind",
    "purpose",
    "scope_type",
    "scope_id",
    "key",
    "consent_ref",
    "turn_id",
    "tool_call_id",
    "source_ref",
    "derived_from",
    "expires_at",
    "written_at",
    "content_hmac",
    "sensitivity",
    "retention_basis",
    "confidence",
    "veracity",
    "statement_hmac",
    "sealed_content",
    "confirmed_at",
)


def bump(conn: psycopg.Connection, memory_id: str, revision: int, status: str | None = None) -> None:
    """Set a memory's revision (and status, when given)."""
    _sql(
        conn,
        "UPDATE ledger_memories SET revision = %s, status = coalesce(%s, status) WHERE memory_id = %s",
        (revision, status, memory_id),
    )


def set_fields(conn: psycopg.Connection, memory_id: str, **values: object) -> None:
    """Update head columns of one memory (column names are trusted code, values are
    parameters). ``SealedText`` values are stored as JSON."""
    columns = ", ".join(f"{name} = %s" for name in values)
    params = [Jsonb(v.model_dump(mode="json")) if isinstance(v, SealedText) else v for v in values.values()]
    _sql(conn, f"UPDATE ledger_memories SET {columns} WHERE memory_id = %s", (*params, memory_id))


def record_revocation(conn: psycopg.Connection, subject_id: str, consent_ref: str, at: datetime) -> None:
    """Remember that the subject withdrew consent ``consent_ref`` (first time wins)."""
    _sql(
        conn,
        "INSERT INTO consent_revocations (subject_id, consent_ref, revoked_at) VALUES (%s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (subject_id, consent_ref, at),
    )


def revoked_at(conn: psycopg.Connection, subject_id: str, consent_ref: str) -> datetime | None:
    """When the subject withdrew consent ``consent_ref``, or ``None``."""
    row = _sql(
        conn,
        "SELECT revoked_at FROM consent_revocations WHERE subject_id = %s AND consent_ref = %s",
        (subject_id, consent_ref),
    ).fetchone()
    return None if row is None else row[0]


def mark_keys_destroyed(conn: psycopg.Connection, memory_ids: Sequence[str], at: datetime) -> None:
    """Record that the data keys of these memories are gone: their sealed copy and their
    personal fields are dropped from the head table too (``forget_personal``), so the
    head keeps nothing the log can no longer show."""
    _sql(conn, "UPDATE ledger_memories SET keys_destroyed_at = %s WHERE memory_id = ANY(%s)", (at, list(memory_ids)))
    forget_personal(conn, memory_ids)


def redacted_state(conn: psycopg.Connection, memory_id: str) -> RedactedState:
    """The memory's current state, as ``MemoryRedacted`` carries it."""
    row = _sql(
        conn,
        "SELECT status, kind, purpose, scope_type, scope_id, expires_at, derived_from FROM ledger_memories"
        " WHERE memory_id = %s",
        (memory_id,),
    ).fetchone()
    assert row is not None
    status, kind, purpose, scope_type, _scope_id, expires_at, derived = row
    return RedactedState(
        status=status,
        kind=kind,
        purpose=purpose,
        scope_type=scope_type,
        expires_at=expires_at,
        derived_from=tuple(derived or ()),
    )


_PERSONAL_COLUMNS = tuple(PersonalFields.model_fields)
"""The head columns holding a memory's personal fields (named as ``PersonalFields``'s)."""


def personal_fields(conn: psycopg.Connection, memory_id: str) -> PersonalFields:
    """The memory's personal fields as its head holds them (``contracts.PersonalFields``)."""
    row = _sql(
        conn, f"SELECT {', '.join(_PERSONAL_COLUMNS)} FROM ledger_memories WHERE memory_id = %s", (memory_id,)
    ).fetchone()
    assert row is not None
    return PersonalFields.model_validate(dict(zip(_PERSONAL_COLUMNS, row, strict=True)))


def forget_personal(conn: psycopg.Connection, memory_ids: Sequence[str]) -> None:
    """Drop the personal fields of erased memories from their heads: key, scope id,
    provenance references, statement fingerprint and sealed copy (the content fingerprint
    stays: trace probes search the stores with it). What stays is content-free: ids,
    subject, revision, status, kind, purpose, scope type, class, times and lineage. The
    recorded attempts of writes that ended in these memories (``write_attempts``) go too."""
    cleared = ", ".join(f"{c} = NULL" for c in (*_PERSONAL_COLUMNS, "statement_hmac", "sealed_content"))
    _sql(conn, f"UPDATE ledger_memories SET {cleared} WHERE memory_id = ANY(%s)", (list(memory_ids),))
    # the fingerprints of the writes' turn and tool call ids: nothing is a retry of them any more
    _sql(conn, "DELETE FROM write_attempts WHERE memory_id = ANY(%s)", (list(memory_ids),))


def content_hmacs(conn: psycopg.Connection, memory_ids: Sequence[str]) -> list[str]:
    """The content fingerprints recorded for the given memories (those that have one)."""
    rows = _sql(
        conn,
        "SELECT content_hmac FROM ledger_memories WHERE memory_id = ANY(%s) AND content_hmac IS NOT NULL",
        (list(memory_ids),),
    ).fetchall()
    return [r[0] for r in rows]
