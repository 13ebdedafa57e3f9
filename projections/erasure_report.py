"""Erasure requests over a period, each with its verdict, for periodic compliance
reporting. The verdict of each request is the one ``trace`` computes (receipts plus
live probes), not a second opinion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from contracts import iso_utc
from projections.trace import TraceTargets, trace
from projections.wording import counted


@dataclass(frozen=True)
class ErasureSummary:
    """One erasure request in a report. ``requested_at`` is ISO 8601 UTC; ``memories``
    counts the memories it erased (named ones and those derived from them); ``verdict``
    is ``complete``, ``pending`` or ``failed``; ``pending_stores`` and ``failed_stores``
    name the stores behind a verdict that is not ``complete``."""

    request_id: str
    subject_id: str
    request_kind: str
    requested_at: str
    requested_by: str
    legal_basis: str
    memories: int
    verdict: str
    pending_stores: tuple[str, ...]
    failed_stores: tuple[str, ...]


@dataclass(frozen=True)
class ErasureReport:
    """The requests made in ``[since, until)`` (ISO 8601 UTC), oldest first, and the
    number of requests per verdict. ``withheld`` counts requests left out because the
    reader may not see their subject."""

    since: str
    until: str | None
    requests: tuple[ErasureSummary, ...]
    withheld: int = 0

    @property
    def totals(self) -> dict[str, int]:
        out = {"complete": 0, "pending": 0, "failed": 0}
        for r in self.requests:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "until": self.until,
            "totals": self.totals,
            "withheld": self.withheld,
            "requests": [asdict(r) for r in self.requests],
        }

    def render(self) -> str:
        """A plain-text table for terminals."""
        period = f"{self.since} .. {self.until or 'now'}"
        withheld = counted(self.withheld, "request")
        hidden = f" ({withheld} of subjects you may not erase left out)" if self.withheld else ""
        if not self.requests:
            return f"no erasure requests in {period}{hidden}"
        head = (
            f"{'requested at (UTC)':<32} {'request id':<40} {'subject':<16} {'kind':<8} "
            f"{'by':<12} {'memories':>8}  verdict"
        )
        lines = [f"erasure requests {period}", "", head]
        for r in self.requests:
            note = ""
            if r.failed_stores:
                note = f" (failed: {', '.join(r.failed_stores)})"
            elif r.pending_stores:
                note = f" (pending: {', '.join(r.pending_stores)})"
            lines.append(
                f"{r.requested_at:<32} {r.request_id:<40} {r.subject_id:<16} {r.request_kind:<8} "
                f"{r.requested_by:<12} {r.memories:>8}  {r.verdict}{note}"
            )
        totals = ", ".join(f"{n} {v}" for v, n in self.totals.items())
        lines += ["", f"{counted(len(self.requests), 'request')}: {totals}{hidden}"]
        return "\n".join(lines)


def erasure_report(
    pool: ConnectionPool,
    targets: TraceTargets,
    since: datetime,
    until: datetime | None = None,
    include: Callable[[str], bool] | None = None,
) -> ErasureReport:
    """Every erasure request with ``since <= requested_at < until`` (``until`` None: no
    upper bound), oldest first, each traced for its verdict. ``include(subject_id)``
    decides which subjects the reader may see (default: all); the others are counted in
    ``withheld``.

    Raises:
        ValueError: ``since`` or ``until`` is naive (no timezone), or ``until`` is not
            after ``since``; the message names the field.
    """
    if since.tzinfo is None:
        raise ValueError("since: must be timezone-aware (UTC)")
    if until is not None and until.tzinfo is None:
        raise ValueError("until: must be timezone-aware (UTC)")
    if until is not None and until <= since:
        raise ValueError("until: must be after since")
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT request_id, subject_id FROM erasure_requests WHERE requested_at >= %s"
            " AND (%s::timestamptz IS NULL OR requested_at < %s) ORDER BY requested_at, request_id",
            (since, until, until),
        ).fetchall()
    ids = [str(r) for r, subject in rows if include is None or include(str(subject))]
    summaries = []
    for request_id in ids:
        t = trace(pool, request_id, targets)
        summaries.append(
            ErasureSummary(
                request_id=t.request_id,
                subject_id=t.subject_id,
                request_kind=t.request_kind,
                requested_at=t.requested_at,
                requested_by=t.requested_by,
                legal_basis=t.legal_basis,
                memories=len(t.memory_ids),
                verdict=t.verdict,
                pending_stores=tuple(s.store for s in t.stores if s.status == "pending"),
                failed_stores=tuple(s.store for s in t.stores if s.status == "failed"),
            )
        )
    return ErasureReport(
        since=iso_utc(since),
        until=None if until is None else iso_utc(until),
        requests=tuple(summaries),
        withheld=len(rows) - len(ids),
    )
