"""Recall: the memories of one subject that may be used for a purpose and task scope,
ranked by fusing Postgres full-text search over facts, vector similarity and full-text
search over summaries.

Rules applied (DESIGN.md, invariant 4), in the stores' own queries, not after fetching:
only the subject's memories, only the given purpose, only the subject scope plus the
task's own document/workspace scopes, only ``active`` memories (and ``needs_confirmation``
ones when asked for, marked so, with the open conflicts they are in), nothing expired at
``now``, nothing tombstoned. Summaries are valid while their row exists (the summaries
projection drops them when a source is invalidated); a summary recalled together with its
sources counts as one piece of evidence (:func:`projections.evidence.group_summaries`),
and never are two ``active`` items for one key returned.
Fusion is reciprocal rank fusion, ``rrf_k = 60`` (:func:`projections.evidence.rrf`).
Reading never changes a memory (invariant 5).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from redis.exceptions import RedisError

from contracts import utc_now
from ledger.principals import Principal
from projections.cache import RecallCache
from projections.conflicts import open_conflicts_of
from projections.embedding import Embedder
from projections.errors import RecallError
from projections.evidence import RecallItem, group_summaries, item_from_row, one_per_key, rrf
from projections.facts import FactsTables
from projections.vector_index import VectorFilter, VectorIndex, VectorIndexError

__all__ = ["CACHE_NOW_WINDOW_S", "Recall", "RecallItem", "RecallResult", "ServingStores", "rrf"]

log = logging.getLogger(__name__)

CACHE_NOW_WINDOW_S = 60.0
"""Recall at a ``now`` further than this from the clock (seconds) bypasses the cache."""

FACTS_V1 = FactsTables(1)
"""The facts tables recall reads by default."""

RANKERS = ("fts", "vector", "summary_fts")

MAX_QUERY_CHARS = 4096
"""The longest query recall accepts, in characters: a task description, not a document
(PostgreSQL's full-text query parser runs out of stack on some 20,000 words)."""
"""Ranker names, in the order of the rankings fused (``RecallItem.matched_by``)."""


@dataclass(frozen=True)
class ServingStores:
    """The stores of the serving versions that recall reads besides the Postgres views:
    the vector collection with the embedder that built it (queries must be embedded with
    the model of the collection read), and the cache of the serving cache version."""

    index: VectorIndex | None
    embedder: Embedder | None
    cache: RecallCache | None


@dataclass(frozen=True)
class RecallResult:
    """The ranked items; ``cached`` tells whether they came from the Redis cache."""

    items: list[RecallItem]
    cached: bool = False
    degraded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"cached": self.cached, "degraded": self.degraded, "items": [asdict(i) for i in self.items]}


_FILTER_SQL = """
  f.subject_id = %(subject)s AND f.purpose = %(purpose)s AND f.status = ANY(%(statuses)s)
  AND f.kind <> 'summary' AND f.content IS NOT NULL AND (f.scope_type || ':' || f.scope_id) = ANY(%(scopes)s)
  AND (f.expires_at IS NULL OR f.expires_at > %(now)s)
  AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.memory_id = f.memory_id)
"""

_SUMMARY_FILTER_SQL = """
  f.subject_id = %(subject)s AND f.purpose = %(purpose)s AND (f.scope_type || ':' || f.scope_id) = ANY(%(scopes)s)
  AND (f.expires_at IS NULL OR f.expires_at > %(now)s)
  AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.memory_id = f.memory_id)
  AND NOT EXISTS (
    WITH RECURSIVE lineage(memory_id) AS (
      SELECT unnest(f.derived_from)
      UNION
      SELECT unnest(inner_s.derived_from) FROM {summaries} inner_s JOIN lineage l ON inner_s.memory_id = l.memory_id
    )
    SELECT 1 FROM lineage l JOIN {facts} src ON src.memory_id = l.memory_id
     WHERE src.status <> 'active' OR src.expires_at <= %(now)s
    UNION ALL
    SELECT 1 FROM lineage l JOIN {summaries} inner_s ON inner_s.memory_id = l.memory_id
     WHERE inner_s.expires_at <= %(now)s)
"""
"""A summary is recalled only while every memory it was derived from, directly or through
other summaries, is active and not expired at ``now`` (swept or not): a summary of a
disputed, unconfirmed or expired claim is no evidence (``{facts}``: the facts table of the
sources; ``{summaries}``: the summaries table, for summaries of summaries)."""

