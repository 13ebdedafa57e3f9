"""The erasure lane: purge newly erased memories from one store ahead of log order.

A projection applies ``ErasureRequested`` in log order, so an erasure waits behind every
event before it that the projection has not applied yet: under a steady write load, the
vectors projection's embedding backlog (tens of seconds). The ledger commits a memory's
tombstone (``tombstones`` table) no later than it appends the erasure's event; a lane
polls that table and purges the new memories' copies from its store at once
(``projections.tombstones.purge_store``).

The lane writes no receipt: the projection still applies the event in log order and
writes the receipt then, with the event's log offset, so ``trace`` shows the store
``pending`` with the probe ``absent`` in between. Purging early cannot be undone by the
events still ahead of the erasure in the log: every write-type event of a tombstoned
memory is dropped before it is applied (``projections.base.WRITE_EVENTS``). The lane is
an accelerator only; a poll that fails is logged and retried on the next one, and the
in-order erasure remains the guarantee.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from psycopg_pool import ConnectionPool

from contracts import utc_now
from projections.base import Projection
from projections.cache import CacheProjection
from projections.facts import FactsProjection
from projections.summaries import SummariesProjection
from projections.tombstones import PurgeTargets, StorePurge, purge_store
from projections.vectors import VectorsProjection

log = logging.getLogger(__name__)


class ErasureLane:
    """Purges memories tombstoned since the last poll from one ``store`` (a name of
    ``projections.tombstones.STORES``) through ``targets``.

    Tombstones are found by ``erased_at`` (the ledger's clock, UTC). A tombstone commits a
    moment after its ``erased_at``, so each poll looks back ``overlap_s`` seconds before
    the newest one it saw and skips the ids it already purged. The first poll looks back
    ``overlap_s`` from the process start: older erasures are the in-order path's.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        store: str,
        targets: PurgeTargets,
        overlap_s: float = 60.0,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._pool = pool
        self.store = store
        self._targets = targets
        self._overlap = timedelta(seconds=overlap_s)
        self._since = clock() - self._overlap
        self._seen: dict[str, datetime] = {}

    def poll(self) -> StorePurge | None:
        """Purge the memories tombstoned since the last poll; ``None`` when there were none.

        Raises:
            psycopg.Error, redis.RedisError, VectorIndexError: the registry or the store
                failed (the same tombstones are tried again on the next poll).
        """
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT memory_id, request_id, erased_at FROM tombstones WHERE erased_at > %s", (self._since,)
            ).fetchall()
        new = {str(m): str(r) for m, r, _ in rows if str(m) not in self._seen}
        purged = purge_store(self._pool, self.store, self._targets, new) if new else None
        for m, _, at in rows:
            self._seen[str(m)] = at
        if rows:
            self._since = max(self._since, max(at for _, _, at in rows) - self._overlap)
            self._seen = {m: at for m, at in self._seen.items() if at > self._since}
        return purged

    def poll_logged(self) -> None:
        """``poll``, logging what it purged or why it failed (never raises an ``Exception``)."""
        try:
            purged = self.poll()
        except Exception as exc:  # an accelerator: the in-order erasure still comes
            said = " ".join(str(exc).split())  # libpq's messages have several lines
            log.warning("erasure lane (%s): poll failed, retrying on the next one: %s", self.store, said)
            return
        if purged is not None:
            log.info(
                "erasure lane (%s): %d tombstoned, %d removed ahead of the log (requests %s)",
                self.store,
                purged.tombstones,
                purged.items_removed,
                ", ".join(purged.request_ids) or "-",
            )


def lane_for(pool: ConnectionPool, projection: Projection, clock: Callable[[], datetime] = utc_now) -> ErasureLane:
    """The lane of one projection version: its own tables, collection or cache prefix
    (``clock``: UTC now, as for ``ErasureLane``).

    Raises:
        ValueError: ``projection`` is not one of the four stores (names the field).
    """
    if isinstance(projection, FactsProjection):
        targets = PurgeTargets(facts_table=projection.tables.facts, history_table=projection.tables.history)
    elif isinstance(projection, SummariesProjection):
        targets = PurgeTargets(summaries_table=projection.table)
    elif isinstance(projection, VectorsProjection):
        targets = PurgeTargets(index=projection.index)
    elif isinstance(projection, CacheProjection):
        targets = PurgeTargets(cache=projection.cache)
    else:
        raise ValueError(f"projection: {projection.id!r} has no erasure lane")
    return ErasureLane(pool, projection.name, targets, clock=clock)
