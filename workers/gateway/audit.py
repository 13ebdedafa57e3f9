"""The audit log: every refused attempt, and every erasure, trace and export, with time
(UTC), principal, key, subject, route or tool, outcome and reason. Never memory content:
``reason`` is a rule or an id, as the refusal's message gives it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg_pool import ConnectionPool

from contracts import utc_now

MAX_REASON = 1000
"""Longest reason kept, in characters."""


@dataclass(frozen=True)
class AuditRecord:
    """One row of ``audit_log``; ``outcome`` is ``refused`` or ``ok``."""

    id: int
    at: datetime
    principal: str | None
    key_id: str | None
    subject_id: str | None
    route: str
    outcome: str
    reason: str


class AuditLog:
    """The ``audit_log`` table (``workers.gateway.schema``)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def record(
        self,
        route: str,
        outcome: str,
        reason: str,
        *,
        principal: str | None = None,
        key_id: str | None = None,
        subject_id: str | None = None,
    ) -> None:
        """Append one entry (its own transaction: a refusal is recorded though nothing else is)."""
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO audit_log (at, principal, key_id, subject_id, route, outcome, reason)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (utc_now(), principal, key_id, subject_id, route, outcome, reason[:MAX_REASON]),
            )

    def list(
        self, limit: int = 100, before: int | None = None, subject_id: str | None = None
    ) -> tuple[list[AuditRecord], int | None]:
        """Entries newest first, at most ``limit``, with ids below ``before``; and the
        ``before`` of the next (older) page, ``None`` on the last one."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, at, principal, key_id, subject_id, route, outcome, reason FROM audit_log"
                " WHERE (%s::bigint IS NULL OR id < %s) AND (%s::text IS NULL OR subject_id = %s)"
                " ORDER BY id DESC LIMIT %s",
                (before, before, subject_id, subject_id, limit + 1),
            ).fetchall()
        records = [AuditRecord(*r) for r in rows[:limit]]
        return records, records[-1].id if len(rows) > limit and records else None
