"""Recall: the memories of one subject that may be used for a purpose and task scope,
ranked for a query by several voices fused (README, "How recall ranks").

Rules applied (DESIGN.md, invariant 4), in the stores' own queries, not after fetching
(:mod:`projections.recall_queries`): only the subject's memories, only the given purpose,
only the subject scope plus the task's own document/workspace scopes, only ``active``
memories (and ``needs_confirmation`` ones when asked for, marked so, with the open
conflicts they are in), nothing expired at the time judged, nothing tombstoned. A summary
is recalled only while all its sources are active; a summary recalled together with its
sources counts as one piece of evidence (:func:`projections.evidence.group_summaries`),
and never are two ``active`` items for one key returned. With ``as_of`` the same rules
are judged at that past time, and nothing erased, revoked or redacted since comes back.
Reading never changes a memory (invariant 5).

The ranking itself is pure (:mod:`projections.ranking`); this module does the I/O around
it: the full-text queries (one round trip, in a worker thread while the query is embedded
and the vector index searched), the rows of what the voices named and the neighbours of
the anchors (one round trip), the vectors for MMR, and the text of the items returned (one
round trip, in the worker thread while the MMR pool's vectors are read).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool
from redis.exceptions import RedisError

from contracts import iso_utc, utc_now
from contracts.types import text_problem
from ledger.principals import Principal
from projections.cache import RecallCache
from projections.conflicts import open_conflicts_of
from projections.embedding import Embedder, token_counts
from projections.errors import RecallError
from projections.evidence import RecallItem, item_from_row, one_per_key, rrf
from projections.facts import FactsTables
from projections.ranking.budget import within_budget
from projections.ranking.candidates import Candidate, Signals
from projections.ranking.config import RankingConfig
from projections.ranking.pipeline import build_rankers, finish, first_stage, shaped
from projections.recall_queries import RANKED_STATUSES, LexicalHits, RecallQueries
from projections.vector_index import VectorFilter, VectorHit, VectorIndex, VectorIndexError

__all__ = [
    "CACHE_NOW_WINDOW_S",
    "MAX_QUERY_CHARS",
    "Recall",
    "RecallItem",
    "RecallResult",
    "ServingStores",
    "rrf",
]

log = logging.getLogger(__name__)

CACHE_NOW_WINDOW_S = 60.0
"""Recall at a ``now`` further than this from the clock (seconds) bypasses the cache."""

FACTS_V1 = FactsTables(1)
"""The facts tables recall reads by default."""

MAX_QUERY_CHARS = 4096
"""The longest query recall accepts, in characters: a task description, not a document
(PostgreSQL's full-text query parser runs out of stack on some 20,000 words)."""

_EXTRA_ROWS = 5
"""Groups fetched beyond ``k`` in case a row changed between ranking and fetching."""

_T = TypeVar("_T")

_HIT_KEYS = ("model",)
"""What recall reads of a vector hit's payload (:func:`_same_model`)."""

_DERIVED_KEYS = ("model", "kind", "status", "scope_type", "scope_id", "derived_from", "confidence")
"""What recall reads of a derived hit's payload (:func:`_same_model`, :func:`_provisional`)."""


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
    """The ranked items; ``cached`` tells whether they came from the Redis cache;
    ``degraded`` names the stores recall had to do without; ``tokens`` is the length of
    every returned text (items and the sources grouped under them) in the embedder's
    tokens; ``as_of`` the past time judged (ISO 8601), if any."""

    items: list[RecallItem]
    cached: bool = False
    degraded: list[str] = field(default_factory=list)
    tokens: int = 0
    as_of: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "cached": self.cached,
            "degraded": self.degraded,
            "tokens": self.tokens,
            "items": [asdict(i) for i in self.items],
        }


