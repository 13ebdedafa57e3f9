"""The vectors projection's two steps on the real stores (PostgreSQL, a local Qdrant
engine): in log order without embedding (``defer_embedding``: writes are queued), then
the queue embedded apart, so that an erasure and its receipt never wait behind the
embedding backlog; and vectors reused from another version with the same model."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger import state
from ledger.crypto import Keyring
from ledger.eventlog import LogPosition
from projections import embedding_queue
from projections.base import ContentAccess
from projections.embedding import HashingEmbedder
from projections.qdrant_client_index import QdrantClientIndex
from projections.vectors import VectorsProjection
from tests.integration.lifecycle_stage import Stage

pytestmark = pytest.mark.integration


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the texts it embeds; ``during`` runs inside
    ``embed`` (what other writers do while a slow model computes)."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts: list[str] = []
        self.during: Any = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return super().embed(texts)


class Vectors:
    """A deferred vectors projection (as the live worker runs it) and its stage."""

    def __init__(self, pool: Any, keyring: Keyring, tmp: Path) -> None:
        with pool.connection() as conn:
            state.install(conn)
            Keyring.install(conn)
        self.pool = pool
        self.content = ContentAccess(pool, keyring)
        self.index = QdrantClientIndex.for_path(str(tmp / "qdrant"), "memories_v1")
        self.embedder = CountingEmbedder()
        self.projection = VectorsProjection(pool, self.index, self.embedder, self.content, defer_embedding=True)
        self.stage = Stage(pool, keyring, [self.projection])

    def payload(self, memory_id: str) -> dict[str, Any] | None:
        point = self.index.retrieve([memory_id]).get(memory_id)
        return None if point is None else dict(point.payload)

    def queued(self) -> set[str]:
        with self.pool.connection() as conn:
            return {str(r[0]) for r in conn.execute(f"SELECT memory_id FROM {self.projection.queue}")}

    def receipts(self) -> list[tuple[Any, ...]]:
        with self.pool.connection() as conn:
            return conn.execute("SELECT store, log_offset, items_removed FROM erasure_receipts").fetchall()


@pytest.fixture
def vectors(pool: Any, keyring: Keyring, tmp_path: Path) -> Iterator[Vectors]:
    v = Vectors(pool, keyring, tmp_path)
    yield v
    v.index.close()


def test_an_erasure_is_applied_and_receipted_while_the_writes_before_it_wait_for_their_vectors(
    vectors: Vectors,
) -> None:
    s = vectors.stage
    keep = s.write("Alice prefers tea")
    gone = s.write("Alice's locker code is 4471")
    assert vectors.queued() == {keep, gone} and vectors.index.count() == 0
    assert vectors.projection.positions() == {0: 1} and vectors.projection.visible_positions() == {0: -1}

    s.erase(gone)  # in log order, ahead of any embedding

    assert vectors.receipts() == [("vectors", 2, 1)]
    assert vectors.queued() == {keep} and vectors.embedder.texts == []
    assert vectors.projection.embed_pending() == 1
    assert vectors.embedder.texts == ["Alice prefers tea"] and vectors.queued() == set()
    assert vectors.index.scroll_ids() == [keep] and vectors.payload(gone) is None
    assert vectors.projection.visible_positions() == vectors.projection.positions() == {0: 2}


def test_later_events_change_a_queued_write_in_log_order(vectors: Vectors) -> None:
    s = vectors.stage
    inference = s.write("Alice is an engineer", kind="inference", confirmed=False, provenance={"derived_from": []})
    s.confirm(inference)  # reaches the queued row: its point is born active, at revision 2
    superseded = s.write("Alice uses emacs")
    s.supersede(superseded, inference)
    redacted = s.write("Alice's phone is 555-0100")
    assert vectors.projection.embed_pending() == 2  # the superseded one is off the queue
    s.redact(redacted, "Alice's phone is [redacted]")  # its point goes until the new text is embedded
    assert vectors.payload(redacted) is None and vectors.queued() == {redacted}
    assert vectors.projection.embed_pending() == 1

    payload = vectors.payload(inference)
    assert payload is not None and (payload["status"], payload["revision"]) == ("active", 2)
    assert vectors.payload(superseded) is None
    redacted_payload = vectors.payload(redacted)
    assert redacted_payload is not None and redacted_payload["revision"] == 2
    assert vectors.embedder.texts == [
        "Alice is an engineer",
        "Alice's phone is 555-0100",
        "Alice's phone is [redacted]",
    ]


def test_a_vector_computed_while_its_memory_is_erased_is_never_written(vectors: Vectors) -> None:
    s = vectors.stage
    m = s.write("Alice's badge is B-0042")
    vectors.embedder.during = lambda: s.erase(m)  # the erasure commits while the vector is computed

    assert vectors.projection.embed_pending() == 1

    assert vectors.embedder.texts == ["Alice's badge is B-0042"]
    assert vectors.index.count() == 0 and vectors.queued() == set()
    assert vectors.receipts() == [("vectors", 1, 1)]


def test_replaying_into_a_version_with_the_same_model_reuses_the_stored_vectors(
    vectors: Vectors, tmp_path: Path
) -> None:
    s = vectors.stage
    ids = [s.write(f"Alice noted fact {n} about the kettle") for n in range(5)]
    s.redact(ids[0], "Alice noted something")
    assert vectors.projection.embed_pending() == 5
    # the redaction replaced the queued text before it was embedded: 5 texts, not 6
    assert len(vectors.embedder.texts) == 5 and "Alice noted something" in vectors.embedder.texts

    index2 = QdrantClientIndex.for_path(str(tmp_path / "qdrant2"), "memories_v2")
    try:
        embedder2 = CountingEmbedder()
        v2 = VectorsProjection(vectors.pool, index2, embedder2, vectors.content, 2, reuse=vectors.index)
        v2.apply_batch([(e, LogPosition(0, n)) for n, e in enumerate(s.log)])

        assert embedder2.texts == []  # every text has a point of the same model and fingerprint in v1
        live, rebuilt = vectors.index.retrieve(ids), index2.retrieve(ids)
        assert {m: p.payload for m, p in live.items()} == {m: p.payload for m, p in rebuilt.items()}
        for m, point in live.items():  # the same vector, up to the engine normalising it again
            assert max(abs(a - b) for a, b in zip(point.vector, rebuilt[m].vector, strict=True)) < 1e-6
    finally:
        index2.close()


def test_the_queue_is_dropped_with_its_version(vectors: Vectors) -> None:
    vectors.stage.write("Alice prefers tea")
    vectors.projection.drop()
    with vectors.pool.connection() as conn:
        assert conn.execute("SELECT to_regclass(%s)", (embedding_queue.table_name(1),)).fetchone() == (None,)
