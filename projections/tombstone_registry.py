"""The tombstone set a projection holds in memory, loaded from the compacted tombstone
topic (``ledger.tombstone_log``), in the distributed mode.

Projections treat a memory as erased when the Postgres ``tombstones`` table OR this set
names it (``projections.base.ContentAccess``), and check that before applying any
write-type event (``projections.base.WRITE_EVENTS``), live and in a replay. The table is
the ledger's registry, written in the erasure's transaction; the topic is the copy that
survives a Postgres restored from a backup taken before the erasure (which lacks the
tombstone rows and holds the erased memories' data keys again). The union can only
refuse more, never less.

Freshness: the set is read from the beginning of the topic on first use, then brought up
to date (new records only) at most every ``refresh_interval_s`` seconds when consulted.
The ledger publishes a tombstone before it appends the erasure's event, so a refresh
made after reading an event sees every tombstone published before it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from ledger.tombstone_log import Tombstone, TombstoneLog

log = logging.getLogger(__name__)


class TombstoneSet:
    """Memory ids erased according to a ``TombstoneLog`` (retractions applied).

    ``refresh_interval_s``: at most this often (seconds) a lookup reads new records
    first; 0 reads them on every lookup.
    """

    def __init__(self, source: TombstoneLog, refresh_interval_s: float = 1.0) -> None:
        self._source = source
        self._interval_s = refresh_interval_s
        self._erased: dict[str, Tombstone] = {}
        self._offsets: dict[int, int] = {}
        self._loaded_at: float | None = None
        self._lock = threading.Lock()

    @property
    def topic(self) -> str:
        return self._source.topic

    def refresh(self) -> int:
        """Read the records published since the last refresh; returns how many.

        Raises:
            EventLogError: the topic cannot be read (a projection then retries its batch
                and never applies a write unchecked).
        """
        with self._lock:
            records, self._offsets = self._source.read_from(self._offsets)
            for memory_id, tombstone in records:
                if tombstone is None:
                    self._erased.pop(memory_id, None)
                else:
                    self._erased[memory_id] = tombstone
            self._loaded_at = time.monotonic()
            return len(records)

    def _fresh(self) -> None:
        if self._loaded_at is None or time.monotonic() - self._loaded_at >= self._interval_s:
            self.refresh()

    def erased_among(self, memory_ids: Iterable[str]) -> set[str]:
        """Which of ``memory_ids`` the topic names as erased (refreshing first when due).
        Raises as ``refresh``."""
        self._fresh()
        with self._lock:
            return {m for m in memory_ids if m in self._erased}

    def get(self, memory_id: str) -> Tombstone | None:
        """The tombstone of ``memory_id``, if any (refreshing first when due)."""
        self._fresh()
        with self._lock:
            return self._erased.get(memory_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._erased)

    def all(self) -> dict[str, Tombstone]:
        """Every tombstone currently known (refreshed first)."""
        self.refresh()
        with self._lock:
            return dict(self._erased)