def _validate(
    now: datetime,
    k: int,
    query: str,
    purpose: str,
    scope_keys: Sequence[str],
    as_of: datetime | None,
    max_tokens: int | None,
) -> None:
    """Raises RecallError naming the first argument that breaks its rule."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise RecallError("now", "must be timezone-aware (UTC); a naive datetime is refused")
    if as_of is not None:
        if as_of.tzinfo is None or as_of.utcoffset() is None:
            raise RecallError("as_of", "must be timezone-aware (UTC); a naive datetime is refused")
        if as_of > now:
            raise RecallError("as_of", f"must not be later than now ({now.isoformat()})")
    if not 1 <= k <= 1000:
        raise RecallError("k", "must be between 1 and 1000")
    if max_tokens is not None and max_tokens < 1:
        raise RecallError("max_tokens", "must be at least 1")
    if not query.strip():
        raise RecallError("query", "must not be empty")
    if len(query) > MAX_QUERY_CHARS:
        raise RecallError("query", f"is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    problem = text_problem(query)
    if problem is not None:
        raise RecallError("query", problem)
    if not purpose.strip():
        raise RecallError("purpose", "must not be empty")
    for sk in scope_keys:
        kind, _, ident = sk.partition(":")
        if kind not in ("document", "workspace") or not ident:
            raise RecallError("scope", f"{sk!r} must be document:ID or workspace:ID")


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
    ``ranking``: how to rank (default :class:`RankingConfig`'s defaults).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        index: VectorIndex | None,
        embedder: Embedder | None,
        cache: RecallCache | None = None,
        facts: FactsTables = FACTS_V1,
        summaries_table: str = "summaries_v1",
        uncacheable: frozenset[str] = frozenset({"restricted"}),
        route: Callable[[], ServingStores] | None = None,
        topic_tombstones: Callable[[Sequence[str]], set[str]] | None = None,
        ranking: RankingConfig | None = None,
    ) -> None:
        self._pool = pool
        self._fixed = ServingStores(index, embedder, cache)
        self._route = route
        self._facts = facts
        self._queries = RecallQueries(facts, summaries_table)
        self._uncacheable = uncacheable
        self._topic_tombstones = topic_tombstones
        self.ranking = ranking or RankingConfig()
        self._worker: ThreadPoolExecutor | None = None

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
        *,
        as_of: datetime | None = None,
        max_tokens: int | None = None,
        ranking: RankingConfig | None = None,
        use_cache: bool = True,
    ) -> RecallResult:
        """The top ``k`` pieces of evidence for ``query`` (a summary with its recalled
        sources grouped under it counts as one), best first.

        ``scope_keys`` are the task's scopes beyond the subject's own, as
        ``"document:ID"`` or ``"workspace:ID"``. ``include_summaries=False`` returns no
        summaries (the sessions ranker still reads them). ``as_of`` (aware, at most
        ``now``): what was current then, in ledger time (see
        :mod:`projections.recall_queries`); never anything erased, revoked or redacted
        since. ``max_tokens``: the best items whose texts (grouped sources included)
        fit in that many of the embedder's tokens. ``ranking``: rank this call
        differently (an evaluation); ``use_cache=False`` neither reads nor fills the cache.
        Every item reports its ``tokens``; the result their sum.

        Raises:
            NotAuthorisedError: no ``read`` grant for ``subject_id``.
            RecallError: ``now`` or ``as_of`` naive, ``as_of`` after ``now``, ``k``
                outside 1..1000, ``max_tokens`` below 1, empty ``query`` or ``purpose``,
                a ``query`` longer than ``MAX_QUERY_CHARS``, or a malformed scope key.
        """
        principal.require("read", subject_id)
        _validate(now, k, query, purpose, scope_keys, as_of, max_tokens)
        config = ranking or self.ranking
        scopes = sorted({f"subject:{subject_id}", *scope_keys})
        statuses = ["active", "needs_confirmation"] if include_unconfirmed else ["active"]
        at = as_of or now
        params: dict[str, Any] = {
            "subject": subject_id,
            "purpose": purpose,
            "statuses": statuses,
            "scopes": scopes,
            "at": at,
            "as_of": as_of,
        }
        degraded: list[str] = []
        stores = self._route() if self._route is not None else self._fixed
        request = {
            "purpose": purpose,
            "query": query,
            "k": k,
            "scopes": scopes,
            "statuses": statuses,
            "summaries": include_summaries,
            "max_tokens": max_tokens,
            "ranking": config.fingerprint(),
            # a result ranked with one vectors version must not answer for another (a swap or a
            # rollback changes the collection and the model that embeds the query)
            "vectors": [
                getattr(stores.index, "collection", None),
                None if stores.embedder is None else stores.embedder.model_name,
            ],
        }
        queries = self._queries.for_time(as_of is not None)
        cache = stores.cache if use_cache and as_of is None else None
        cache_key = generation = None
        # the cache answers only for "now" queries: a result computed at another time would
        # be wrong at this one
        if cache is not None and abs((now - utc_now()).total_seconds()) <= CACHE_NOW_WINDOW_S:
            try:
                cache_key = cache.entry_key(subject_id, request)
                hit = cache.get(cache_key)
                if hit is not None:
                    items = self._revalidate(hit, params, queries, stores.embedder)
                    return RecallResult(items, cached=True, tokens=_tokens(items))
                generation = cache.generation(subject_id)
            except RedisError as exc:
                log.warning("recall without cache: %s", exc)
                degraded.append("cache")
                cache_key = generation = None
        ordered, prefetched = self._rank(
            stores, queries, query, params, config, include_summaries, k, max_tokens, degraded
        )
        items = self._items(ordered, k, max_tokens, params, queries, stores.embedder, prefetched)
        if cache is not None and cache_key is not None and generation is not None and not degraded:
            try:
                self._store(cache, subject_id, cache_key, generation, items, now)
            except RedisError as exc:
                log.warning("recall result not cached: %s", exc)
        return RecallResult(
            items, degraded=degraded, tokens=_tokens(items), as_of=None if as_of is None else iso_utc(as_of)
        )

    # -- ranking ---------------------------------------------------------------------------

    def _rank(
        self,
        stores: ServingStores,
        queries: RecallQueries,
        query: str,
        params: dict[str, Any],
        config: RankingConfig,
        include_summaries: bool,
        k: int,
        max_tokens: int | None,
        degraded: list[str],
    ) -> tuple[list[Candidate], Future[_Rows] | None]:
        """The candidates recall may return, ranked (:mod:`projections.ranking.pipeline`):
        full text runs in a worker thread while the query is embedded and searched here.
        Without a token budget and without summaries (whose groups may absorb many
        sources) only the best ``3 k + 5`` (at least the MMR pool) are kept: one answer per
        key drops at most two of three scopes' answers for a key.

        Also returns the rows of the items most likely returned, being read in the worker
        thread while the MMR pool's vectors are read here (None when nothing is read):
        MMR only reorders its pool, so the first ``k + 5`` after it are among the first
        ``max(mmr_pool, k + 5)`` answers (all of them with a token budget)."""
        rankers = build_rankers(config, include_summaries)
        names = config.enabled()
        summaries_wanted = max(config.depth if include_summaries else 0, config.sessions_depth)
        lexical_future = None
        if {"fts", "lineage", "sessions", "neighbours"} & set(names):
            lexical_future = self._submit(self._lexical, queries, {**params, "query": query}, config, summaries_wanted)
        vector_hits: list[VectorHit] = []
        derived_hits: list[VectorHit] = []
        if "vector" in names or "lineage" in names:
            vector_hits, derived_hits = self._vector_search(stores, query, params, config, queries.as_of, degraded)
        lexical = lexical_future.result() if lexical_future is not None else LexicalHits([], [], [])
        checked = {c.memory_id: c for c in (*lexical.hits, *lexical.seeds, *lexical.summaries)}
        signals = Signals(
            fts=[c.memory_id for c in lexical.hits],
            fts_derived=[c.memory_id for c in lexical.seeds],
            vector=[h.memory_id for h in vector_hits],
            vector_derived=[h.memory_id for h in derived_hits],
            summaries=[c.memory_id for c in lexical.summaries],
            rows=checked,
            provisional={h.memory_id: _provisional(h, params["at"]) for h in derived_hits},
        )
        first = first_stage(signals, rankers, config)
        width = config.neighbour_width if "neighbours" in names else 0
        with self._pool.connection() as conn:
            rows, neighbours = queries.candidates(conn, params, first.unchecked, first.anchors, width)
        signals = signals.checked(rows, neighbours)
        anchored = [a for a in first.anchors if a in signals.rows]
        keep = None if max_tokens is not None or include_summaries else max(3 * k + _EXTRA_ROWS, config.mmr_pool)
        ranked = shaped(signals, rankers, config, anchored, params["at"], params["statuses"], include_summaries, keep)
        ranked = self._not_erased_by_topic(ranked)
        answered = one_per_key(ranked)
        head = answered if max_tokens is not None else answered[: max(config.mmr_pool, k + _EXTRA_ROWS)]
        prefetched = self._submit(self._rows, head, params, queries, stores.embedder) if head else None
        return finish(answered, self._mmr_vectors(stores, ranked, config, degraded), config), prefetched

    def _submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        """``fn(*args)`` in the worker thread (started on first use)."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recall-io")
        return self._worker.submit(fn, *args)

    def _lexical(
        self, queries: RecallQueries, params: dict[str, Any], config: RankingConfig, summaries: int
    ) -> LexicalHits:
        with self._pool.connection() as conn:
            return queries.lexical(
                conn,
                {**params, "k1": config.bm25_k1, "b": config.bm25_b},
                config.fts_scoring,
                depth=config.depth,
                seeds=config.depth,
                summaries=summaries,
            )

    def _vector_search(
        self,
        stores: ServingStores,
        query: str,
        params: dict[str, Any],
        config: RankingConfig,
        as_of: bool,
        degraded: list[str],
    ) -> tuple[list[VectorHit], list[VectorHit]]:
        """Memories recall may return, and derived memories (inferences, lineage seeds),
        by vector similarity (([], []) without an index, or when it fails). The query is
        embedded with the embedder of the collection searched; a point made by another
        model (its payload ``model``) is never ranked. Judging ``as_of``, every live point
        is searched: the facts table decides what the status was then."""
        index, embedder = stores.index, stores.embedder
        if index is None or embedder is None:
            return [], []
        flt = VectorFilter(
            subject_id=params["subject"],
            purpose=params["purpose"],
            statuses=RANKED_STATUSES if as_of else tuple(params["statuses"]),
            scope_keys=tuple(params["scopes"]),
            not_expired_at=params["at"].timestamp(),
        )
        vector = embedder.embed([query])[0]
        try:
            hits = index.search(vector, flt, config.depth, _HIT_KEYS)
            derived = (
                index.search(
                    vector, replace(flt, statuses=RANKED_STATUSES, kinds=("inference",)), config.depth, _DERIVED_KEYS
                )
                if config.weight("lineage") > 0
                else []
            )
        except VectorIndexError as exc:
            log.warning("recall without vectors: %s", exc)
            degraded.append("vectors")
            return [], []
        return _by_score(_same_model(hits, index, embedder)), _by_score(_same_model(derived, index, embedder))

    def _mmr_vectors(
        self, stores: ServingStores, ranked: Sequence[Candidate], config: RankingConfig, degraded: list[str]
    ) -> Mapping[str, Sequence[float]]:
        """The embeddings of the MMR pool ({} when MMR is off or the index is not there)."""
        if config.mmr_lambda >= 1.0 or stores.index is None or "vectors" in degraded or len(ranked) < 2:
            return {}
        ids = [c.memory_id for c in ranked[: config.mmr_pool] if c.kind != "summary"]
        try:
            return stores.index.vectors(ids)
        except VectorIndexError as exc:
            log.warning("recall without diversification: %s", exc)
            return {}

    def _not_erased_by_topic(self, ranked: list[Candidate]) -> list[Candidate]:
        """``ranked`` without those the tombstone topic names (the SQL filters check the
        ``tombstones`` table; the topic also covers a Postgres restored from a backup older
        than an erasure). If the topic cannot be read now the table's check stands alone."""
        if self._topic_tombstones is None or not ranked:
            return ranked
        try:
            gone = self._topic_tombstones([c.memory_id for c in ranked])
        except Exception as exc:  # the table is still checked: recall goes on
            log.warning("recall: the tombstone topic cannot be read now (%s); the tombstones table is checked", exc)
            return ranked
        return [c for c in ranked if c.memory_id not in gone]

    # -- items -----------------------------------------------------------------------------

    def _items(
        self,
        ordered: Sequence[Candidate],
        k: int,
        max_tokens: int | None,
        params: dict[str, Any],
        queries: RecallQueries,
        embedder: Embedder | None,
        prefetched: Future[_Rows] | None = None,
    ) -> list[RecallItem]:
        """The returned items: the text and provenance of the best groups, each with its
        token count, within ``max_tokens``. A candidate whose row no longer passes the
        rules is dropped (and a grouped source keeps its group only while it passes).
        ``prefetched``: rows already being read (:meth:`_rank`); those of other members
        are read here. A prefetch the worker has not started yet is cancelled and read
        here instead (the worker is busy with another recall)."""
        wanted = ordered[: (len(ordered) if max_tokens is not None else k + _EXTRA_ROWS)]
        members = [m for g in wanted for m in g.members()]
        rows = _Rows()
        if prefetched is not None and not prefetched.cancel():
            rows = prefetched.result()
        missing = [m for m in members if m.memory_id not in rows.asked]
        if missing:
            rows = rows.merged(self._rows(missing, params, queries, embedder))
        items = _assemble(wanted, rows)
        return within_budget(items, _cost, k, max_tokens, _shrunk)

    def _rows(
        self, members: Sequence[Candidate], params: dict[str, Any], queries: RecallQueries, embedder: Embedder | None
    ) -> _Rows:
        """The rows of ``members`` that may still be returned, the open conflicts of the
        unconfirmed ones and each row's token count (one connection)."""
        if not members:
            return _Rows()
        unconfirmed = [m.memory_id for m in members if m.status == "needs_confirmation"]
        with self._pool.connection() as conn:
            rows = queries.items(conn, params, [m.memory_id for m in members])
            conflicts = open_conflicts_of(conn, self._facts, unconfirmed)
        counts = dict(zip(rows, token_counts(embedder, [r["content"] for r in rows.values()]), strict=True))
        return _Rows(frozenset(m.memory_id for m in members), rows, conflicts, counts)

    def _fetch(
        self,
        groups: Sequence[Candidate],
        params: dict[str, Any],
        queries: RecallQueries,
        embedder: Embedder | None,
    ) -> list[RecallItem]:
        return _assemble(groups, self._rows([m for g in groups for m in g.members()], params, queries, embedder))

    def _revalidate(
        self, hit: list[dict[str, Any]], params: dict[str, Any], queries: RecallQueries, embedder: Embedder | None
    ) -> list[RecallItem]:
        """Cached items re-read from the stores under the same rules at ``now``:
        anything erased, revoked, superseded, expired or changed since is dropped or
        refreshed, even if the cache projection has not caught up yet. A cached group
        keeps those of its members that are still valid."""
        groups = [
            replace(
                _cached_candidate(cached),
                grouped=[_cached_candidate(g) for g in cached["grouped"]],
            )
            for cached in hit
        ]
        topic_checked = set(c.memory_id for c in self._not_erased_by_topic([m for g in groups for m in g.members()]))
        groups = [
            replace(g, grouped=[m for m in g.grouped if m.memory_id in topic_checked])
            for g in groups
            if g.memory_id in topic_checked
        ]
        return self._fetch(groups, params, queries, embedder)

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


