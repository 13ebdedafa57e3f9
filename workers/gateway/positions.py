"""Where the projections are in the log: waiting until positions are applied (read your
own writes) and the lag of every projection version."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ledger import outbox
from projections import base, embedding_queue, stalls, versions
from projections.vectors import visible_positions
from workers import wire
from workers.bootstrap import Services
from workers.gateway.errors import InvalidRequestError, UnavailableError

RECALL_READS = wire.READS
"""The projections recall reads (the cache is re-checked against facts)."""

BEHIND_RETRY_S = 1.0
"""``Retry-After`` of a wait that timed out."""


def behind(svc: Services, at: Sequence[tuple[int, int]], names: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """The serving versions of ``names`` that have not applied every ``(partition,
    offset)`` of ``at``: projection id -> (partition, applied offset, offset waited for).
    A vectors write queued for embedding is not applied yet (``visible_positions``: its
    point is not there)."""
    out: dict[str, tuple[int, int, int]] = {}
    with svc.pool.connection() as conn:
        serving = versions.serving_all(conn)
        for name in names:
            info = serving[name]
            if name == "vectors":
                done = visible_positions(conn, info.id, info.version)
            else:
                done = base.load_positions(conn, info.id)
            for partition, offset in at:
                if done.get(partition, -1) < offset:
                    out[info.id] = (partition, done.get(partition, -1), offset)
                    break
    return out


def wait_applied(svc: Services, at: Sequence[tuple[int, int]], names: Sequence[str], timeout_s: float) -> float:
    """Block until the serving versions of ``names`` have applied every ``(partition,
    offset)`` of ``at``; returns the seconds waited. Polls the stored positions, every
    2 ms at first, backing off to 50 ms.

    Raises:
        InvalidRequestError: field ``wait_for``, a position past the end of the log.
        UnavailableError: still behind after ``timeout_s`` seconds.
    """
    started = time.monotonic()
    ends = svc.log.end_offsets()
    for partition, offset in at:
        if offset >= ends.get(partition, 0):
            raise InvalidRequestError(
                "wait_for",
                f"partition {partition} offset {offset} is past the end of the log ({ends.get(partition, 0)})",
            )
    pause_s = 0.002
    while True:
        late = behind(svc, at, names)
        if not late:
            return time.monotonic() - started
        waited = time.monotonic() - started
        if waited >= timeout_s:
            pid, (partition, done, offset) = next(iter(late.items()))
            raise UnavailableError(
                "wait_for",
                f"{pid} has applied partition {partition} up to offset {done}, not yet {offset}, after {waited:.1f} s",
                BEHIND_RETRY_S,
            )
        time.sleep(min(pause_s, max(0.0, timeout_s - waited)))
        pause_s = min(pause_s * 2, 0.05)


def lag(svc: Services) -> dict[str, Any]:
    """Records each projection version that is not retired has not applied, per partition,
    the partitions where it stopped at an erasure it cannot read (``projections.stalls``)
    and, for vectors, the writes applied in log order whose vectors are still being
    computed (``queued_for_embedding``): ``{"end_offsets": {partition: end},
    "projections": [{"projection", "state", "lag", "per_partition",
    "queued_for_embedding", "stalled": [{"projection", "partition", "offset", "reason",
    "since"}]}], "outbox": {"records", "subjects", "oldest_at", "oldest_age_s"}}``: the
    outbox holds what commands recorded and the log has not acknowledged yet
    (``ledger.outbox.backlog``)."""
    ends = svc.log.end_offsets()
    rows = []
    with svc.pool.connection() as conn:
        waiting = outbox.backlog(conn).to_dict(datetime.now(UTC))
        stopped = stalls.stalled(conn)
        for info in versions.versions(conn):
            if info.state == "retired":
                continue
            done = base.load_positions(conn, info.id)
            per = {p: max(0, end - (done.get(p, -1) + 1)) for p, end in ends.items()}
            mine = [s.to_dict() for s in stopped if s.projection == info.id]
            queued = embedding_queue.count(conn, info.version) if info.name == "vectors" else 0
            rows.append(
                {
                    "projection": info.id,
                    "state": info.state,
                    "lag": sum(per.values()),
                    "per_partition": per,
                    "queued_for_embedding": queued,
                    "stalled": mine,
                }
            )
    return {"end_offsets": ends, "projections": rows, "outbox": waiting}
