"""Re-applying tombstones to a store restored from a backup.

A backup taken before an erasure holds the erased memories. Restoring it brings them
back into that store (the log does not: its copies stay unreadable, the keys are gone),
and ``trace`` then reports the store ``failed``. ``reapply_tombstones`` purges from a
store every item whose memory id is in the ``tombstones`` table (and, for summaries and
history, everything derived from or fingerprinted for one), and records what it did in
``tombstone_reapplications``: one row per run and store, with the erasure requests whose
memories it found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ledger.pgschema import ensure_schema
from projections.cache import RecallCache
from projections.vector_index import VectorIndex
from projections.wording import counted

STORES = ("facts", "vectors", "cache", "summaries")

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS tombstone_reapplications (
    run_id         text NOT NULL,
    store          text NOT NULL,
    applied_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    tombstones     integer NOT NULL,
    items_removed  integer NOT NULL,
    request_ids    text[] NOT NULL,
    PRIMARY KEY (run_id, store)
);
"""

_BATCH = 1000


@dataclass
class StorePurge:
    """What one store gave up: ``items_removed`` rows, points or cache entries (for
    ``facts``, fact rows plus history rows whose fingerprint was cleared), and the
    erasure requests whose memories were among them."""

    store: str
    tombstones: int
    items_removed: int
    request_ids: list[str] = field(default_factory=list)


@dataclass
class Reapplication:
    """One run of ``reapply_tombstones`` over one or more stores."""

    run_id: str
    stores: list[StorePurge]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        lines = [f"tombstones re-applied (run {self.run_id}):"]
        for s in self.stores:
            req = f"; requests {', '.join(s.request_ids)}" if s.request_ids else ""
            tombstoned = counted(s.tombstones, "tombstoned memory", "tombstoned memories")
            lines.append(f"  {s.store:<10} {s.items_removed:>6} removed of {tombstoned}{req}")
        return "\n".join(lines)


@dataclass
class PurgeTargets:
    """The stores to purge: table names of the current projection versions, the vector
    index and the cache (``None`` when this process cannot reach it)."""

    facts_table: str = "facts_v1"
    history_table: str = "facts_history_v1"
    summaries_table: str = "summaries_v1"
    index: VectorIndex | None = None
    cache: RecallCache | None = None


def install(conn: psycopg.Connection) -> None:
    """Create ``tombstone_reapplications`` if missing."""
    ensure_schema(conn, "tombstone_reapplications", SCHEMA_SQL)


def reapply_tombstones(
    pool: ConnectionPool, stores: Sequence[str], targets: PurgeTargets, run_id: str
) -> Reapplication:
    """Purge every tombstoned memory from each of ``stores`` (names from ``STORES``) and
    record the run.

    Raises:
        ValueError: a store name is unknown, or the vector index or cache is needed but
            not given (the message names the field ``store``).
        psycopg.Error, redis.RedisError, VectorIndexError: a store failed; stores
            purged before it stay purged and recorded, the run can simply be repeated.
    """
    unknown = [s for s in stores if s not in STORES]
    if unknown:
        raise ValueError(f"store: unknown {', '.join(unknown)}; choose from {', '.join(STORES)} or all")
    if "vectors" in stores and targets.index is None:
        raise ValueError("store: vectors needs the vector index, and this process cannot open it")
    if "cache" in stores and targets.cache is None:
        raise ValueError("store: cache needs Redis, and this process has no client")
    with pool.connection() as conn:
        install(conn)
        tombstones = {str(m): str(r) for m, r in conn.execute("SELECT memory_id, request_id FROM tombstones")}
    out = Reapplication(run_id=run_id, stores=[])
    for store in stores:
        purge = purge_store(pool, store, targets, tombstones)
        with pool.connection() as conn:
            conn.execute(
                "INSERT INTO tombstone_reapplications (run_id, store, tombstones, items_removed, request_ids)"
                " VALUES (%s, %s, %s, %s, %s)",
                (run_id, purge.store, purge.tombstones, purge.items_removed, purge.request_ids),
            )
        out.stores.append(purge)
    return out


def purge_store(pool: ConnectionPool, store: str, targets: PurgeTargets, tombstones: Mapping[str, str]) -> StorePurge:
    """Remove from ``store`` (a name of ``STORES``) every copy of the memories in
    ``tombstones`` (memory id -> erasure request id): fact rows and history fingerprints,
    summaries of or derived from them, vector points, cached recall results. Idempotent.

    Raises:
        ValueError: the store is unknown, or its target (index, cache) is not given.
        psycopg.Error, redis.RedisError, VectorIndexError: the store failed.
    """
    if store == "facts":
        return _facts(pool, targets, tombstones)
    if store == "summaries":
        return _summaries(pool, targets, tombstones)
    if store == "vectors" and targets.index is not None:
        return _vectors(targets.index, tombstones)
    if store == "cache" and targets.cache is not None:
        return _cache(targets.cache, tombstones)
    raise ValueError(f"store: cannot purge {store!r} here (unknown, or its index or cache is not given)")


def _requests(tombstones: Mapping[str, str], found: Sequence[str]) -> list[str]:
    return sorted({tombstones[m] for m in found if m in tombstones})


def _facts(pool: ConnectionPool, t: PurgeTargets, tombstones: Mapping[str, str]) -> StorePurge:
    ids = list(tombstones)
    with pool.connection() as conn, conn.transaction():
        gone = [
            str(r[0])
            for r in conn.execute(f"DELETE FROM {t.facts_table} WHERE memory_id = ANY(%s) RETURNING memory_id", (ids,))
        ]
        cleared = [
            str(r[0])
            for r in conn.execute(
                f"UPDATE {t.history_table} SET content_hmac = NULL"
                " WHERE memory_id = ANY(%s) AND content_hmac IS NOT NULL RETURNING memory_id",
                (ids,),
            )
        ]
    return StorePurge("facts", len(tombstones), len(gone) + len(cleared), _requests(tombstones, gone + cleared))


def _summaries(pool: ConnectionPool, t: PurgeTargets, tombstones: Mapping[str, str]) -> StorePurge:
    ids = list(tombstones)
    with pool.connection() as conn, conn.transaction():
        rows = conn.execute(
            f"DELETE FROM {t.summaries_table} WHERE memory_id = ANY(%s) OR derived_from && %s::text[]"
            " RETURNING memory_id, derived_from",
            (ids, ids),
        ).fetchall()
    hit = [str(m) for m, derived in rows for m in [m, *(derived or [])] if m in tombstones]
    return StorePurge("summaries", len(tombstones), len(rows), _requests(tombstones, hit))


def _vectors(index: VectorIndex, tombstones: Mapping[str, str]) -> StorePurge:
    ids = list(tombstones)
    found: list[str] = []
    for start in range(0, len(ids), _BATCH):
        present = list(index.retrieve(ids[start : start + _BATCH]))
        if present:
            index.delete(present)
            found += present
    return StorePurge("vectors", len(tombstones), len(found), _requests(tombstones, found))


def _cache(cache: RecallCache, tombstones: Mapping[str, str]) -> StorePurge:
    removed, found = cache.purge_memories(set(tombstones))
    return StorePurge("cache", len(tombstones), removed, _requests(tombstones, found))