@dataclass(frozen=True)
class _Rows:
    """What :meth:`Recall._rows` read: the ids ``asked`` for, the ``rows`` of those that
    may still be returned (by id), the open ``conflicts`` of unconfirmed ones and the
    token ``counts`` of the rows."""

    asked: frozenset[str] = frozenset()
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def merged(self, other: _Rows) -> _Rows:
        return _Rows(
            self.asked | other.asked,
            {**self.rows, **other.rows},
            {**self.conflicts, **other.conflicts},
            {**self.counts, **other.counts},
        )


def _assemble(groups: Sequence[Candidate], found: _Rows) -> list[RecallItem]:
    """``groups`` as items from ``found``: a group whose row is gone is dropped, and so is
    a grouped source whose row is gone."""
    rows, conflicts, counts = found.rows, found.conflicts, found.counts

    def item(c: Candidate, grouped: Sequence[RecallItem] = ()) -> RecallItem:
        m = c.memory_id
        return item_from_row(rows[m], c.score, list(c.matched_by), conflicts.get(m, ()), counts[m], grouped)

    return [item(g, [item(m) for m in g.grouped if m.memory_id in rows]) for g in groups if g.memory_id in rows]


def _tokens(items: Sequence[RecallItem]) -> int:
    return sum(m.tokens for i in items for m in i.members())


