"""Versioned projections on the real stores (PostgreSQL, Redis, a Qdrant local engine):
a shadow rebuild of facts to version 2 under a steady write load with an erasure in the
middle while recall keeps answering; swap, rollback, retire; a vectors rebuild with
another embedder that serves queries embedded with the right model."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, utc_now
from projections import versions
from projections.embedding import Embedder, build_embedder
from projections.errors import VersionError
from projections.qdrant_client_index import QdrantClientIndex
from projections.trace import render_text, trace
from projections.trace_html import render_html
from projections.verify import verify_postgres
from tests.builders import PURPOSE, memory_write
from tests.integration.conftest import local_settings
from workers.bootstrap import Services, build
from workers.versioning import RebuildProgress, rebuild, rebuild_many, retire, rollback

pytestmark = pytest.mark.integration


@pytest.fixture
def svc(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    services = build(local_settings(tmp_path / "data", fresh_dsn, redis_url, pool_max_size=12))
    yield services
    services.close()


def rows(svc: Services, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with svc.pool.connection() as conn:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]


def recalled(svc: Services, query: str) -> list[str]:
    result = svc.recall.recall(svc.principal(), "alice", PURPOSE, query, utc_now(), k=20)
    return [m.memory_id for i in result.items for m in i.members()]


def write(svc: Services, text: str) -> str:
    r = svc.ledger.write(svc.principal(), memory_write(content=text))
    assert r.memory_id is not None
    return r.memory_id


def state_of(svc: Services, name: str) -> dict[int, str]:
    with svc.pool.connection() as conn:
        return {v.version: v.state for v in versions.versions(conn, name)}


def view_source(svc: Services, view: str) -> str:
    return str(rows(svc, "SELECT definition FROM pg_views WHERE viewname = %s", view)[0][0])


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``condition`` every 10 ms until it holds or ``timeout`` seconds pass; the caller's
    assertions then say what was missing."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


class Load:
    """A writer thread through the ledger (live projections applied after each write),
    and a reader thread recalling throughout; ``erase_now`` makes the writer erase the
    victim and report when the live versions applied it."""

    def __init__(self, svc: Services, victims: tuple[str, str], anchor: str) -> None:
        self.svc = svc
        self.victims = victims
        self.anchor = anchor
        self.stop = threading.Event()
        self.erase_now = threading.Event()
        self.erased = threading.Event()
        self.erasure_request: str | None = None
        self.lock = threading.Lock()
        self.applied: list[tuple[str, str]] = []  # (memory id, unique word), applied to every live version
        self.failures: list[str] = []
        self.recalls = 0
        self.threads = [threading.Thread(target=self._write), threading.Thread(target=self._read)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)

    def _write(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                if self.erase_now.is_set() and not self.erased.is_set():
                    r = self.svc.ledger.erase(
                        self.svc.principal(),
                        EraseMemories(subject_id="alice", memory_ids=self.victims, reason="subject asked"),
                    )
                    self.erasure_request = r.request_id
                    self.svc.catch_up()
                    self.erased.set()
                word = f"loadword{n:05d}"
                mid = write(self.svc, f"Alice noted {word} during the rebuild")
                # twice: a catch-up that began before a swap may have applied the write to the
                # version that stopped serving; the next one applies the serving one
                self.svc.catch_up()
                self.svc.catch_up()
                with self.lock:
                    self.applied.append((mid, word))
                n += 1
                time.sleep(0.01)
        except Exception as exc:  # reported by the test
            self.failures.append(f"writer: {exc!r}")

    def _read(self) -> None:
        try:
            while not self.stop.is_set():
                with self.lock:
                    latest = self.applied[-1] if self.applied else None
                erased_before = self.erased.is_set()
                anchor = recalled(self.svc, "tea kettle")
                if self.anchor not in anchor:
                    self.failures.append(f"recall {self.recalls}: the anchor memory was not recalled: {anchor}")
                if latest is not None and latest[0] not in recalled(self.svc, latest[1]):
                    self.failures.append(f"recall {self.recalls}: {latest[1]} (applied) not recalled: stale")
                if erased_before:
                    for victim, query in zip(self.victims, ("locker code zebra", "gym badge walrus"), strict=True):
                        if victim in recalled(self.svc, query):
                            self.failures.append(f"recall {self.recalls}: erased memory {query!r} was recalled")
                self.recalls += 1
        except Exception as exc:  # reported by the test
            self.failures.append(f"reader: {exc!r}")


def test_facts_rebuild_under_write_load_with_an_erasure_then_rollback_and_retire(svc: Services) -> None:
    anchor = write(svc, "Alice boils water in a copper tea kettle")
    victim = write(svc, "Alice's locker code is 4471 zebra")  # version 2 holds it when the erasure comes
    for i in range(150):
        write(svc, f"Alice seeded fact {i} about seedword{i:04d}")
    late_victim = write(svc, "Alice's gym badge is 5532 walrus")  # version 2 meets it after the erasure
    svc.catch_up()
    assert victim in recalled(svc, "locker code zebra") and late_victim in recalled(svc, "gym badge walrus")
    assert state_of(svc, "facts") == {1: "serving"}
    assert "facts_v1" in view_source(svc, "facts")

    with Load(svc, (victim, late_victim), anchor) as load:
        seen: list[RebuildProgress] = []

        def progress(p: RebuildProgress) -> None:
            seen.append(p)
            if p.position * 2 >= p.end and not load.erase_now.is_set():  # half way: erase, wait until applied
                load.erase_now.set()
                assert load.erased.wait(30), f"the writer did not apply the erasure: {load.failures}"
                mid_rebuild.append(p.position)
            # a rebuild slow enough to overlap with many writes and recalls, however fast it
            # applies: two writes for each of its first batches (or 5 s, if the writer is stuck)
            deadline = time.monotonic() + 5
            wanted = min(2 * len(seen), 24)
            while len(load.applied) < wanted and time.monotonic() < deadline and not load.failures:
                time.sleep(0.01)

        mid_rebuild: list[int] = []
        # the load runs before, during and after the rebuild; counted in writes, not in seconds,
        # which a loaded machine would make too few
        wait_for(lambda: len(load.applied) >= 5 or bool(load.failures))
        before = len(load.applied)
        result = rebuild(svc, "facts", 2, progress=progress, batch_size=16)
        during = len(load.applied) - before
        wait_for(lambda: len(load.applied) >= before + during + 10 or bool(load.failures))  # after the swap
    assert load.failures == [], load.failures[:5]
    assert during > 0, "no write overlapped the rebuild"
    assert load.recalls >= 20 and len(load.applied) >= 20
    assert mid_rebuild and mid_rebuild[0] < seen[-1].end, "the erasure came before the rebuild reached the end"
    assert len(seen) > 5 and all(p.rate >= 0 and p.end >= p.position for p in seen)
    assert (result.serving, result.previous) == (2, 1)
    assert state_of(svc, "facts") == {1: "previous", 2: "serving"}
    assert "facts_v2" in view_source(svc, "facts") and "summaries_v1" in view_source(svc, "summaries")
    assert "facts_history_v2" in view_source(svc, "facts_history")

    svc.catch_up()  # what the writer appended last reaches both live versions
    for table in ("facts", "facts_history", "facts_conflicts"):
        v1 = rows(svc, f"SELECT * FROM {table}_v1 ORDER BY 1, 2")
        v2 = rows(svc, f"SELECT * FROM {table}_v2 ORDER BY 1, 2")
        assert v1 == v2, table
    for v in (1, 2):
        assert rows(
            svc,
            f"SELECT count(*) FROM facts_v{v} WHERE memory_id = ANY(%s) OR content ~ '(zebra|walrus)'",
            [victim, late_victim],
        ) == [(0,)]
    assert victim not in recalled(svc, "locker code zebra") and late_victim not in recalled(svc, "gym badge walrus")
    assert load.erasure_request is not None
    receipts = rows(
        svc, "SELECT projection FROM erasure_receipts WHERE request_id = %s AND store = 'facts'", load.erasure_request
    )
    assert sorted(r[0] for r in receipts) == ["facts_v1", "facts_v2"]
    assert trace(svc.pool, load.erasure_request, svc.trace_targets()).verdict == "complete"
    # after the swap, the new version equals a fresh fold of the log up to its position
    checked = verify_postgres(svc.pool, svc.keyring, svc.log, "facts", 2)
    assert checked.ok and checked.subjects == 1 and checked.events_folded > 0, checked.render()

    # rollback: v1 serves again; both versions keep receiving events
    back = rollback(svc, "facts")
    assert (back.serving, back.previous) == (1, 2)
    assert state_of(svc, "facts") == {1: "serving", 2: "previous"}
    assert "facts_v1" in view_source(svc, "facts")
    late = write(svc, "Alice bought a new kettle whistle")
    svc.catch_up()
    assert late in recalled(svc, "kettle whistle")
    for v in (1, 2):
        assert rows(svc, f"SELECT count(*) FROM facts_v{v} WHERE memory_id = %s", late) == [(1,)]
    assert rollback(svc, "facts").serving == 2  # and forward again
    assert late in recalled(svc, "kettle whistle")

    # refusals
    with pytest.raises(VersionError, match="serving"):
        retire(svc, "facts", 2)
    with pytest.raises(VersionError, match="above every existing version"):
        rebuild(svc, "facts", 2)
    with pytest.raises(VersionError, match="projection"):
        rebuild(svc, "fact", 3)

    # retire v1: its tables and positions go; no rollback target is left
    retire(svc, "facts", 1)
    assert state_of(svc, "facts") == {1: "retired", 2: "serving"}
    assert rows(svc, "SELECT to_regclass('facts_v1'), to_regclass('facts_history_v1')") == [(None, None)]
    assert rows(svc, "SELECT count(*) FROM projection_positions WHERE projection = 'facts_v1'") == [(0,)]
    with pytest.raises(VersionError, match="no previous version"):
        rollback(svc, "facts")
    after = write(svc, "Alice cleans the kettle on Sundays")
    svc.catch_up()
    assert after in recalled(svc, "kettle Sundays")
    assert [p.id for p in svc.live_projections() if p.name == "facts"] == ["facts_v2"]


def test_trace_after_a_rebuild_keeps_the_latency_of_the_version_that_held_the_copies(svc: Services) -> None:
    """A version created after the erasure never held the memory: its receipt (written
    at rebuild time) decides the status, but the latency stays the old version's."""
    victim = write(svc, "Alice's bike lock code is 8812 heron")
    svc.catch_up()
    request = svc.ledger.erase(
        svc.principal(), EraseMemories(subject_id="alice", memory_ids=(victim,), reason="asked")
    ).request_id
    svc.catch_up()
    [(v1_at,)] = rows(
        svc,
        "SELECT applied_at FROM erasure_receipts WHERE request_id = %s AND projection = 'facts_v1' AND store = 'facts'",
        request,
    )
    rebuild(svc, "facts", 2)
    report = trace(svc.pool, request, svc.trace_targets())
    assert report.verdict == "complete"
    by_store = {s.store: s for s in report.stores}
    facts = by_store["facts"]
    assert (facts.projection, facts.rebuilt, facts.removed_by) == ("facts_v2", True, "facts_v1")
    assert (
        facts.status == "applied" and facts.applied_at is not None and datetime.fromisoformat(facts.applied_at) > v1_at
    )
    requested = rows(svc, "SELECT requested_at FROM erasure_requests WHERE request_id = %s", request)[0][0]
    assert facts.latency_s == round((v1_at - requested).total_seconds(), 3)
    assert by_store["history"].rebuilt and by_store["history"].removed_by == "facts_v1"
    vectors = by_store["vectors"]
    assert (vectors.projection, vectors.rebuilt, vectors.removed_by) == ("vectors_v1", False, None)
    text = render_text(report)
    assert "facts: facts_v2 was rebuilt after the request" in text and "facts_v1 applied it at" in text
    assert 'data-rebuilt="facts"' in render_html(report)


