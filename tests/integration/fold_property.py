"""The property of the reference fold's tests (issue 11, point 4), apart from the tests
that run it: the real stores under test (``StoreUnderTest``: facts, summaries, vectors on
either local Qdrant engine, the Redis cache), and ``check_history``, one example: a
history the real ledger writes from drawn commands (``fold_history``), delivered to the
store as ``fold_delivery`` schedules it, then compared with the reference fold of its
first deliveries. ``test_reference_fold.py`` runs it on the code as it is;
``test_reference_fold_finds.py`` on the code with a revision guard taken out, where it
must fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from hypothesis import event, note
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from contracts import Event, touched_memories
from ledger.eventlog import LogPosition
from projections.base import ContentAccess, PositionedProjection
from projections.cache import CacheProjection, RecallCache
from projections.comparison import Difference, tables_of
from projections.embedding import Embedder, build_embedder
from projections.facts import FactsProjection
from projections.qdrant_client_index import QdrantClientIndex
from projections.qdrant_edge_index import QdrantEdgeIndex
from projections.reference import Readable, ReferenceFold, read_sealed
from projections.reference.check import (
    compare_marks,
    compare_tables,
    compare_vectors,
    expected_marks,
    expected_points,
    expected_tables,
    live_marks,
    live_points,
    live_tables,
)
from projections.summaries import SummariesProjection
from projections.vector_index import VectorIndex, VectorPoint
from projections.vectors import VectorsProjection
from tests.integration.fold_delivery import Batch, Deliveries
from tests.integration.fold_history import COMMANDS, History, LedgerStage

STORES = ("facts", "summaries", "vectors-client", "vectors-edge", "cache")
"""The stores ``open_store`` builds, by name."""


class StoreUnderTest(Protocol):
    """One real store, fed deliveries and compared with the reference."""

    projection: PositionedProjection

    def between(self, data: st.DataObject, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        """A chance to act between deliveries (the cache stores recall results)."""

    def settled(self, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        """Called once every event is delivered, before the tail of duplicates."""

    def differences(self, fold: ReferenceFold, subjects: tuple[str, ...]) -> list[str]:
        """What differs from the reference, in words (empty: the store agrees)."""


def describe(differences: list[Difference]) -> list[str]:
    return [f"{d.table} {d.key} {d.column}: store {d.live} | reference {d.fold}" for d in differences]


class _WithoutHooks:
    """A store that does nothing between deliveries nor once they are all made."""

    def between(self, data: st.DataObject, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        return None

    def settled(self, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        return None


class PostgresStore(_WithoutHooks):
    """Facts or summaries: every row of the example's subjects."""

    def __init__(self, projection: FactsProjection | SummariesProjection, pool: ConnectionPool) -> None:
        self.projection = projection
        self._pool = pool
        self._name: Any = projection.name

    def differences(self, fold: ReferenceFold, subjects: tuple[str, ...]) -> list[str]:
        with self._pool.connection() as conn:
            live = live_tables(conn, self._name, 1, subjects)
        expected = expected_tables(fold, self._name, 1)
        expected = {t: {k: r for k, r in rows.items() if r["subject_id"] in subjects} for t, rows in expected.items()}
        found = compare_tables(live, expected, tables_of(self._name, 1))
        if self._name == "summaries":  # facts' marks are its history, compared above
            with self._pool.connection() as conn:
                stored = live_marks(conn, self.projection.id, subjects)
            found += compare_marks(self.projection.id, stored, expected_marks(fold, subjects))
        return describe(found)


class VectorStore(_WithoutHooks):
    """Vectors: every point of the example's subjects, payload and vector, and the
    projection's marks (unless ``with_marks`` is set false)."""

    with_marks = True

    def __init__(
        self, projection: PositionedProjection, index: VectorIndex, embedder: Embedder, pool: ConnectionPool
    ) -> None:
        self.projection = projection
        self._index = index
        self._embedder = embedder
        self._pool = pool

    def differences(self, fold: ReferenceFold, subjects: tuple[str, ...]) -> list[str]:
        live = live_points(self._index, subjects)
        _, found = compare_vectors(self._index.collection, live, expected_points(fold, self._embedder, subjects))
        found = [_with_state(d, live) for d in found]
        if not self.with_marks:
            return describe(found)
        with self._pool.connection() as conn:
            stored = live_marks(conn, self.projection.id, subjects)
        return describe(found + compare_marks(self.projection.id, stored, expected_marks(fold, subjects)))


def _with_state(difference: Difference, live: dict[str, VectorPoint]) -> Difference:
    """A point only the store holds, named with its status and revision ("present
    (active, revision 1)"): what a stale point is."""
    point = live.get(str(difference.key))
    if difference.column != "(row)" or point is None:
        return difference
    state = f"present ({point.payload.get('status')}, revision {point.payload.get('revision')})"
    return replace(difference, live=state)