_SUMMARY_COLUMNS = """
  f.memory_id, f.subject_id, 'summary' AS kind, f.content, 'active' AS status, f.confirmed, f.confidence, f.key,
  f.purpose, f.scope_type, f.scope_id, f.provenance, f.revision, f.expires_at, f.sensitivity, f.derived_from
"""
"""A summaries row under the facts column names that ``item_from_row`` reads."""


class Recall:
    """Hybrid recall over the facts table, a vector index, the summaries table and an
    optional cache.

    ``uncacheable``: sensitivity classes whose presence in a result (grouped items
    included) keeps the whole result out of Redis.

    ``route``: called once per recall, returns the stores of the versions serving now
    (:mod:`projections.versions`); without it ``index``, ``embedder`` and ``cache`` are
    used as given. ``facts`` and ``summaries_table`` name the tables or stable views read.
    ``topic_tombstones`` (the distributed mode): which of some ids the compacted tombstone
    topic names as erased; those are never recalled, whatever Postgres says.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        index: VectorIndex | None,
        embedder: Embedder | None,
        cache: RecallCache | None = None,
        facts: FactsTables = FACTS_V1,
        summaries_table: str = "summaries_v1",
        candidates: int = 50,
        rrf_k: int = 60,
        uncacheable: frozenset[str] = frozenset({"restricted"}),
        route: Callable[[], ServingStores] | None = None,
        topic_tombstones: Callable[[Sequence[str]], set[str]] | None = None,
    ) -> None:
        self._pool = pool
        self._fixed = ServingStores(index, embedder, cache)
        self._route = route
        self._facts = facts
        self._summary_filter = _SUMMARY_FILTER_SQL.format(facts=facts.facts, summaries=summaries_table)
        self._summaries = summaries_table
        self._candidates = candidates
        self._rrf_k = rrf_k
        self._uncacheable = uncacheable
        self._topic_tombstones = topic_tombstones

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
        include_summaries: bool = True,
    ) -> RecallResult:
        """The top ``k`` pieces of evidence for ``query`` (a summary with its recalled
        sources grouped under it counts as one).

        ``scope_keys`` are the task's scopes beyond the subject's own, as
        ``"document:ID"`` or ``"workspace:ID"``. ``include_summaries=False`` ranks facts
        and vectors only (no summaries, no grouping).

        Raises:
            NotAuthorisedError: no ``read`` grant for ``subject_id``.
            RecallError: ``now`` naive, ``k`` outside 1..1000, empty ``query`` or
                ``purpose``, a ``query`` longer than ``MAX_QUERY_CHARS``, or a malformed
                scope key.
        """
        principal.require("read", subject_id)
        if now.tzinfo is None or now.utcoffset() is None:
            raise RecallError("now", "must be timezone-aware (UTC); a naive datetime is refused")
        if not 1 <= k <= 1000:
            raise RecallError("k", "must be between 1 and 1000")
        if not query.strip():
            raise RecallError("query", "must not be empty")
        if len(query) > MAX_QUERY_CHARS:
            raise RecallError("query", f"is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
        if not purpose.strip():
            raise RecallError("purpose", "must not be empty")
        for sk in scope_keys:
            kind, _, ident = sk.partition(":")
            if kind not in ("document", "workspace") or not ident:
                raise RecallError("scope", f"{sk!r} must be document:ID or workspace:ID")
        scopes = sorted({f"subject:{subject_id}", *scope_keys})
        statuses = ["active", "needs_confirmation"] if include_unconfirmed else ["active"]
        request = {
            "purpose": purpose,
            "query": query,
            "k": k,
            "scopes": scopes,
            "statuses": statuses,
            "summaries": include_summaries,
        }
        params = {"subject": subject_id, "purpose": purpose, "statuses": statuses, "scopes": scopes, "now": now}
        degraded: list[str] = []
        stores = self._route() if self._route is not None else self._fixed
        # a result ranked with one vectors version must not answer for another (a swap or a
        # rollback changes the collection and the model that embeds the query)
        request["vectors"] = [
            getattr(stores.index, "collection", None),
            None if stores.embedder is None else stores.embedder.model_name,
        ]
        cache = stores.cache
        cache_key = generation = None
        # the cache answers only for "now" queries: a result computed at another time would
        # be wrong at this one
        if cache is not None and abs((now - utc_now()).total_seconds()) <= CACHE_NOW_WINDOW_S:
            try:
                cache_key = cache.entry_key(subject_id, request)
                hit = cache.get(cache_key)
                if hit is not None:
                    return RecallResult(self._revalidate(hit, params), cached=True)
                generation = cache.generation(subject_id)
            except RedisError as exc:
                log.warning("recall without cache: %s", exc)
                degraded.append("cache")
                cache_key = generation = None
        rankings = [self._fts(self._facts.facts, _FILTER_SQL, query, params)]
        rankings.append(self._vector_ranking(stores, query, params, degraded))
        if include_summaries:
            rankings.append(self._fts(self._summaries, self._summary_filter, query, params))
        fused = rrf(rankings, self._rrf_k)
        top = sorted(fused, key=lambda m: (-fused[m], m))
        items = self._items(top, {m: (fused[m], _matched(m, rankings)) for m in top}, params)
        items = group_summaries(one_per_key(items))[:k]
        if cache is not None and cache_key is not None and generation is not None and not degraded:
            try:
                self._store(cache, subject_id, cache_key, generation, items, now)
            except RedisError as exc:
                log.warning("recall result not cached: %s", exc)
        return RecallResult(items, degraded=degraded)

    def _vector_ranking(
        self, stores: ServingStores, query: str, params: dict[str, Any], degraded: list[str]
    ) -> list[str]:
        """Memory ids by vector similarity ([] without an index, or when it fails). The
        query is embedded with the embedder of the collection searched; a point made by
        another model (its payload ``model``) is never ranked."""
        index, embedder = stores.index, stores.embedder
        if index is None or embedder is None:
            return []
        flt = VectorFilter(
            subject_id=params["subject"],
            purpose=params["purpose"],
            statuses=tuple(params["statuses"]),
            scope_keys=tuple(params["scopes"]),
            not_expired_at=params["now"].timestamp(),
        )
        vector = embedder.embed([query])[0]
        try:
            hits = index.search(vector, flt, self._candidates)
        except VectorIndexError as exc:
            log.warning("recall without vectors: %s", exc)
            degraded.append("vectors")
            return []
        foreign = [h.memory_id for h in hits if h.payload.get("model", embedder.model_name) != embedder.model_name]
        if foreign:
            log.error(
                "recall: %d points of %s were made by another model than %s",
                len(foreign),
                index.collection,
                embedder.model_name,
            )
        return [h.memory_id for h in hits if h.memory_id not in foreign]

    def _items(
        self, ids: list[str], ranked: dict[str, tuple[float, list[str]]], params: dict[str, Any]
    ) -> list[RecallItem]:
        """Items for ``ids`` (in that order) that pass the rules at ``now``, each with its
        (score, matched_by) from ``ranked``; ids whose row fails are dropped (the vector
        index may be behind the facts table: facts are trusted)."""
        ids = self._not_erased_by_topic(ids)
        if not ids:
            return []
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            rows: dict[str, dict[str, Any]] = {}
            for table, columns, where in (
                (self._facts.facts, "f.*", _FILTER_SQL),
                (self._summaries, _SUMMARY_COLUMNS, self._summary_filter),
            ):
                cur.execute(
                    f"SELECT {columns} FROM {table} f WHERE f.memory_id = ANY(%(ids)s) AND {where}",
                    {**params, "ids": ids},
                )
                rows.update((r["memory_id"], r) for r in cur.fetchall())
            unconfirmed = [m for m, r in rows.items() if r["status"] == "needs_confirmation"]
            conflicts = open_conflicts_of(conn, self._facts, unconfirmed)
        return [item_from_row(rows[m], *ranked[m], conflicts.get(m, ())) for m in ids if m in rows]

    def _not_erased_by_topic(self, ids: list[str]) -> list[str]:
        """``ids`` without those the tombstone topic names (the SQL filters check the
        ``tombstones`` table; the topic also covers a Postgres restored from a backup older
        than an erasure). If the topic cannot be read now the table's check stands alone."""
        if self._topic_tombstones is None or not ids:
            return ids
        try:
            gone = self._topic_tombstones(ids)
        except Exception as exc:  # the table is still checked: recall goes on
            log.warning("recall: the tombstone topic cannot be read now (%s); the tombstones table is checked", exc)
            return ids
        return [m for m in ids if m not in gone]

    def _revalidate(self, hit: list[dict[str, Any]], params: dict[str, Any]) -> list[RecallItem]:
        """Cached items re-read from the stores under the same rules at ``now``:
        anything erased, revoked, superseded, expired or changed since is dropped or
        refreshed, even if the cache projection has not caught up yet. A cached group
        keeps those of its members that are still valid."""
        members = [m for i in hit for m in (i, *i["grouped"])]
        ranked = {m["memory_id"]: (m["score"], m["matched_by"]) for m in members}
        fresh = {i.memory_id: i for i in self._items(list(ranked), ranked, params)}
        out = []
        for cached in hit:
            top = fresh.get(cached["memory_id"])
            if top is not None:
                group = [fresh[g["memory_id"]] for g in cached["grouped"] if g["memory_id"] in fresh]
                out.append(replace(top, grouped=group))
        return out

    def _fts(self, table: str, where: str, query: str, params: dict[str, Any]) -> list[str]:
        """Ids of ``table`` rows matching ``query`` (any of its words), best first."""
        sql = f"""
            WITH q AS (SELECT replace(plainto_tsquery('english', %(query)s)::text, '&', '|') AS text)
            SELECT f.memory_id FROM {table} f, q
             WHERE q.text <> '' AND f.tsv @@ to_tsquery('english', q.text) AND {where}
             ORDER BY ts_rank(f.tsv, to_tsquery('english', q.text)) DESC, f.memory_id
             LIMIT %(limit)s
        """
        with self._pool.connection() as conn:
            rows = conn.execute(sql, {**params, "query": query, "limit": self._candidates}).fetchall()
        return [r[0] for r in rows]

    def _store(
        self, cache: RecallCache, subject_id: str, key: str, generation: str, items: list[RecallItem], now: datetime
    ) -> None:
        members = [m for i in items for m in i.members()]
        if any(m.sensitivity in self._uncacheable for m in members):
            return  # results holding an uncacheable sensitivity class are never cached
        ttl_s = cache.default_ttl_s
        for member in members:
            if member.expires_at is not None:
                ttl_s = min(ttl_s, datetime.fromisoformat(member.expires_at).timestamp() - now.timestamp())
        if math.isfinite(ttl_s):
            cache.put(subject_id, key, generation, [asdict(i) for i in items], ttl_s)


def _matched(memory_id: str, rankings: Sequence[Sequence[str]]) -> list[str]:
    return [name for name, ranking in zip(RANKERS, rankings, strict=False) if memory_id in ranking]
