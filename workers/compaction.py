"""What ``memledger compact`` rewrites in this deployment: the ledger's tables that lose
personal fields and keys, every projection version's Postgres tables (a vectors
version's embedding queue too: its rows held a memory's sealed text and scope id until
embedded or erased), every vectors version's collection this process can open, and the
Redis cache
(``projections.compaction`` does the rewriting)."""

from __future__ import annotations

from ledger.state import SHREDDED_TABLES
from projections import embedding_queue, versions
from projections.compaction import CompactTargets
from projections.facts import FactsTables
from projections.summaries import SummariesProjection
from projections.vector_index import VectorIndex
from workers.bootstrap import Services


def compact_targets(svc: Services, lock_timeout_s: float, vectors_unreachable: str | None = None) -> CompactTargets:
    """The targets of every projection version that is not retired. A vectors version
    whose index this process does not own (the vectors worker does) is a skipped step
    saying so (``vectors_unreachable``: why the index could not be opened here).
    ``lock_timeout_s`` bounds each table's lock wait and the wait for older snapshots."""
    tables: list[str] = list(SHREDDED_TABLES)
    indexes: list[VectorIndex | tuple[str, str]] = []
    with svc.pool.connection() as conn:
        infos = [i for name in versions.NAMES for i in versions.versions(conn, name) if i.state != "retired"]
    for info in infos:
        if info.name == "facts":
            t = FactsTables(info.version)
            tables += [t.facts, t.history, t.conflicts]
        elif info.name == "summaries":
            tables.append(SummariesProjection.table_name(info.version))
        elif info.name == "vectors":
            tables.append(embedding_queue.table_name(info.version))
            name = versions.collection_name(info.version)
            if svc.settings.qdrant_url or (vectors_unreachable is None and svc.stores.owns(info.version)):
                index = svc.stores.index(info.version)
                if not svc.settings.qdrant_url and info.embedder is not None:
                    # a local index opened here for the first time knows its dimension only so
                    # (a version this process never applied: the previous one, after a replay)
                    index.ensure_collection(svc.stores.embedder(info.embedder.name).dim)
                indexes.append(index)
            else:
                why = vectors_unreachable or "owned by the vectors worker"
                indexes.append((name, f"{why}: stop it and run compact again"))
    return CompactTargets(
        tables=tables,
        indexes=indexes,
        redis=svc.stores.cache(svc.stores.serving()["cache"].version).client,
        own_server=svc.settings.mode == "embedded" and svc.settings.postgres_dsn is None,
        embedded_redis=svc.settings.redis_url is None,
        lock_timeout_s=lock_timeout_s,
        snapshot_wait_s=lock_timeout_s,
    )
