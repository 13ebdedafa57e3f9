"""Recall: the memories of one subject that may be used for a purpose and task scope,
ranked by fusing Postgres full-text search and vector similarity.

Rules applied (DESIGN.md, invariant 4), in the stores' own queries, not after fetching:
only the subject's memories, only the given purpose, only the subject scope plus the
task's own document/workspace scopes, only ``active`` memories (and ``needs_confirmation``
ones when asked for, marked so), nothing expired at ``now``, nothing tombstoned.
Fusion is reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009):
``score = sum over rankers of 1 / (rrf_k + rank)``, rank starting at 1, ``rrf_k = 60``.
Reading never changes a memory (invariant 5).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from redis.exceptions import RedisError

from contracts import utc_now
from ledger.principals import Principal
from projections.cache import RecallCache
from projections.embedding import Embedder
from projections.errors import RecallError
from projections.vector_index import VectorFilter, VectorIndex, VectorIndexError

log = logging.getLogger(__name__)

CACHE_NOW_WINDOW_S = 60.0
"""Recall at a ``now`` further than this from the clock (seconds) bypasses the cache."""


@dataclass(frozen=True)
class RecallItem:
    """One recalled memory with its provenance. ``score`` is the fused RRF score;
    ``matched_by`` lists the rankers that found it (``fts``, ``vector``)."""

    memory_id: str
    subject_id: str
    kind: str
    content: str
    score: float
    status: str
    confirmed: bool
    confidence: float
    key: str | None
    purpose: str
    scope: dict[str, str]
    provenance: dict[str, Any]
    revision: int
    expires_at: str | None
    sensitivity: str
    needs_confirmation: bool
    matched_by: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RecallResult:
    """The ranked items; ``cached`` tells whether they came from the Redis cache."""

    items: list[RecallItem]
    cached: bool = False
    degraded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"cached": self.cached, "degraded": self.degraded, "items": [asdict(i) for i in self.items]}


def rrf(rankings: Sequence[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion of ranked id lists (rank 1 = first): id -> fused score."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, memory_id in enumerate(ranking, start=1):
            scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (k + rank)
    return scores


_FILTER_SQL = """
  f.subject_id = %(subject)s AND f.purpose = %(purpose)s AND f.status = ANY(%(statuses)s)
  AND f.kind <> 'summary' AND f.content IS NOT NULL AND (f.scope_type || ':' || f.scope_id) = ANY(%(scopes)s)
  AND (f.expires_at IS NULL OR f.expires_at > %(now)s)
  AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.memory_id = f.memory_id)
