"""Property tests: every real store against the reference fold (issue 11, point 4).

Histories come from the real ``Ledger`` (``fold_history``): hypothesis draws the
commands, the ledger decides the events. The events reach the store under test as
``fold_delivery`` schedules them: each first delivered in log order per partition, the
partitions interleaved, commands and deliveries interleaved (so some events are applied
live, while their keys still open, and some only after a later command destroyed them),
then delivered again at later offsets, older events after newer ones, in batches of one
to four. At the end the store must hold exactly what the reference fold of the first
deliveries expects, with today's keys and tombstones: a replay's result, which live
processing must equal (invariant 8) and which no duplicate may change (invariant 2).

Stores: facts (``facts_v1``, its history and conflicts), summaries, vectors on both local
Qdrant engines through the ``VectorIndex`` port, and the Redis cache (its marks, and no
cached result holding a memory older than the cache has applied).

The example budget is fixed (``EXAMPLES`` per store); under ``CI=true`` the ``ci``
profile (tests/conftest.py) derandomises the examples, so CI runs the same ones each time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from contracts import Event, touched_memories
from ledger.crypto import Keyring
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
from projections.vector_index import VectorIndex
from tests.integration.fold_delivery import Batch, Deliveries
from tests.integration.fold_history import COMMANDS, History, LedgerStage

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("MEMLEDGER_TEST_FOLD_EXAMPLES", "30"))
"""Examples per store (each: up to 8 commands through the ledger and their deliveries);
``MEMLEDGER_TEST_FOLD_EXAMPLES`` raises it for a deeper search outside CI."""

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=(HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large),
)
"""The stores and the ledger are shared by the examples of a test (each example has
subjects of its own), hence the function-scoped fixtures."""


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


class PostgresStore:
    """Facts or summaries: every row of the example's subjects."""

    def __init__(self, projection: FactsProjection | SummariesProjection, pool: ConnectionPool) -> None:
        self.projection = projection
        self._pool = pool
        self._name: Any = projection.name

    def between(self, data: st.DataObject, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        return None

    def settled(self, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        return None

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


class VectorStore:
    """Vectors: every point of the example's subjects, payload and vector."""

    def __init__(
        self, projection: PositionedProjection, index: VectorIndex, embedder: Embedder, pool: ConnectionPool
    ) -> None:
        self.projection = projection
        self._index = index
        self._embedder = embedder
        self._pool = pool

    def between(self, data: st.DataObject, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        return None

    def settled(self, deliveries: Deliveries, subjects: tuple[str, ...]) -> None:
        return None

    def differences(self, fold: ReferenceFold, subjects: tuple[str, ...]) -> list[str]:
        live = live_points(self._index, subjects)
        _, found = compare_vectors(self._index.collection, live, expected_points(fold, self._embedder, subjects))
        with self._pool.connection() as conn:
            stored = live_marks(conn, self.projection.id, subjects)
        return describe(found + compare_marks(self.projection.id, stored, expected_marks(fold, subjects)))


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


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def stage(pool: ConnectionPool, keyring: Keyring) -> LedgerStage:
    return LedgerStage(pool, keyring)


@pytest.fixture
def offsets() -> dict[int, int]:
    return {}


@pytest.fixture
def content(pool: ConnectionPool, keyring: Keyring, stage: LedgerStage) -> ContentAccess:
    return ContentAccess(pool, keyring)


def _vector_store(index: VectorIndex, pool: ConnectionPool, content: ContentAccess) -> VectorStore:
    from projections.vectors import VectorsProjection

    embedder = build_embedder("hashing")
    return VectorStore(VectorsProjection(pool, index, embedder, content), index, embedder, pool)


@pytest.fixture(params=["facts", "summaries", "vectors-client", "vectors-edge", "cache"])
def store(
    request: pytest.FixtureRequest, pool: ConnectionPool, content: ContentAccess, tmp_path: Path
) -> Iterator[StoreUnderTest]:
    name = request.param
    if name == "facts":
        yield PostgresStore(FactsProjection(pool, content), pool)
    elif name == "summaries":
        yield PostgresStore(SummariesProjection(pool, content), pool)
    elif name == "cache":
        yield CacheStore(CacheProjection(pool, RecallCache(request.getfixturevalue("redis_client"))))
    else:
        index: VectorIndex = (
            QdrantClientIndex.for_path(str(tmp_path / "qdrant"), "memories_v1")
            if name == "vectors-client"
            else QdrantEdgeIndex(tmp_path / "edge", "memories_v1")
        )
        try:
            yield _vector_store(index, pool, content)
        finally:
            index.close()


# -- the property --------------------------------------------------------------------------


def _apply(store: StoreUnderTest, batches: list[Batch]) -> None:
    for batch in batches:
        note("deliver " + ", ".join(_short(e, p) for e, p in batch))
        store.projection.apply_batch(batch)


def _short(event: Event, position: LogPosition) -> str:
    refs = ",".join(f"{r.memory_id[-6:]}@{r.revision}" for r in touched_memories(event))
    return f"{event.type}({refs}) at p{position.partition}:{position.offset}"


@PROPERTY
@given(data=st.data())
def test_every_store_holds_what_the_reference_folds(
    data: st.DataObject,
    store: StoreUnderTest,
    stage: LedgerStage,
    content: ContentAccess,
    offsets: dict[int, int],
) -> None:
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