def _by_score(hits: list[VectorHit]) -> list[VectorHit]:
    """``hits`` best first, ties by memory id: the index returns equal scores (the same
    text, the same vector) in the order its points were written, which a replay changes,
    and fused ranks would then change with it."""
    return sorted(hits, key=lambda h: (-h.score, h.memory_id))


def _same_model(hits: list[VectorHit], index: VectorIndex, embedder: Embedder) -> list[VectorHit]:
    """``hits`` without points another model made (logged: a collection must hold one model)."""
    foreign = [h.memory_id for h in hits if h.payload.get("model", embedder.model_name) != embedder.model_name]
    if foreign:
        log.error(
            "recall: %d points of %s were made by another model than %s",
            len(foreign),
            index.collection,
            embedder.model_name,
        )
    return [h for h in hits if h.memory_id not in foreign]


def _provisional(hit: VectorHit, at: datetime) -> Candidate:
    """A candidate from a vector point's payload, to rank with until the facts table is read."""
    p = hit.payload
    return Candidate(
        memory_id=hit.memory_id,
        kind=str(p.get("kind", "fact")),
        status=str(p.get("status", "active")),
        key=None,
        scope={"type": str(p.get("scope_type", "subject")), "id": str(p.get("scope_id", ""))},
        derived_from=[str(m) for m in p.get("derived_from") or ()],
        source_ref=None,
        written_at=at,
        confidence=float(p.get("confidence", 1.0)),
        confirmed=False,
    )


