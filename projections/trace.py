"""Trace of an erasure request: per store, whether and when the erasure was applied
(from the receipts projections write), and a live probe that the memories are absent.

Stores: ``facts`` (rows and full-text index), ``history`` (content-free metadata only),
``vectors`` (points and payloads), ``cache`` (Redis entries), ``summaries`` (derived
summaries), ``log`` (data keys destroyed, so the log's copies are unreadable) and, when
the targets can probe it, ``dlq``: dead letters of the erasure (``ledger.dead_letters``),
purged from a Postgres DLQ in the erasure's transaction, or, in a Kafka DLQ topic that
cannot be edited, listed with status ``reported``.

Probes look twice: by memory id (a copy of an erased memory: it decides the verdict)
and by content fingerprint (the keyed HMAC of the text: copies of identical text under
any id, which other, unerased memories may legitimately hold; reported, and a copy of
an erased memory found this way is also found by id).

Verdict (``verdict_of``): ``complete`` when every store has a receipt and every probe
by id finds nothing (a ``reported`` DLQ counts as done: what it keeps is listed, and no
operation of the store can remove just those letters); ``failed`` when a probe finds
data in a store that claims to have applied the erasure; ``pending`` otherwise (some
store has not applied it yet or could not be probed).

Two more things are reported, not judged (no supported path reads them), apart from
``stores``: the ``disk`` row (``TraceReport.disk``, the last row of the table),
``compacted at T`` once a complete ``memledger compact`` ran after every store had
applied the erasure (``applied``), else ``residue until compaction`` (``reported``): old
row versions, index entries, WAL segments and dumps may still hold the bytes; and the
earlier versions of the erased memories that the request left (``ledger.supersession``),
with their state now: whether each still holds content and whether it was reinstated;
and the claims it reinstated because it erased their last rival in a conflict, with their
state now.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
import redis
from psycopg_pool import ConnectionPool

from contracts import iso_utc
from ledger.dead_letters import DeadLetterProbe, ErasureScope, scope_of
from projections.cache import RecallCache
from projections.compaction import last_complete
from projections.errors import UnknownRequestError
from projections.vector_index import VectorIndex
from projections.wording import counted, one_line

STORES = ("facts", "history", "vectors", "cache", "summaries", "log")


@dataclass
class StoreTrace:
    """One store's state for a request.

    ``status``: ``applied``, ``pending``, ``failed`` or (``dlq`` in Kafka only)
    ``reported``: letters kept in a queue that cannot be edited, listed in ``probe``.
    ``applied_at``: ISO 8601 UTC of the receipt that counts (``projection``'s, a serving
    version); ``log_partition``/``log_offset``: where the store read the erasure.
    ``latency_s``: seconds from the request until the copies were gone: to that receipt,
    or, when ``rebuilt`` (the serving version was created after the request, from a log
    whose keys were already destroyed, so it never held the memories), to the last
    receipt of the versions that existed at the request (``removed_by``, at
    ``removed_at``; ``None`` when none of them left a receipt). ``probe_found`` counts
    copies of the erased memories the live probe found by memory id,
    ``fingerprint_found`` copies of identical text found by content fingerprint (0 =
    absent; None = the store could not be probed, or has no text to fingerprint).
    """

    store: str
    status: str
    applied_at: str | None = None
    log_partition: int | None = None
    log_offset: int | None = None
    items_removed: int | None = None
    latency_s: float | None = None
    probe_found: int | None = None
    probe: str = ""
    fingerprint_found: int | None = None
    fingerprint_probe: str = "-"
    projection: str | None = None
    rebuilt: bool = False
    removed_by: str | None = None
    removed_at: str | None = None


@dataclass(frozen=True)
class EarlierVersion:
    """An earlier version of an erased memory that the request did not erase: its
    ``status`` now, whether it still ``holds_content`` (its keys are not destroyed) and
    whether the request ``reinstated`` it (its replacement was erased: it awaits
    confirmation)."""

    memory_id: str
    status: str
    holds_content: bool
    reinstated: bool


@dataclass(frozen=True)
class ReinstatedRival:
    """A claim the request reinstated because it erased the last other live claim of its
    slot, a rival in conflict with it (``ledger.supersession.rivals_left``): its
    ``status`` now and whether it still ``holds_content``."""

    memory_id: str
    status: str
    holds_content: bool


@dataclass
class TraceReport:
    """Everything a compliance reviewer needs for one erasure request. Times are ISO
    8601 UTC; ``request_kind`` is ``memories``, ``subject`` or ``source`` (then
    ``source_ref`` names the turn, tool call or document); ``verdict`` is ``complete``,
    ``pending`` or ``failed``."""

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
    source_ref: str | None = None
    fingerprints: int = 0
    with_history: bool = False
    earlier_versions: list[EarlierVersion] = field(default_factory=list)
    rivals_reinstated: list[ReinstatedRival] = field(default_factory=list)
    disk: StoreTrace | None = None
    """Residue on disk (``applied``: compacted; ``reported``: until compaction); not in
    ``stores``, whose rows are the supported paths the verdict judges."""

    def rows(self) -> list[StoreTrace]:
        """The rows of the table: every store, then ``disk``."""
        return [*self.stores, *([self.disk] if self.disk is not None else [])]

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
    fingerprint: Callable[[str], str] | None = None
    """The ledger's content fingerprint (``Keyring.fingerprint``), to probe cached text."""
    receipt_projections: tuple[str, ...] | None = None
    """Projection ids (``facts_v2``, ...) whose receipts count: those of the serving
    versions, which are the ones probed. ``None``: any projection's receipt counts."""
    dead_letters: Callable[[ErasureScope], DeadLetterProbe] | None = None
    """Probes the DLQ for an erasure's letters; ``None``: no ``dlq`` store in the trace."""


