"""The revision guards of each store on the smallest histories the property tests
(``test_reference_fold.py``) found failing before the guards: an older event delivered
again, at a later offset, after a newer one changes nothing.

- vectors: a ``MemoryWritten`` after the memory's supersession brought its point back
  (issue 11, case 2); a redacted summary got a point;
- summaries: a ``SummaryDerived`` after a source's supersession brought the summary back;
  a source's old redaction dropped the summary derived after it;
- cache: a duplicate dropped the results cached since; a recall result older than the
  cache's state was stored (and an erasure delivered again still drops what holds its
  memory, and only that);
- facts: a write delivered after its erasure, with the tombstone row gone (a Postgres
  restored from a backup, or an erasure whose ledger transaction failed after the
  append), would have been stored again had the history not guarded it;
- every store: a whole-subject erasure removes every item of its subject where it is
  first applied, and nothing the subject wrote after it, neither later in its batch nor
  when it is delivered again at a later offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from contracts import (
    EraseMemories,
    ErasureRequested,
    Event,
    MemoryRedacted,
    MemoryWritten,
    RedactMemory,
    SummaryDerived,
)
from ledger.crypto import Keyring
from ledger.eventlog import LogPosition
from ledger.principals import Grant, Principal
from projections.base import ContentAccess, PositionedProjection
from projections.cache import CacheProjection, RecallCache
from projections.embedding import build_embedder
from projections.facts import FactsProjection
from projections.qdrant_client_index import QdrantClientIndex
from projections.summaries import SummariesProjection
from projections.vectors import VectorsProjection
from tests.builders import memory_write
from tests.integration.fold_history import LedgerStage

pytestmark = pytest.mark.integration

ALL = Principal(id="guards", grants=(Grant(subjects=("alice",), actions=("read", "write", "erase")),))


class Feed:
    """The ledger's events, delivered to one projection at growing offsets."""

    def __init__(self, stage: LedgerStage, projection: PositionedProjection) -> None:
        self.stage = stage
        self.projection = projection
        self.log: list[Event] = []
        self._offset = 0

    def deliver(self, *events: Event) -> None:
        items = []
        for event in events:
            items.append((event, LogPosition(0, self._offset)))
            self._offset += 1
        self.projection.apply_batch(items)

    def catch_up(self) -> list[Event]:
        """Deliver what the ledger appended since the last call; returns it."""
        new = [e for e, _ in self.stage.new_records()]
        self.log += new
        self.deliver(*new)
        return new

    def first(self, kind: type[Event], memory_id: str) -> Event:
        return next(e for e in self.log if isinstance(e, kind) and getattr(e, "memory_id", None) == memory_id)


@pytest.fixture
def stage(pool: ConnectionPool, keyring: Keyring) -> LedgerStage:
    return LedgerStage(pool, keyring)


@pytest.fixture
def content(pool: ConnectionPool, keyring: Keyring, stage: LedgerStage) -> ContentAccess:
    return ContentAccess(pool, keyring)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[QdrantClientIndex]:
    index = QdrantClientIndex.for_path(str(tmp_path / "qdrant"), "memories_v1")
    yield index
    index.close()


def write(stage: LedgerStage, text: str, **fields: Any) -> str:
    memory_id = stage.ledger.write(ALL, memory_write("alice", text, **fields)).memory_id
    assert memory_id is not None
    return memory_id


def summary_of(stage: LedgerStage, *sources: str) -> str:
    prov = {"writer": "summariser", "written_at": stage.clock.now, "derived_from": list(sources)}
    return write(stage, "Alice likes tea, in short", kind="summary", provenance=prov)


def test_vectors_a_write_after_its_supersession_and_a_redacted_summary_leave_no_point(
    stage: LedgerStage, pool: ConnectionPool, content: ContentAccess, index: QdrantClientIndex
) -> None:
    feed = Feed(stage, VectorsProjection(pool, index, build_embedder("hashing"), content))
    old = write(stage, "Alice likes tea")
    stage.ledger.supersede(ALL, old, memory_write("alice", "Alice likes coffee"))
    summary = summary_of(stage, write(stage, "Alice likes scones"))
    stage.ledger.redact(ALL, "alice", RedactMemory(memory_id=summary, replacement="[redacted]"))
    feed.catch_up()
    feed.deliver(feed.first(MemoryWritten, old))
    assert index.retrieve([old, summary]) == {}