"""


class Recall:
    """Hybrid recall over the facts table, a vector index and an optional cache."""

    def __init__(
        self,
        pool: ConnectionPool,
        index: VectorIndex | None,
        embedder: Embedder | None,
        cache: RecallCache | None = None,
        facts_table: str = "facts_v1",
        candidates: int = 50,
        rrf_k: int = 60,
    ) -> None:
        self._pool = pool
        self._index = index
        self._embedder = embedder
        self._cache = cache
        self._table = facts_table
        self._candidates = candidates
        self._rrf_k = rrf_k

    def recall(
        self,
        principal: Principal,
        subject_id: str,
        purpose: str,
        query: str,
        now: datetime,
        k: int = 10,
        scope_keys: Sequence[str] = (),
        include_unconfirmed: bool = False,
    ) -> RecallResult:
        """The top ``k`` memories for ``query``.

        ``scope_keys`` are the task's scopes beyond the subject's own, as
        ``"document:ID"`` or ``"workspace:ID"``.

        Raises:
            NotAuthorisedError: no ``read`` grant for ``subject_id``.
            RecallError: ``now`` naive, ``k`` outside 1..1000, empty ``query`` or
                ``purpose``, or a malformed scope key.
        """
        principal.require("read", subject_id)
        if now.tzinfo is None or now.utcoffset() is None:
            raise RecallError("now", "must be timezone-aware (UTC); a naive datetime is refused")
        if not 1 <= k <= 1000:
            raise RecallError("k", "must be between 1 and 1000")
        if not query.strip():
            raise RecallError("query", "must not be empty")
        if not purpose.strip():
            raise RecallError("purpose", "must not be empty")
        for sk in scope_keys:
            kind, _, ident = sk.partition(":")
            if kind not in ("document", "workspace") or not ident:
                raise RecallError("scope", f"{sk!r} must be document:ID or workspace:ID")
        scopes = sorted({f"subject:{subject_id}", *scope_keys})
        statuses = ["active", "needs_confirmation"] if include_unconfirmed else ["active"]
        request = {"purpose": purpose, "query": query, "k": k, "scopes": scopes, "statuses": statuses}
        params = {"subject": subject_id, "purpose": purpose, "statuses": statuses, "scopes": scopes, "now": now}
        degraded: list[str] = []
        cache_key = generation = None
        # the cache answers only for "now" queries: a result computed at another time would
        # be wrong at this one
        if self._cache is not None and abs((now - utc_now()).total_seconds()) <= CACHE_NOW_WINDOW_S:
            try:
                cache_key = self._cache.entry_key(subject_id, request)
                hit = self._cache.get(cache_key)
                if hit is not None:
                    return RecallResult(self._revalidate(hit, params), cached=True)
                generation = self._cache.generation(subject_id)
            except RedisError as exc:
                log.warning("recall without cache: %s", exc)
                degraded.append("cache")
                cache_key = generation = None
        rankings = [self._fts(query, params)]
        if self._index is not None and self._embedder is not None:
            flt = VectorFilter(
                subject_id=subject_id,
                purpose=purpose,
                statuses=tuple(statuses),
                scope_keys=tuple(scopes),
                not_expired_at=now.timestamp(),
            )
            vector = self._embedder.embed([query])[0]
            try:
                rankings.append([h.memory_id for h in self._index.search(vector, flt, self._candidates)])
            except VectorIndexError as exc:
                log.warning("recall without vectors: %s", exc)
                degraded.append("vectors")
                rankings.append([])
        fused = rrf(rankings, self._rrf_k)
        top = sorted(fused, key=lambda m: (-fused[m], m))
        rows = self._rows(top, params)
        items: list[RecallItem] = []
        for memory_id in top:
            row = rows.get(memory_id)
            if row is None:
                continue  # the vector index is behind the facts table: trust facts
            matched = [name for name, r in zip(("fts", "vector"), rankings, strict=False) if memory_id in r]
            items.append(_item(row, fused[memory_id], matched))
            if len(items) == k:
                break
        if self._cache is not None and cache_key is not None and generation is not None and not degraded:
            try:
                self._store(subject_id, cache_key, generation, items, now)
            except RedisError as exc:
                log.warning("recall result not cached: %s", exc)
        return RecallResult(items, degraded=degraded)

    def _revalidate(self, hit: list[dict[str, Any]], params: dict[str, Any]) -> list[RecallItem]:
        """Cached items re-read from the facts table under the same rules at ``now``:
        anything erased, revoked, superseded, expired or changed since is dropped or
        refreshed, even if the cache projection has not caught up yet."""
        rows = self._rows([i["memory_id"] for i in hit], params)
        return [_item(rows[i["memory_id"]], i["score"], i["matched_by"]) for i in hit if i["memory_id"] in rows]

    def _fts(self, query: str, params: dict[str, Any]) -> list[str]:
        sql = f"""
            WITH q AS (SELECT replace(plainto_tsquery('english', %(query)s)::text, '&', '|') AS text)
            SELECT f.memory_id FROM {self._table} f, q
             WHERE q.text <> '' AND f.tsv @@ to_tsquery('english', q.text) AND {_FILTER_SQL}
             ORDER BY ts_rank(f.tsv, to_tsquery('english', q.text)) DESC, f.memory_id
             LIMIT %(limit)s
        """
        with self._pool.connection() as conn:
            rows = conn.execute(sql, {**params, "query": query, "limit": self._candidates}).fetchall()
        return [r[0] for r in rows]

    def _rows(self, memory_ids: list[str], params: dict[str, Any]) -> dict[str, dict[str, Any]]:
        if not memory_ids:
            return {}
        sql = f"SELECT f.* FROM {self._table} f WHERE f.memory_id = ANY(%(ids)s) AND {_FILTER_SQL}"
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, {**params, "ids": memory_ids})
            return {r["memory_id"]: r for r in cur.fetchall()}

    def _store(self, subject_id: str, key: str, generation: str, items: list[RecallItem], now: datetime) -> None:
        assert self._cache is not None
        if any(i.sensitivity == "restricted" for i in items):
            return  # restricted memories are never cached
        ttl_s = self._cache.default_ttl_s
        for item in items:
            if item.expires_at is not None:
                ttl_s = min(ttl_s, datetime.fromisoformat(item.expires_at).timestamp() - now.timestamp())
        if math.isfinite(ttl_s):
            self._cache.put(subject_id, key, generation, [asdict(i) for i in items], ttl_s)


def _item(row: dict[str, Any], score: float, matched: list[str]) -> RecallItem:
    return RecallItem(
        memory_id=row["memory_id"],
        subject_id=row["subject_id"],
        kind=row["kind"],
        content=row["content"],
        score=round(score, 6),
        status=row["status"],
        confirmed=row["confirmed"],
        confidence=row["confidence"],
        key=row["key"],
        purpose=row["purpose"],
        scope={"type": row["scope_type"], "id": row["scope_id"]},
        provenance=row["provenance"],
        revision=row["revision"],
        expires_at=row["expires_at"].isoformat() if row["expires_at"] else None,
        sensitivity=row["sensitivity"],
        needs_confirmation=row["status"] == "needs_confirmation",
        matched_by=matched,
    )