def _cached_candidate(cached: dict[str, Any]) -> Candidate:
    """A cached item (``asdict`` of a :class:`RecallItem`) as a candidate keeping its score."""
    return Candidate(
        memory_id=cached["memory_id"],
        kind=cached["kind"],
        status=cached["status"],
        key=cached["key"],
        scope=cached["scope"],
        derived_from=list(cached["derived_from"]),
        source_ref=None,
        written_at=utc_now(),
        confidence=float(cached["confidence"]),
        confirmed=bool(cached["confirmed"]),
        score=float(cached["score"]),
        matched_by=list(cached["matched_by"]),
    )


def _cost(item: RecallItem) -> int:
    """The tokens of ``item`` with the sources grouped under it."""
    return sum(m.tokens for m in item.members())


def _shrunk(item: RecallItem, left: int) -> RecallItem | None:
    """``item`` in ``left`` tokens when it does not fit whole: a summary with as many of
    its grouped sources as fit, best first; when the summary alone is too long, its best
    grouped source that fits, in its place; ``None`` when nothing of it fits."""
    if item.tokens <= left:
        kept: list[RecallItem] = []
        room = left - item.tokens
        for source in item.grouped:
            if source.tokens <= room:
                kept.append(source)
                room -= source.tokens
        return replace(item, grouped=kept)
    return next((replace(s, grouped=[]) for s in item.grouped if s.tokens <= left), None)
