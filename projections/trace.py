"""Trace of an erasure request: per store, whether and when the erasure was applied
(from the receipts projections write), and a live probe that the memories are absent.

Stores: ``facts`` (rows and full-text index), ``history`` (content-free metadata only),
``vectors`` (points and payloads), ``cache`` (Redis entries), ``summaries`` (derived
summaries) and ``log`` (data keys destroyed, so the log's copies are unreadable).

Verdict: ``complete`` when every store has a receipt and every probe finds nothing;
``failed`` when a probe finds data in a store that claims to have applied the erasure;
``pending`` otherwise (some store has not applied it yet or could not be probed).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from projections.cache import RecallCache
from projections.errors import UnknownRequestError
from projections.vector_index import VectorIndex

STORES = ("facts", "history", "vectors", "cache", "summaries", "log")


@dataclass
class StoreTrace:
    """One store's state for a request. ``probe_found`` counts copies the live probe
    found (0 = absent; None = the store could not be probed)."""

    store: str
    status: str
    applied_at: str | None = None
    log_partition: int | None = None
    log_offset: int | None = None
    items_removed: int | None = None
    latency_s: float | None = None
    probe_found: int | None = None
    probe: str = ""


@dataclass
class TraceReport:
    """Everything a compliance reviewer needs for one erasure request."""

    request_id: str
    subject_id: str
    request_kind: str
    memory_ids: list[str]
    requested_at: str
    requested_by: str
    reason: str
    legal_basis: str
    log_partition: int | None
    log_offset: int | None
    stores: list[StoreTrace] = field(default_factory=list)
    verdict: str = "pending"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TraceTargets:
    """Where to look: table names of the current projection versions, the vector index
    and the cache (either may be ``None`` when this process cannot reach it)."""

    facts_table: str = "facts_v1"
    history_table: str = "facts_history_v1"
    summaries_table: str = "summaries_v1"
    index: VectorIndex | None = None
    cache: RecallCache | None = None


def trace(pool: ConnectionPool, request_id: str, targets: TraceTargets) -> TraceReport:
    """Build the trace of ``request_id``.

    Raises:
        UnknownRequestError: no such request was recorded by the ledger.
    """
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT subject_id, request_kind, memory_ids, content_hmacs, requested_by, reason, legal_basis,"
            " requested_at, log_partition, log_offset FROM erasure_requests WHERE request_id = %s",
            (request_id,),
        ).fetchone()
        if row is None:
            raise UnknownRequestError(request_id)
        subject, kind, ids, hmacs, by, reason, basis, requested_at, part, off = row
        receipts = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT store, applied_at, log_partition, log_offset, items_removed FROM erasure_receipts"
                " WHERE request_id = %s ORDER BY applied_at",
                (request_id,),
            ).fetchall()
        }
        found = {
            "facts": conn.execute(
                f"SELECT count(*) FROM {targets.facts_table} WHERE memory_id = ANY(%s)", (ids,)
            ).fetchone()[0],  # type: ignore[index]
            "history": conn.execute(
                f"SELECT count(*) FROM {targets.history_table} WHERE memory_id = ANY(%s) AND content_hmac IS NOT NULL",
                (ids,),
            ).fetchone()[0],  # type: ignore[index]
            "summaries": conn.execute(
                f"SELECT count(*) FROM {targets.summaries_table}"
                " WHERE memory_id = ANY(%s) OR derived_from && %s::text[]",
                (ids, ids),
            ).fetchone()[0],  # type: ignore[index]
            "log": conn.execute(
                "SELECT count(*) FROM memory_keys WHERE (key_id = ANY(%s) OR split_part(key_id, '/', 1) = ANY(%s))"
                " AND wrapped_key IS NOT NULL",
                (ids, ids),
            ).fetchone()[0],  # type: ignore[index]
        }
        # identical text held by other, unerased memories of the subject: reported, not a failure
        same_text = conn.execute(
            f"SELECT count(*) FROM {targets.facts_table} WHERE subject_id = %s AND content_hmac = ANY(%s)"
            " AND NOT memory_id = ANY(%s)",
            (subject, hmacs, ids),
        ).fetchone()[0]  # type: ignore[index]
    report = TraceReport(
        request_id=request_id,
        subject_id=subject,
        request_kind=kind,
        memory_ids=list(ids),
        requested_at=requested_at.isoformat(),
        requested_by=by,
        reason=reason,
        legal_basis=basis,
        log_partition=part,
        log_offset=off,
    )
    found["vectors"] = _probe_vectors(targets.index, ids)
    found["cache"] = _probe_cache(targets.cache, subject, set(ids))
    # the keys were destroyed in the transaction that recorded the request
    receipts["log"] = (requested_at, part, off, len(ids))
    for store in STORES:
        report.stores.append(_store_trace(store, receipts.get(store), found.get(store), requested_at))
    if same_text:
        report.stores[0].probe += f" (by id; {same_text} other memories of the subject hold identical text)"
    statuses = {s.status for s in report.stores}
    report.verdict = "failed" if "failed" in statuses else "complete" if statuses == {"applied"} else "pending"
    return report


def _store_trace(store: str, receipt: Any, found: int | None, requested_at: datetime) -> StoreTrace:
    t = StoreTrace(store=store, status="pending", probe_found=found)
    t.probe = "unreachable" if found is None else ("absent" if found == 0 else f"{found} copies found")
    if receipt is not None:
        applied_at, part, off, items = receipt
        t.applied_at, t.log_partition, t.log_offset, t.items_removed = applied_at.isoformat(), part, off, items
        t.latency_s = round(max(0.0, (applied_at - requested_at).total_seconds()), 3)
        t.status = "applied" if found == 0 else ("failed" if found else "pending")
    return t


def _probe_vectors(index: VectorIndex | None, ids: list[str]) -> int | None:
    if index is None:
        return None
    try:
        return len(index.retrieve(ids))
    except Exception:  # the store is down: unknown, not absent
        return None


def _probe_cache(cache: RecallCache | None, subject: str, ids: set[str]) -> int | None:
    if cache is None:
        return None
    try:
        hits = 0
        for key in cache.entries(subject):
            value = cache.get(key) or []
            hits += sum(1 for item in value if item.get("memory_id") in ids)
        return hits
    except Exception:  # the store is down: unknown, not absent
        return None


def render_text(report: TraceReport) -> str:
    """A plain-text table of the report, for terminals."""
    lines = [
        f"erasure {report.request_id}  subject {report.subject_id}  ({report.request_kind}, "
        f"{len(report.memory_ids)} memories)",
        f"requested {report.requested_at} by {report.requested_by}: {report.reason} [{report.legal_basis}]",
        f"log position: partition {report.log_partition} offset {report.log_offset}",
        "",
        f"{'store':<10} {'status':<8} {'applied at (UTC)':<33} {'offset':>7} {'removed':>7} {'latency s':>9}  probe",
    ]
    for s in report.stores:
        lines.append(
            f"{s.store:<10} {s.status:<8} {s.applied_at or '-':<33} {_dash(s.log_offset):>7} "
            f"{_dash(s.items_removed):>7} {_dash(s.latency_s):>9}  {s.probe}"
        )
    lines += ["", f"verdict: {report.verdict}"]
    return "\n".join(lines)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def to_json(report: TraceReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