def test_summaries_a_summary_stays_dropped_and_a_later_one_survives_an_old_redaction(
    stage: LedgerStage, pool: ConnectionPool, content: ContentAccess
) -> None:
    projection = SummariesProjection(pool, content)
    feed = Feed(stage, projection)
    source = write(stage, "Alice likes tea")
    dropped = summary_of(stage, source)
    stage.ledger.supersede(ALL, source, memory_write("alice", "Alice likes coffee"))
    other = write(stage, "Alice likes scones")
    stage.ledger.redact(ALL, "alice", RedactMemory(memory_id=other, replacement="Alice likes [redacted]"))
    kept = summary_of(stage, other)
    feed.catch_up()
    feed.deliver(feed.first(SummaryDerived, dropped), feed.first(MemoryRedacted, other))
    with pool.connection() as conn:
        assert [r[0] for r in conn.execute("SELECT memory_id FROM summaries_v1")] == [kept]


def test_cache_a_duplicate_drops_nothing_and_an_older_result_is_not_stored(
    stage: LedgerStage, pool: ConnectionPool, redis_client: Any
) -> None:
    cache = RecallCache(redis_client)
    feed = Feed(stage, CacheProjection(pool, cache))
    memory = write(stage, "Alice likes tea")
    feed.catch_up()
    fresh = cache.entry_key("alice", {"q": "fresh"})
    assert cache.put("alice", fresh, cache.generation("alice"), [{"memory_id": memory, "revision": 1}], 60)
    feed.deliver(feed.first(MemoryWritten, memory))  # again
    assert cache.get(fresh) is not None
    stage.ledger.supersede(ALL, memory, memory_write("alice", "Alice likes coffee"))
    feed.catch_up()
    stale = cache.entry_key("alice", {"q": "stale"})  # computed from facts that lag behind
    assert not cache.put("alice", stale, cache.generation("alice"), [{"memory_id": memory, "revision": 1}], 60)
    assert cache.marks("alice")[memory] == (2, "superseded")
    erased = write(stage, "Alice's phone is 555-0100")
    stage.ledger.erase(ALL, EraseMemories(subject_id="alice", memory_ids=(erased,), reason="asked"))
    feed.catch_up()
    other = cache.entry_key("alice", {"q": "other"})
    copy = cache.entry_key("alice", {"q": "copy"})  # as if restored from a backup
    for key, held in ((other, memory), (copy, erased)):
        assert cache.put("alice", key, cache.generation("alice"), [{"memory_id": held, "revision": 9}], 60)
    feed.deliver(next(e for e in feed.log if isinstance(e, ErasureRequested)))  # again
    assert cache.get(other) is not None and cache.get(copy) is None


def test_facts_a_write_after_its_erasure_stays_out_without_the_tombstone(
    stage: LedgerStage, pool: ConnectionPool, content: ContentAccess
) -> None:
    feed = Feed(stage, FactsProjection(pool, content))
    memory = write(stage, "Alice's address is 1 Main St")
    stage.ledger.erase(ALL, EraseMemories(subject_id="alice", memory_ids=(memory,), reason="asked"))
    feed.catch_up()
    with pool.connection() as conn:
        conn.execute("DELETE FROM tombstones WHERE memory_id = %s", (memory,))
        history = conn.execute("SELECT * FROM facts_history_v1 ORDER BY revision").fetchall()
    feed.deliver(feed.first(MemoryWritten, memory))
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM facts_v1").fetchone() == (0,)
        assert conn.execute("SELECT * FROM facts_history_v1 ORDER BY revision").fetchall() == history


def test_a_whole_subject_erasure_keeps_what_the_subject_writes_after_it(
    stage: LedgerStage, pool: ConnectionPool, content: ContentAccess, index: QdrantClientIndex, redis_client: Any
) -> None:
    cache = RecallCache(redis_client)
    feeds = [
        Feed(stage, FactsProjection(pool, content)),
        Feed(stage, SummariesProjection(pool, content)),
        Feed(stage, VectorsProjection(pool, index, build_embedder("hashing"), content)),
        Feed(stage, CacheProjection(pool, cache)),
    ]
    before = write(stage, "Alice likes tea")
    summary_of(stage, before)
    stage.ledger.erase(ALL, EraseMemories(subject_id="alice", whole_subject=True, reason="asked"))
    after = write(stage, "Alice likes coffee")
    later = summary_of(stage, after)
    events = [e for e, _ in stage.new_records()]
    for feed in feeds:  # one batch each: the erasure, then what the subject wrote after it
        feed.log += events
        feed.deliver(*events)
    kept = cache.entry_key("alice", {"q": "after"})
    assert cache.put("alice", kept, cache.generation("alice"), [{"memory_id": after, "revision": 1}], 60)
    erasure = next(e for e in events if isinstance(e, ErasureRequested))
    for delivered in ("once", "again"):
        with pool.connection() as conn:
            assert [r[0] for r in conn.execute("SELECT memory_id FROM facts_v1")] == [after], delivered
            assert [r[0] for r in conn.execute("SELECT memory_id FROM summaries_v1")] == [later], delivered
        assert set(index.retrieve([before, after])) == {after}, delivered
        assert cache.get(kept) is not None, delivered
        for feed in feeds:
            feed.deliver(erasure)  # a copy at a later offset