def trace(pool: ConnectionPool, request_id: str, targets: TraceTargets) -> TraceReport:
    """Build the trace of ``request_id``: the request, each store's receipt and live
    probes (by memory id and by content fingerprint), and the verdict.

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
        receipts = _receipts(conn, request_id)
        probed, later = _probed_ids(conn, targets, subject, kind, list(ids), part, off)
        # a whole subject: every row of it is probed too, whatever its id, but those of the
        # memories the log recorded after the erasure (later writes, which it leaves)
        whole = later is not None
        spared = later or []
        of_subject = "(memory_id = ANY(%s) OR (%s AND subject_id = %s AND NOT memory_id = ANY(%s)))"
        found: dict[str, int | None] = {
            "facts": _count(
                conn, f"SELECT count(*) FROM {targets.facts_table} WHERE {of_subject}", probed, whole, subject, spared
            ),
            "history": _count(
                conn,
                f"SELECT count(*) FROM {targets.history_table} WHERE {of_subject} AND content_hmac IS NOT NULL",
                probed,
                whole,
                subject,
                spared,
            ),
            "summaries": _count(
                conn,
                f"SELECT count(*) FROM {targets.summaries_table} WHERE {of_subject} OR derived_from && %s",
                probed,
                whole,
                subject,
                spared,
                probed,
            ),
            "log": _count(
                conn,
                "SELECT count(*) FROM memory_keys WHERE ((key_id = ANY(%s) OR split_part(key_id, '/', 1) = ANY(%s))"
                " OR (%s AND subject_id = %s AND key_id LIKE 'subject:%%' AND created_at <= %s))"
                " AND wrapped_key IS NOT NULL",
                probed,
                probed,
                kind == "subject",
                subject,
                requested_at,
            ),
        }
        by_fingerprint: dict[str, int | None] = {
            "facts": _count(
                conn,
                f"SELECT count(*) FROM {targets.facts_table} WHERE content_hmac = ANY(%s) AND content IS NOT NULL",
                hmacs,
            ),
            "history": _count(
                conn, f"SELECT count(*) FROM {targets.history_table} WHERE content_hmac = ANY(%s)", hmacs
            ),
            "summaries": _count(
                conn, f"SELECT count(*) FROM {targets.summaries_table} WHERE content_hmac = ANY(%s)", hmacs
            ),
        }
        source_ref = _source_ref(conn, request_id)
        purged = _dlq_purged(conn, request_id)
        with_history, earlier, rivals = _earlier_versions(conn, request_id)
    report = TraceReport(
        request_id=request_id,
        subject_id=subject,
        request_kind=kind,
        memory_ids=list(ids),
        requested_at=iso_utc(requested_at),
        requested_by=by,
        reason=reason,
        legal_basis=basis,
        log_partition=part,
        log_offset=off,
        source_ref=source_ref,
        fingerprints=len(hmacs),
        with_history=with_history,
        earlier_versions=earlier,
        rivals_reinstated=rivals,
    )
    found["vectors"], by_fingerprint["vectors"] = _probe_vectors(targets.index, subject, probed, set(hmacs), later)
    found["cache"], by_fingerprint["cache"] = _probe_cache(targets, subject, set(probed), set(hmacs), later)
    # the keys were destroyed in the transaction that recorded the request
    log_receipt = _Receipt("log", requested_at, part, off, len(ids), None)
    counted = targets.receipt_projections
    for store in STORES:
        if store == "log":  # the ledger's own receipt always counts
            t = _store_trace(store, [log_receipt], None, found.get(store), requested_at)
        else:
            t = _store_trace(store, receipts.get(store, []), counted, found.get(store), requested_at)
        if store in by_fingerprint:
            t.fingerprint_found = by_fingerprint[store]
            t.fingerprint_probe = _describe(by_fingerprint[store], "identical text")
        report.stores.append(t)
    if targets.dead_letters is not None:
        report.stores.append(_dlq_trace(targets, scope_of(ids, kind, subject, source_ref), purged, log_receipt))
    report.verdict = verdict_of(report.stores)
    with pool.connection() as conn:
        report.disk = _disk_trace(conn, report.stores, requested_at)
    return report


def _probed_ids(
    conn: psycopg.Connection,
    targets: TraceTargets,
    subject: str,
    kind: str,
    ids: list[str],
    partition: int | None,
    offset: int | None,
) -> tuple[list[str], list[str] | None]:
    """The memory ids the probes look for, and the later ones. The first: the request's,
    and for an erasure of a whole subject also every memory of the subject that the log
    held before the erasure (its history rows in the subject's partition before the
    erasure's offset), whether or not the ledger's heads knew it. The second, for such an
    erasure once the log holds it (else ``None``): the memories of the subject the log
    recorded at or after its offset, which it leaves; every other row of the subject in
    any store is a copy the erasure should have removed."""
    if kind != "subject" or partition is None or offset is None:
        return ids, None
    rows = conn.execute(
        f"SELECT memory_id, bool_or(log_offset < %s), bool_or(log_offset >= %s) FROM {targets.history_table}"
        " WHERE subject_id = %s AND log_partition = %s GROUP BY memory_id",
        (offset, offset, subject, partition),
    ).fetchall()
    before = {str(m) for m, earlier, _ in rows if earlier}
    return sorted(set(ids) | before), sorted(str(m) for m, _, after in rows if after)


def _earlier_versions(
    conn: psycopg.Connection, request_id: str
) -> tuple[bool, list[EarlierVersion], list[ReinstatedRival]]:
    """Whether the request erased the history too, the earlier versions it left and the
    rivals it reinstated (recorded at the request), with their state now."""
    row = conn.execute(
        "SELECT with_history, reinstated, earlier_versions, rivals_reinstated FROM erasure_requests"
        " WHERE request_id = %s",
        (request_id,),
    ).fetchone()
    if row is None:
        return False, [], []
    with_history, reinstated, recorded, rivals = bool(row[0]), set(row[1]), list(row[2]), list(row[3])
    ids = list(dict.fromkeys([*recorded, *sorted(reinstated), *rivals]))
    now = {
        str(r[0]): (str(r[1]), bool(r[2]))
        for r in conn.execute(
            "SELECT memory_id, status, sealed_content IS NOT NULL AND status <> 'erased' FROM ledger_memories"
            " WHERE memory_id = ANY(%s)",
            (ids,),
        )
    }
    earlier = [EarlierVersion(m, *now.get(m, ("unknown", False)), m in reinstated) for m in ids if m not in rivals]
    return with_history, earlier, [ReinstatedRival(m, *now.get(m, ("unknown", False))) for m in rivals]


def _disk_trace(conn: psycopg.Connection, stores: list[StoreTrace], requested_at: datetime) -> StoreTrace:
    """The ``disk`` row: compacted by a complete compaction that started once every store
    had applied the erasure, or residue until then (reported, not judged). A store whose
    serving version was rebuilt after the request never held the memories: what counts
    is when the versions that existed then removed them (``removed_at``), so a replay
    after a compaction leaves no residue to report."""
    removed = [s.removed_at if s.rebuilt else s.applied_at for s in stores]
    applied = [datetime.fromisoformat(at) for at in removed if at is not None]
    pending = [f"{s.store} {s.probe}" if s.probe == "unreachable" else s.store for s in stores if s.status == "pending"]
    after = max([requested_at, *applied])
    last = last_complete(conn, after)
    t = StoreTrace(store="disk", status="reported", probe="residue until compaction (memledger compact)")
    if pending:
        t.probe = (
            "residue until compaction (run memledger compact once every store applied the erasure;"
            f" pending: {', '.join(pending)})"
        )
    elif last.complete_at is not None:
        t.status, t.applied_at, t.probe = "applied", last.complete_at, f"compacted at {last.complete_at}"
        t.latency_s = _latency(datetime.fromisoformat(last.complete_at), requested_at)
    elif last.partial_at is not None:
        t.probe = f"residue until compaction (the compaction at {last.partial_at} was partial: {'; '.join(last.left)})"
    return t


def _dlq_purged(conn: psycopg.Connection, request_id: str) -> int:
    if conn.execute("SELECT to_regclass('erasure_dead_letters')").fetchone() == (None,):
        return 0
    row = conn.execute("SELECT purged FROM erasure_dead_letters WHERE request_id = %s", (request_id,)).fetchone()
    return 0 if row is None else int(row[0])


def _dlq_trace(targets: TraceTargets, scope: ErasureScope, purged: int, request: _Receipt) -> StoreTrace:
    """The ``dlq`` row: purged at the request (in its transaction, like the keys), and a
    live probe for letters of the erasure still there."""
    assert targets.dead_letters is not None
    t = StoreTrace(
        store="dlq",
        status="pending",
        applied_at=iso_utc(request.applied_at),
        log_partition=request.log_partition,
        log_offset=request.log_offset,
        items_removed=purged,
        latency_s=0.0,
    )
    try:
        probe = targets.dead_letters(scope)
    except Exception:  # the queue is down: unknown, not absent
        t.probe = "unreachable"
        return t
    left = len(probe.remaining)
    t.probe_found = left
    if left == 0:
        t.status, t.probe = "applied", "absent"
    elif probe.editable:
        t.status, t.probe = "failed", f"{_describe(left)} in {probe.queue}"
    else:
        where = ", ".join(r.describe() for r in probe.remaining[:20]) + (" ..." if left > 20 else "")
        t.status = "reported"
        t.probe = f"{counted(left, 'letter')} kept: {probe.queue} is append-only, not edited ({where})"
    return t


def verdict_of(stores: Iterable[StoreTrace]) -> str:
    """``failed`` if any store failed, ``complete`` if every store applied (or, for a DLQ
    that cannot be edited, reported what it keeps), else ``pending``."""
    statuses = {s.status for s in stores}
    done = statuses <= {"applied", "reported"}
    return "failed" if "failed" in statuses else "complete" if done and statuses else "pending"


def _count(conn: psycopg.Connection, sql: str, *params: object) -> int:
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def _source_ref(conn: psycopg.Connection, request_id: str) -> str | None:
    if conn.execute("SELECT to_regclass('erasure_request_sources')").fetchone() == (None,):
        return None
    row = conn.execute("SELECT source_ref FROM erasure_request_sources WHERE request_id = %s", (request_id,)).fetchone()
    return None if row is None else str(row[0])


def _describe(found: int | None, what: str = "") -> str:
    """``absent``, ``unreachable`` or ``N copies found`` (``N copies of <what> found``)."""
    if found is None:
        return "unreachable"
    if found == 0:
        return "absent"
    return f"{counted(found, 'copy', 'copies')}{' of ' + what if what else ''} found"


class _Receipt(NamedTuple):
    """One projection version's receipt; ``created_at``: when that version was created
    (``None`` for the log, or when the registry does not know the version)."""

    projection: str
    applied_at: datetime
    log_partition: int
    log_offset: int
    items_removed: int
    created_at: datetime | None


def _receipts(conn: psycopg.Connection, request_id: str) -> dict[str, list[_Receipt]]:
    """Every receipt of the request by store, earliest first, with its version's creation time."""
    registry = conn.execute("SELECT to_regclass('projection_versions')").fetchone() != (None,)
    created = (
        "(SELECT v.created_at FROM projection_versions v WHERE r.projection = v.name || '_v' || v.version)"
        if registry
        else "NULL::timestamptz"
    )
    rows = conn.execute(
        "SELECT r.store, r.projection, r.applied_at, r.log_partition, r.log_offset, r.items_removed,"
        f" {created} FROM erasure_receipts r WHERE r.request_id = %s ORDER BY r.applied_at",
        (request_id,),
    ).fetchall()
    found: dict[str, list[_Receipt]] = {}
    for store, *rest in rows:
        found.setdefault(store, []).append(_Receipt(*rest))
    return found


def _latency(at: datetime, requested_at: datetime) -> float:
    return round(max(0.0, (at - requested_at).total_seconds()), 3)


def _store_trace(
    store: str, receipts: list[_Receipt], counted_ids: tuple[str, ...] | None, found: int | None, requested_at: datetime
) -> StoreTrace:
    """A store's row: the first receipt of a version in ``counted_ids`` (any version when
    ``None``) decides whether it applied the erasure; if that version was created after
    the request, the latency is that of the versions that existed then."""
    t = StoreTrace(store=store, status="pending", probe_found=found)
    t.probe = _describe(found)
    counting = [r for r in receipts if counted_ids is None or r.projection in counted_ids]
    if not counting:
        return t
    receipt = counting[0]
    t.projection = None if store == "log" else receipt.projection
    t.applied_at, t.log_partition = iso_utc(receipt.applied_at), receipt.log_partition
    t.log_offset, t.items_removed = receipt.log_offset, receipt.items_removed
    t.latency_s = _latency(receipt.applied_at, requested_at)
    t.status = "applied" if found == 0 else ("failed" if found else "pending")
    if receipt.created_at is not None and receipt.created_at > requested_at:
        t.rebuilt, t.latency_s = True, None
        existed = [r for r in receipts if r.created_at is not None and r.created_at <= requested_at]
        if existed:
            last = existed[-1]
            t.removed_by, t.removed_at = last.projection, iso_utc(last.applied_at)
            t.latency_s = _latency(last.applied_at, requested_at)
    return t


def _probe_vectors(
    index: VectorIndex | None, subject: str, ids: list[str], hmacs: set[str], later: list[str] | None
) -> tuple[int | None, int | None]:
    """(points of the erased ids, or for a whole subject (``later`` not ``None``) of the
    subject but the memories written after the erasure; points of the subject whose
    payload fingerprint matches)."""
    if index is None:
        return None, None
    try:
        of_subject = index.scroll_ids(subject) if hmacs or later is not None else []
        by_id_found = set(index.retrieve(ids))
        if later is not None:
            by_id_found |= set(of_subject) - (set(later) - set(ids))
        by_id = len(by_id_found)
        points = index.retrieve(of_subject) if hmacs else {}
        by_fp = sum(1 for p in points.values() if p.payload.get("content_hmac") in hmacs)
        return by_id, by_fp
    except Exception:  # the store is down: unknown, not absent
        return None, None


def _probe_cache(
    targets: TraceTargets, subject: str, ids: set[str], hmacs: set[str], later: list[str] | None
) -> tuple[int | None, int | None]:
    """(cached items of the erased ids, or for a whole subject (``later`` not ``None``)
    every cached item of the subject but those of the memories written after the erasure,
    in every entry under the subject's key prefix, listed in its entry set or not (an
    entry restored from a backup is a copy whatever the request); cached items whose text
    has an erased fingerprint). An entry that is not a recall result (unreadable, or of
    another shape) counts as one copy found: it may hold anything. ``(None, None)`` when
    Redis does not answer (unknown, not absent)."""
    cache = targets.cache
    if cache is None:
        return None, None
    by_id = by_fp = 0
    spared = set(later or ()) - ids
    try:
        for key in cache.all_entries(subject):  # listed in the entry set or not: found by scanning
            try:
                entry = cache.get(key)
            except ValueError:  # not JSON
                by_id += 1
                continue
            if entry is not None and not isinstance(entry, list):
                by_id += 1
                continue
            for item in entry or []:
                if not isinstance(item, dict) or not isinstance(item.get("memory_id"), str):
                    by_id += 1
                    continue
                mid = item.get("memory_id")
                by_id += mid in ids or (later is not None and mid not in spared)
                if targets.fingerprint is not None and isinstance(item.get("content"), str):
                    by_fp += targets.fingerprint(item["content"]) in hmacs
    except redis.RedisError:
        return None, None
    return by_id, (by_fp if targets.fingerprint is not None else None)


def render_text(report: TraceReport) -> str:
    """A plain-text table of the report, for terminals."""
    r = report  # the subject, the principal, the reason and the source as one terminal line each (one_line)
    lines = [
        f"erasure {r.request_id}  subject {one_line(r.subject_id)}  ({r.request_kind}, "
        f"{counted(len(r.memory_ids), 'memory', 'memories')})",
        f"requested {r.requested_at} by {one_line(r.requested_by)}: {one_line(r.reason)} [{one_line(r.legal_basis)}]",
        *([f"source: {one_line(r.source_ref)}"] if r.source_ref else []),
        f"log position: {log_position(report)}",
        "",
        f"{'store':<10} {'status':<8} {'applied at (UTC)':<33} {'offset':>7} {'removed':>7} {'latency s':>9}"
        "  probe by id; by fingerprint",
    ]
    for s in report.rows():
        lines.append(
            f"{s.store:<10} {s.status:<8} {s.applied_at or '-':<33} {_dash(s.log_offset):>7} "
            f"{_dash(s.items_removed):>7} {_dash(s.latency_s):>9}  {s.probe}; {s.fingerprint_probe}"
        )
    notes = [rebuilt_note(s) for s in report.stores if s.rebuilt]
    lines += ["", *notes, *([""] if notes else []), *earlier_lines(report), *rival_lines(report)]
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines)