class Recording:
    """An embedder that records every text it embeds."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return self.inner.embed(texts)


def test_vectors_rebuild_with_another_embedder_serves_queries_with_its_model(svc: Services) -> None:
    minilm = Recording(build_embedder("minilm"))
    svc.stores.add_embedder("minilm", minilm)
    keep = write(svc, "Alice likes hiking in the mountains on weekends")
    gone = write(svc, "Alice's bank PIN is 9917")
    svc.ledger.erase(svc.principal(), EraseMemories(subject_id="alice", memory_ids=(gone,), reason="subject asked"))
    svc.catch_up()
    before = svc.stores.route()
    assert before.embedder is not None and before.index is not None
    assert (before.index.collection, before.embedder.dim) == ("memories_v1", 256)
    v1_point = svc.stores.index(1).retrieve([keep])[keep]
    assert v1_point.payload["model"] == "hashing-256/blake2b-v1"
    svc.recall.recall(svc.principal(), "alice", PURPOSE, "outdoor trekking", utc_now())  # now in the cache

    result = rebuild(svc, "vectors", 2, embedder="minilm")
    assert result.embedder == {"name": "minilm", "dim": 384, "model": minilm.model_name}
    with svc.pool.connection() as conn:
        info = versions.serving(conn, "vectors")
    assert info.version == 2 and info.embedder is not None and info.embedder.name == "minilm"

    point = svc.stores.index(2).retrieve([keep])[keep]
    assert point.payload["model"] == minilm.model_name and len(point.vector) == 384
    assert svc.stores.index(2).retrieve([gone]) == {}
    assert not any("9917" in t for t in minilm.texts), "an erased memory was re-embedded"
    assert svc.stores.index(1).count() == svc.stores.index(2).count() == 1

    route = svc.stores.route()
    assert route.index is not None and route.embedder is not None
    assert (route.index.collection, route.embedder.model_name, route.embedder.dim) == (
        "memories_v2",
        minilm.model_name,
        384,
    )
    embedded = len(minilm.texts)
    answer = svc.recall.recall(svc.principal(), "alice", PURPOSE, "outdoor trekking", utc_now())
    assert answer.degraded == [] and not answer.cached  # not the result ranked with the old model
    assert [i.memory_id for i in answer.items] == [keep] and "vector" in answer.items[0].matched_by
    assert minilm.texts[embedded:] == ["outdoor trekking"], "the query was not embedded with the serving model"

    # a new memory reaches both collections, each embedded by its own model
    new = write(svc, "Alice swims in the lake")
    svc.catch_up()
    assert svc.stores.index(1).retrieve([new])[new].payload["model"] == "hashing-256/blake2b-v1"
    assert svc.stores.index(2).retrieve([new])[new].payload["model"] == minilm.model_name

    rollback(svc, "vectors")
    route = svc.stores.route()
    assert route.index is not None and route.embedder is not None
    assert (route.index.collection, route.embedder.dim) == ("memories_v1", 256)
    assert not svc.recall.recall(svc.principal(), "alice", PURPOSE, "hiking mountains", utc_now()).degraded
    retire(svc, "vectors", 2)
    assert state_of(svc, "vectors") == {1: "serving", 2: "retired"}
    local = QdrantClientIndex.for_path(Path(svc.settings.data_dir) / "qdrant" / "v2", "memories_v2")
    try:
        assert not local.client.collection_exists("memories_v2")
    finally:
        local.close()


def test_a_vectors_rebuild_with_the_same_embedder_reuses_the_serving_vectors(svc: Services) -> None:
    ids = [write(svc, f"Alice keeps note {n} about the garden") for n in range(3)]
    svc.catch_up()
    recording = Recording(svc.stores.embedder("hashing"))
    svc.stores.add_embedder("hashing", recording)  # what the new version embeds with

    assert rebuild(svc, "vectors").serving == 2

    assert recording.texts == []  # every text had a point of the same model and fingerprint in v1
    v1, v2 = svc.stores.index(1).retrieve(ids), svc.stores.index(2).retrieve(ids)
    assert {m: p.payload for m, p in v1.items()} == {m: p.payload for m, p in v2.items()} and len(v2) == 3


def test_cache_and_summaries_rebuild_switch_prefix_and_view_in_one_pass(svc: Services) -> None:
    write(svc, "Alice drinks green tea")
    svc.catch_up()
    assert svc.recall.recall(svc.principal(), "alice", PURPOSE, "green tea", utc_now()).items
    for names, to_version, embedder in ((["cache", "summaries"], 2, None), (["cache", "cache"], None, None)):
        with pytest.raises(VersionError):  # one version number for two projections; a name twice
            rebuild_many(svc, names, to_version, embedder)
    with pytest.raises(VersionError, match="embedder"):
        rebuild_many(svc, ["cache", "summaries"], embedder="hashing")
    assert [r.projection for r in rebuild_many(svc, ["cache", "summaries"])] == ["cache", "summaries"]
    route = svc.stores.route()
    assert route.cache is not None and route.cache.prefix == "memledger:cache_v2:"
    assert "summaries_v2" in view_source(svc, "summaries")
    first = svc.recall.recall(svc.principal(), "alice", PURPOSE, "green tea", utc_now())
    again = svc.recall.recall(svc.principal(), "alice", PURPOSE, "green tea", utc_now())
    assert first.items and not first.cached and again.cached
    assert route.cache.entries("alice")


def test_the_worker_supervisor_follows_the_registry(svc: Services) -> None:
    from workers.live.supervisor import desired_children

    settings = svc.settings.model_copy(update={"kafka_bootstrap": "127.0.0.1:1"})
    assert desired_children(settings, ["facts", "vectors"], None) == {("facts", 1), ("vectors", 1)}
    rebuild(svc, "facts", 2)
    assert desired_children(settings, ["facts"], None) == {("facts", 1), ("facts", 2)}
    retire(svc, "facts", 1)
    assert desired_children(settings, ["facts"], None) == {("facts", 2)}
    broken = settings.model_copy(update={"postgres_dsn": "postgresql://nobody@127.0.0.1:1/none"})
    assert desired_children(broken, ["facts"], {("facts", 2)}) == {("facts", 2)}


def test_an_interrupted_rebuild_resumes_and_blocks_another(svc: Services) -> None:
    write(svc, "Alice drinks green tea")
    svc.catch_up()
    with svc.pool.connection() as conn:
        building = versions.begin_build(conn, "facts", None, None)  # as if a replay had died
    assert (building.version, building.state) == (2, "building")
    with pytest.raises(VersionError, match="facts_v2 is being built"):
        rebuild(svc, "facts", 3)
    with pytest.raises(VersionError, match="embedder"):
        rebuild(svc, "facts", embedder="minilm")
    assert rebuild(svc, "facts").serving == 2  # resumed
    assert state_of(svc, "facts") == {1: "previous", 2: "serving"}


def test_the_qdrant_alias_moves_in_one_operation(tmp_path: Path) -> None:
    v1 = QdrantClientIndex.for_path(tmp_path / "q", "memories_v1")
    v2 = QdrantClientIndex(v1.client, "memories_v2")  # same engine, another collection
    try:
        v1.ensure_collection(4)
        v2.ensure_collection(8)
        v1.point_alias(versions.VECTOR_ALIAS)
        assert v1.client.get_collection(versions.VECTOR_ALIAS).config.params.vectors.size == 4  # type: ignore[union-attr]
        v2.point_alias(versions.VECTOR_ALIAS)
        aliases = v1.client.get_aliases().aliases
        assert [(a.alias_name, a.collection_name) for a in aliases] == [("memories", "memories_v2")]
    finally:
        v2.close()
        v1.close()