class CacheStore:
    """The recall cache: results stored between deliveries (some from an older state of
    the history, as a recall reading facts that lag behind would compute them) must not
    survive holding a memory older than the cache has applied; a result stored once
    every event is delivered must survive the duplicates that follow."""

    def __init__(self, projection: CacheProjection) -> None:
        self.projection = projection
        self.cache = projection.cache
        self._settled: dict[str, str] = {}

    def between(self, data: st.DataObject, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        if not deliveries.first or not data.draw(st.booleans(), label="store a recall result"):
            return
        subject = data.draw(st.sampled_from(subjects), label="cached subject")
        seen = data.draw(st.integers(1, len(deliveries.first)), label="result computed after delivery")
        self._put(subject, ReferenceFold(Readable()).fold(deliveries.first[:seen]), f"at-{seen}")

    def settled(self, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        fold = ReferenceFold(Readable()).fold(deliveries.first)
        self._settled = {s: self._put(s, fold, "settled") for s in subjects}

    def _put(self, subject: str, fold: ReferenceFold, name: str) -> str:
        items = [
            {"memory_id": m, "revision": mark.revision, "grouped": []}
            for m, mark in sorted(fold.marks.items())
            if mark.subject_id == subject and mark.status == "active"
        ]
        key = self.cache.entry_key(subject, {"name": name})
        self.cache.put(subject, key, self.cache.generation(subject), items, 300.0)
        return key

    def differences(self, fold: ReferenceFold, subjects: tuple[str, ...]) -> list[str]:
        out: list[str] = []
        for subject in subjects:
            stored = {m: {"revision": r, "status": s} for m, (r, s) in self.cache.marks(subject).items()}
            expected = {
                m: {"revision": k.revision, "status": k.status}
                for m, k in fold.marks.items()
                if k.subject_id == subject
            }
            out += [
                f"cache marks of {subject}: {m}: store {stored.get(m)} | reference {expected.get(m)}"
                for m in sorted(set(stored) | set(expected))
                if stored.get(m) != expected.get(m)
            ]
            entries = set(self.cache.entries(subject))
            for key in sorted(entries):
                for item in self.cache.get(key) or []:
                    mark = fold.marks.get(item["memory_id"])
                    if mark is not None and item["revision"] < mark.revision:
                        out.append(
                            f"cache {key}: holds {item['memory_id']} at revision {item['revision']},"
                            f" the cache applied revision {mark.revision} ({mark.status})"
                        )
            settled = self._settled.get(subject)
            if settled is not None and settled not in entries:
                out.append(f"cache {settled}: stored after every event was delivered, dropped by a duplicate")
        return out


# -- building a store ----------------------------------------------------------------------


POOL_SIZE = 6
"""Connections of ``steady_pool``: more than an example ever holds at once."""


@contextmanager
def steady_pool(dsn: str) -> Iterator[ConnectionPool]:
    """A pool of ``POOL_SIZE`` connections, every one open before it is returned, so none
    is opened while hypothesis draws: psycopg_pool gives each new connection an expiry
    drawn from the global ``random`` in its worker thread, and hypothesis takes a change
    of that state during a draw for a strategy using ``random`` (a deprecation warning,
    an error under the project's warning filter), failing the example at random."""
    with ConnectionPool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, open=True) as pool:
        pool.wait()
        yield pool


@contextmanager
def open_store(
    name: str, pool: ConnectionPool, content: ContentAccess, directory: Path, redis_client: Callable[[], Any]
) -> Iterator[StoreUnderTest]:
    """The store ``name`` (one of ``STORES``), version 1 of its projection; a vector index
    lives in ``directory`` and is closed afterwards; ``redis_client`` is called for the cache."""
    if name == "facts":
        yield PostgresStore(FactsProjection(pool, content), pool)
    elif name == "summaries":
        yield PostgresStore(SummariesProjection(pool, content), pool)
    elif name == "cache":
        yield CacheStore(CacheProjection(pool, RecallCache(redis_client())))
    elif name in ("vectors-client", "vectors-edge"):
        index: VectorIndex = (
            QdrantClientIndex.for_path(str(directory / "qdrant"), "memories_v1")
            if name == "vectors-client"
            else QdrantEdgeIndex(directory / "edge", "memories_v1")
        )
        try:
            embedder = build_embedder("hashing")
            yield VectorStore(VectorsProjection(pool, index, embedder, content), index, embedder, pool)
        finally:
            index.close()
    else:
        raise ValueError(f"store: {name!r} is not one of {', '.join(STORES)}")


# -- the property --------------------------------------------------------------------------


def _apply(store: StoreUnderTest, batches: list[Batch]) -> None:
    for batch in batches:
        note("deliver " + ", ".join(_short(e, p) for e, p in batch))
        store.projection.apply_batch(batch)


def _short(event: Event, position: LogPosition) -> str:
    refs = ",".join(f"{r.memory_id[-6:]}@{r.revision}" for r in touched_memories(event))
    return f"{event.type}({refs}) at p{position.partition}:{position.offset}"


def check_history(
    data: st.DataObject, store: StoreUnderTest, stage: LedgerStage, content: ContentAccess, offsets: dict[int, int]
) -> None:
    """One example: up to 8 drawn commands through the ledger of ``stage``, their events
    delivered to ``store`` interleaved with them, duplicated and older after newer
    (``offsets``: the delivered log's next offset per partition, kept across examples);
    then the store must hold what the reference fold of the first deliveries says.

    Raises:
        AssertionError: the store differs from the reference (every difference, one a line).
    """
    history = History.start(stage, data)
    deliveries = Deliveries(offsets)
    commands = data.draw(st.lists(st.sampled_from(COMMANDS), min_size=1, max_size=8), label="commands")
    for command in commands:
        deliveries.append(history.run(data, command))
        _apply(store, deliveries.step(data))
        store.between(data, deliveries, history.subjects)
    _apply(store, deliveries.rest(data))
    store.settled(deliveries, history.subjects)
    _apply(store, deliveries.tail(data))
    note("commands: " + "; ".join(history.commands))
    for kind in sorted({e.type for e, _ in deliveries.first}):
        event(kind)  # --hypothesis-show-statistics: how many examples held each event type
    with stage.pool.connection() as conn:
        readable = read_sealed(conn, stage.keyring, [e for e, _ in deliveries.first], content.erased_among)
    fold = ReferenceFold(readable).fold(deliveries.first)
    problems = store.differences(fold, history.subjects)
    assert problems == [], "\n".join(problems)