NOT_IN_LOG_YET = "not in the log yet: the outbox holds it and its relay publishes it (memledger lag shows the outbox)"
"""Where an erasure is before the log acknowledged it (the distributed mode's outbox)."""


def log_position(report: TraceReport) -> str:
    """``partition P offset O`` of the request's event, or ``NOT_IN_LOG_YET``."""
    if report.log_partition is None or report.log_offset is None:
        return NOT_IN_LOG_YET
    return f"partition {report.log_partition} offset {report.log_offset}"


def earlier_lines(report: TraceReport) -> list[str]:
    """The earlier versions the request left, one line each (none when it erased them)."""
    if not report.earlier_versions:
        return ["earlier versions: erased with the request" if report.with_history else "earlier versions: none", ""]
    lines = ["earlier versions of the erased memories, not erased by this request:"]
    for v in report.earlier_versions:
        held = "holds content" if v.holds_content else "holds no content"
        why = "; reinstated: its replacement was erased" if v.reinstated else ""
        lines.append(f"  {v.memory_id}  {v.status}, {held}{why}")
    return [*lines, ""]


def rival_lines(report: TraceReport) -> list[str]:
    """The claims the request reinstated because it erased their last rival, one line
    each (none when it reinstated none)."""
    if not report.rivals_reinstated:
        return []
    lines = ["claims reinstated because the request erased their last rival in a conflict:"]
    for r in report.rivals_reinstated:
        held = "holds content" if r.holds_content else "holds no content"
        lines.append(f"  {r.memory_id}  {r.status}, {held}")
    return [*lines, ""]


def rebuilt_note(s: StoreTrace) -> str:
    """Why a rebuilt store's latency is not its receipt's (see ``StoreTrace``)."""
    head = f"{s.store}: {s.projection} was rebuilt after the request (it never held the memories)"
    if s.removed_by is None:
        return f"{head}; no receipt from the versions that existed at the request"
    return f"{head}; the copies that existed were gone when {s.removed_by} applied it at {s.removed_at}"


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def to_json(report: TraceReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
