"""One contract for every VectorIndex adapter.

Adapters under test, each on a fresh ``tmp_path``:

* ``qdrant-local``  - QdrantClientIndex in qdrant-client local mode (on disk);
* ``qdrant-edge``   - QdrantEdgeIndex (the Qdrant engine in-process, on disk);
* ``remote``        - RemoteVectorIndex reading through a VectorQueryServer that wraps a
                      qdrant-client local index (writes go to the wrapped index);
* ``qdrant-server`` - QdrantClientIndex against the server at MEMLEDGER_TEST_QDRANT_URL,
                      skipped when that variable is unset.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from uuid6 import uuid7

from projections.qdrant_client_index import QdrantClientIndex
from projections.qdrant_edge_index import QdrantEdgeIndex
from projections.vector_index import (
    VectorFilter,
    VectorIndex,
    VectorIndexError,
    VectorIndexUnreachableError,
    VectorPoint,
)
from projections.vector_remote import RemoteVectorIndex, VectorQueryServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COLLECTION = "memories"
DIM = 4
NOW = 1_700_000_000.0


@dataclass
class Harness:
    """``writer`` mutates, ``reader`` is read through (the same index except for ``remote``)."""

    writer: VectorIndex
    reader: VectorIndex


def _qdrant_server_url() -> str:
    url = os.environ.get("MEMLEDGER_TEST_QDRANT_URL")
    if not url:
        pytest.skip(
            "MEMLEDGER_TEST_QDRANT_URL is not set: no Qdrant server on this machine "
            "(set it, e.g. http://localhost:6333, to run the contract against a server)"
        )
    return url


@pytest.fixture(params=["qdrant-local", "qdrant-edge", "remote", "qdrant-server"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind: str = request.param
    if kind == "qdrant-local":
        local = QdrantClientIndex.for_path(tmp_path / "qdrant", COLLECTION)
        yield Harness(local, local)
        local.close()
    elif kind == "qdrant-edge":
        edge = QdrantEdgeIndex(tmp_path / "edge", COLLECTION)
        yield Harness(edge, edge)
        edge.close()
    elif kind == "remote":
        owner = QdrantClientIndex.for_path(tmp_path / "qdrant", COLLECTION)
        server = VectorQueryServer(owner)
        server.start()
        yield Harness(owner, RemoteVectorIndex(server.url, COLLECTION))
        server.stop()
        owner.close()
    else:
        remote = QdrantClientIndex.for_url(_qdrant_server_url(), f"memledger_test_{uuid.uuid4().hex}")
        yield Harness(remote, remote)
        remote.drop_collection()
        remote.close()


Opener = Callable[[Path], VectorIndex]
ON_DISK: dict[str, Opener] = {
    "qdrant-local": lambda path: QdrantClientIndex.for_path(path, COLLECTION),
    "qdrant-edge": lambda path: QdrantEdgeIndex(path, COLLECTION),
}


@pytest.fixture(params=sorted(ON_DISK))
def open_on_disk(request: pytest.FixtureRequest) -> Opener:
    """Opens an on-disk engine at a path (the caller closes it)."""
    return ON_DISK[request.param]


def mid() -> str:
    return str(uuid7())


def point(
    vector: Sequence[float],
    *,
    memory_id: str | None = None,
    subject: str = "s1",
    purpose: str = "chat",
    status: str = "active",
    scope_key: str = "subject:s1",
    kind: str = "episodic",
    expires_at: float | None = None,
    derived_from: Sequence[str] = (),
    **extra: Any,
) -> VectorPoint:
    memory_id = memory_id or mid()
    scope_type, _, scope_id = scope_key.partition(":")
    payload = {
        "memory_id": memory_id,
        "subject_id": subject,
        "purpose": purpose,
        "scope_type": scope_type,
        "scope_id": scope_id,
        "scope_key": scope_key,
        "kind": kind,
        "status": status,
        "revision": 1,
        "expires_at": expires_at,
        "model": "test-model",
        "derived_from": list(derived_from),
        "content_hmac": None,
        **extra,
    }
    return VectorPoint(memory_id=memory_id, vector=tuple(float(x) for x in vector), payload=payload)


def unit(vector: Sequence[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector)


def ids_of(hits: Sequence[Any]) -> list[str]:
    return [h.memory_id for h in hits]


Q = (1.0, 0.0, 0.0, 0.0)


# --- collection lifecycle -----------------------------------------------------------


def test_ensure_collection_is_idempotent(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    harness.writer.ensure_collection(DIM)
    harness.writer.upsert([point(Q)])
    harness.writer.ensure_collection(DIM)
    assert harness.reader.count() == 1


def test_ensure_collection_with_another_dim_fails(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    harness.writer.upsert([point(Q)])
    with pytest.raises(VectorIndexError, match="exists with"):
        harness.writer.ensure_collection(8)
    assert harness.reader.count() == 1  # still usable as it was


def test_drop_collection(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    harness.writer.upsert([point(Q), point((0.0, 1.0, 0.0, 0.0))])
    harness.writer.drop_collection()
    with pytest.raises(VectorIndexError):
        harness.reader.count()
    harness.writer.drop_collection()  # absent: no-op
    harness.writer.ensure_collection(8)  # may come back with another dimension
    assert harness.reader.count() == 0


# --- writes and reads ------------------------------------------------------------------


def test_upsert_then_retrieve(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    p = point((3.0, 4.0, 0.0, 0.0), expires_at=NOW + 60, derived_from=[mid()])
    harness.writer.upsert([p])
    absent = mid()
    got = harness.reader.retrieve([p.memory_id, absent])
    assert set(got) == {p.memory_id}
    assert got[p.memory_id].memory_id == p.memory_id
    assert got[p.memory_id].payload == p.payload
    # cosine: the engines keep the L2-normalised vector
    assert got[p.memory_id].vector == pytest.approx(unit(p.vector))
    assert harness.reader.retrieve([]) == {}


def test_vectors_are_retrieve_without_payloads(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    p, q = point((3.0, 4.0, 0.0, 0.0)), point((0.0, 0.0, 2.0, 0.0))
    harness.writer.upsert([p, q])
    absent = mid()
    got = harness.reader.vectors([p.memory_id, q.memory_id, absent])
    assert set(got) == {p.memory_id, q.memory_id}
    full = harness.reader.retrieve([p.memory_id, q.memory_id])
    for memory_id, vector in got.items():
        assert all(isinstance(x, float) for x in vector)
        assert vector == pytest.approx(full[memory_id].vector)
    assert got[p.memory_id] == pytest.approx(unit(p.vector))
    assert harness.reader.vectors([]) == {}


def test_search_reads_only_the_payload_keys_asked_for(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    p = point(Q, derived_from=[mid()])
    harness.writer.upsert([p])
    [whole] = harness.reader.search(Q, VectorFilter("s1"), limit=5)
    [some] = harness.reader.search(Q, VectorFilter("s1"), limit=5, payload_keys=("kind", "derived_from", "absent"))
    [none] = harness.reader.search(Q, VectorFilter("s1"), limit=5, payload_keys=())
    assert whole.payload == p.payload
    assert some.payload == {"kind": p.payload["kind"], "derived_from": p.payload["derived_from"]}
    assert none.payload == {}
    assert some.memory_id == none.memory_id == p.memory_id and some.score == pytest.approx(whole.score)


def test_upsert_same_id_twice_replaces(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    first = point(Q, extra_key="old")
    harness.writer.upsert([first])
    harness.writer.upsert([first])
    second = point((0.0, 1.0, 0.0, 0.0), memory_id=first.memory_id, kind="semantic")
    harness.writer.upsert([second])
    assert harness.reader.count() == 1
    got = harness.reader.retrieve([first.memory_id])[first.memory_id]
    assert got.payload == second.payload  # whole payload replaced: extra_key gone
    assert got.vector == pytest.approx(second.vector)


def test_delete_is_idempotent(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    keep, gone = point(Q), point((0.0, 1.0, 0.0, 0.0))
    harness.writer.upsert([keep, gone])
    harness.writer.delete([gone.memory_id])
    harness.writer.delete([gone.memory_id, mid()])
    harness.writer.delete([])
    assert harness.reader.count() == 1
    assert set(harness.reader.retrieve([keep.memory_id, gone.memory_id])) == {keep.memory_id}


def test_count(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    assert harness.reader.count() == 0
    harness.writer.upsert([point(Q, subject=f"s{i}") for i in range(5)])
    assert harness.reader.count() == 5


def test_scroll_ids_by_subject(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    mine = [point((1.0, float(i), 0.0, 0.0), subject="s1") for i in range(300)]  # more than one page
    theirs = [point(Q, subject="s2") for _ in range(3)]
    harness.writer.upsert(mine + theirs)
    assert sorted(harness.reader.scroll_ids("s1")) == sorted(p.memory_id for p in mine)
    assert sorted(harness.reader.scroll_ids("s2")) == sorted(p.memory_id for p in theirs)
    assert len(harness.reader.scroll_ids()) == 303
    assert harness.reader.scroll_ids("nobody") == []


def test_find_derived_from(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    x, y = point(Q), point((0.0, 1.0, 0.0, 0.0))
    a = point(Q, derived_from=[x.memory_id])
    b = point(Q, derived_from=[x.memory_id, y.memory_id])
    c = point(Q)
    harness.writer.upsert([x, y, a, b, c])
    assert sorted(harness.reader.find_derived_from([x.memory_id])) == sorted([a.memory_id, b.memory_id])
    assert harness.reader.find_derived_from([y.memory_id]) == [b.memory_id]
    assert sorted(harness.reader.find_derived_from([y.memory_id, x.memory_id])) == sorted([a.memory_id, b.memory_id])
    assert harness.reader.find_derived_from([mid()]) == []
    assert harness.reader.find_derived_from([]) == []


# --- search and filters ----------------------------------------------------------------


def test_search_ranks_nearest_first(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    far = point((0.0, 0.0, 1.0, 0.0))
    near = point((1.0, 0.1, 0.0, 0.0))
    mid_ = point((1.0, 1.0, 0.0, 0.0))
    exact = point((2.0, 0.0, 0.0, 0.0))
    harness.writer.upsert([far, mid_, near, exact])
    hits = harness.reader.search(Q, VectorFilter(subject_id="s1"), limit=10)
    assert ids_of(hits) == [exact.memory_id, near.memory_id, mid_.memory_id, far.memory_id]
    assert hits[0].score == pytest.approx(1.0)
    assert hits[2].score == pytest.approx(1 / math.sqrt(2))
    assert hits[3].score == pytest.approx(0.0, abs=1e-6)
    assert hits[0].payload == exact.payload
    assert ids_of(harness.reader.search(Q, VectorFilter(subject_id="s1"), limit=2)) == [
        exact.memory_id,
        near.memory_id,
    ]


def _search_ids(h: Harness, flt: VectorFilter) -> set[str]:
    return set(ids_of(h.reader.search(Q, flt, limit=50)))


def test_filter_by_subject_and_purpose(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    s1_chat, s1_work, s2_chat = point(Q), point(Q, purpose="work"), point(Q, subject="s2")
    harness.writer.upsert([s1_chat, s1_work, s2_chat])
    assert _search_ids(harness, VectorFilter("s1")) == {s1_chat.memory_id, s1_work.memory_id}
    assert _search_ids(harness, VectorFilter("s2")) == {s2_chat.memory_id}
    assert _search_ids(harness, VectorFilter("s1", purpose="work")) == {s1_work.memory_id}
    assert _search_ids(harness, VectorFilter("s3")) == set()


def test_filter_by_statuses(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    active, superseded, forgotten = point(Q), point(Q, status="superseded"), point(Q, status="forgotten")
    harness.writer.upsert([active, superseded, forgotten])
    assert _search_ids(harness, VectorFilter("s1")) == {active.memory_id}  # default: active only
    both = VectorFilter("s1", statuses=("active", "superseded"))
    assert _search_ids(harness, both) == {active.memory_id, superseded.memory_id}
    assert _search_ids(harness, VectorFilter("s1", statuses=())) == set()


def test_filter_by_scope_keys(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    doc = point(Q, scope_key="document:D")
    ws = point(Q, scope_key="workspace:W")
    subj = point(Q, scope_key="subject:s1")
    harness.writer.upsert([doc, ws, subj])
    assert _search_ids(harness, VectorFilter("s1", scope_keys=("document:D", "subject:s1"))) == {
        doc.memory_id,
        subj.memory_id,
    }
    assert _search_ids(harness, VectorFilter("s1", scope_keys=("workspace:W",))) == {ws.memory_id}
    assert _search_ids(harness, VectorFilter("s1", scope_keys=("document:other",))) == set()
    assert len(_search_ids(harness, VectorFilter("s1", scope_keys=None))) == 3


def test_filter_by_kinds(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    episodic, semantic, summary = point(Q), point(Q, kind="semantic"), point(Q, kind="summary")
    harness.writer.upsert([episodic, semantic, summary])
    assert _search_ids(harness, VectorFilter("s1", kinds=("semantic", "summary"))) == {
        semantic.memory_id,
        summary.memory_id,
    }
    assert _search_ids(harness, VectorFilter("s1", kinds=("episodic",))) == {episodic.memory_id}
    assert _search_ids(harness, VectorFilter("s1", kinds=())) == set()


def test_filter_not_expired_at(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    never = point(Q)  # expires_at null
    absent = point(Q)
    absent = VectorPoint(
        absent.memory_id, absent.vector, {k: v for k, v in absent.payload.items() if k != "expires_at"}
    )
    expired = point(Q, expires_at=NOW - 1)
    expiring_now = point(Q, expires_at=NOW)
    later = point(Q, expires_at=NOW + 0.5)
    harness.writer.upsert([never, absent, expired, expiring_now, later])
    alive = _search_ids(harness, VectorFilter("s1", not_expired_at=NOW))
    assert alive == {never.memory_id, absent.memory_id, later.memory_id}
    assert len(_search_ids(harness, VectorFilter("s1"))) == 5  # clause off


def test_filters_combine(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    hit = point(Q, purpose="work", kind="semantic", scope_key="document:D", expires_at=NOW + 10)
    misses = [
        point(Q, purpose="chat", kind="semantic", scope_key="document:D"),
        point(Q, purpose="work", kind="episodic", scope_key="document:D"),
        point(Q, purpose="work", kind="semantic", scope_key="workspace:W"),
        point(Q, purpose="work", kind="semantic", scope_key="document:D", expires_at=NOW - 10),
        point(Q, purpose="work", kind="semantic", scope_key="document:D", status="forgotten"),
        point(Q, purpose="work", kind="semantic", scope_key="document:D", subject="s2"),
    ]
    harness.writer.upsert([hit, *misses])
    flt = VectorFilter("s1", purpose="work", scope_keys=("document:D",), not_expired_at=NOW, kinds=("semantic",))
    assert ids_of(harness.reader.search(Q, flt, limit=10)) == [hit.memory_id]


def test_filter_is_applied_before_the_limit(harness: Harness) -> None:
    """Inside the engine: the nearest points are filtered out, yet ``limit`` results come back."""
    harness.writer.ensure_collection(DIM)
    decoys = [point(Q, subject="s2") for _ in range(20)]
    wanted = [point((1.0, 1.0, float(i), 0.0)) for i in range(3)]
    harness.writer.upsert(decoys + wanted)
    hits = harness.reader.search(Q, VectorFilter("s1"), limit=3)
    assert ids_of(hits) == [p.memory_id for p in wanted]


def test_set_payload_updates_given_keys_only(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    p, other = point(Q), point(Q)
    harness.writer.upsert([p, other])
    assert p.memory_id in _search_ids(harness, VectorFilter("s1"))
    harness.writer.set_payload(p.memory_id, {"status": "forgotten", "revision": 2})
    assert _search_ids(harness, VectorFilter("s1")) == {other.memory_id}
    assert _search_ids(harness, VectorFilter("s1", statuses=("forgotten",))) == {p.memory_id}
    got = harness.reader.retrieve([p.memory_id])[p.memory_id]
    assert got.payload == {**p.payload, "status": "forgotten", "revision": 2}
    assert got.vector == pytest.approx(p.vector)
    harness.writer.set_payload(p.memory_id, {"expires_at": NOW})
    assert _search_ids(harness, VectorFilter("s1", statuses=("forgotten",), not_expired_at=NOW)) == set()


def test_set_payload_on_absent_point_is_a_no_op(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    harness.writer.upsert([point(Q)])
    ghost = mid()
    harness.writer.set_payload(ghost, {"status": "forgotten"})
    assert harness.reader.count() == 1
    assert harness.reader.retrieve([ghost]) == {}


def test_ids_must_be_uuids(harness: Harness) -> None:
    harness.writer.ensure_collection(DIM)
    with pytest.raises(VectorIndexError, match="not-a-uuid"):
        harness.writer.upsert([point(Q, memory_id="not-a-uuid")])
    with pytest.raises(VectorIndexError, match="not-a-uuid"):
        harness.reader.retrieve(["not-a-uuid"])


# --- on-disk engines: persistence and ownership -----------------------------------------


def test_persistence_across_close_and_reopen(open_on_disk: Opener, tmp_path: Path) -> None:
    index = open_on_disk(tmp_path / "store")
    index.ensure_collection(DIM)
    kept, gone = point(Q, derived_from=[mid()]), point((0.0, 1.0, 0.0, 0.0))
    index.upsert([kept, gone, point(Q, subject="s2")])
    index.delete([gone.memory_id])
    index.set_payload(kept.memory_id, {"kind": "semantic"})
    index.close()
    index.close()  # idempotent
    with pytest.raises(VectorIndexError, match="closed"):
        index.count()

    reopened = open_on_disk(tmp_path / "store")
    try:
        assert reopened.count() == 2  # readable before ensure_collection
        with pytest.raises(VectorIndexError, match="exists with"):
            reopened.ensure_collection(8)  # checked against the stored config
        assert reopened.count() == 2
        reopened.ensure_collection(DIM)
        assert reopened.retrieve([kept.memory_id])[kept.memory_id].payload == {**kept.payload, "kind": "semantic"}
        assert ids_of(reopened.search(Q, VectorFilter("s1", kinds=("semantic",)), limit=5)) == [kept.memory_id]
        assert reopened.find_derived_from(list(kept.payload["derived_from"])) == [kept.memory_id]
        with pytest.raises(VectorIndexError):
            reopened.ensure_collection(8)
        assert reopened.count() == 2
    finally:
        reopened.close()


def test_compact_keeps_live_points_and_leaves_no_byte_of_a_deleted_payload(
    open_on_disk: Opener, tmp_path: Path
) -> None:
    index = open_on_disk(tmp_path / "store")
    try:
        index.ensure_collection(DIM)
        kept = point(Q, derived_from=[mid()], marker="kept-payload-7f3a")
        gone = point((0.0, 1.0, 0.0, 0.0), marker="deleted-payload-9c1e")
        index.upsert([kept, gone])
        index.delete([gone.memory_id])
        assert "rewrote" in index.compact()
        assert index.retrieve([kept.memory_id])[kept.memory_id].payload == kept.payload
        assert ids_of(index.search(Q, VectorFilter("s1"), limit=5)) == [kept.memory_id]
        index.upsert([point(Q)])  # still writable
        assert index.count() == 2
    finally:
        index.close()
    files = [f for f in (tmp_path / "store").rglob("*") if f.is_file()]
    assert files, "the engine wrote nothing: the byte search would prove nothing"
    assert [f for f in files if b"kept-payload-7f3a" in f.read_bytes()]
    assert [f.name for f in files if b"deleted-payload-9c1e" in f.read_bytes()] == []
    reopened = open_on_disk(tmp_path / "store")
    try:
        assert reopened.count() == 2
    finally:
        reopened.close()


def test_second_opener_in_this_process_is_refused(open_on_disk: Opener, tmp_path: Path) -> None:
    first = open_on_disk(tmp_path / "store")
    try:
        with pytest.raises(VectorIndexError, match=f"another open index in this process \\(pid {os.getpid()}\\)"):
            open_on_disk(tmp_path / "store")
    finally:
        first.close()
    open_on_disk(tmp_path / "store").close()  # released on close


_CHILD = """
import sys
from projections.qdrant_client_index import QdrantClientIndex
from projections.qdrant_edge_index import QdrantEdgeIndex
from projections.vector_index import VectorIndexError
kind, path = sys.argv[1], sys.argv[2]
try:
    if kind == "qdrant-local":
        index = QdrantClientIndex.for_path(path, "memories")
    else:
        index = QdrantEdgeIndex(path, "memories")
except VectorIndexError as exc:
    print(exc)
    sys.exit(3)
print(index.count())
index.close()
"""


@pytest.mark.parametrize("kind", sorted(ON_DISK))
def test_second_process_is_refused_with_a_clear_error(kind: str, tmp_path: Path) -> None:
    def child() -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-c", _CHILD, kind, str(tmp_path / "store")]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)

    owner = ON_DISK[kind](tmp_path / "store")
    try:
        owner.ensure_collection(DIM)
        owner.upsert([point(Q)])
        refused = child()
        assert refused.returncode == 3, refused.stderr
        assert f"owned by another process (pid {os.getpid()})" in refused.stdout
        assert owner.count() == 1  # the owner is unharmed
    finally:
        owner.close()
    done = child()
    assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr


# --- remote specifics ---------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[QdrantClientIndex, VectorQueryServer]]:
    owner = QdrantClientIndex.for_path(tmp_path / "qdrant", COLLECTION)
    owner.ensure_collection(DIM)
    with VectorQueryServer(owner) as server:
        yield owner, server
    owner.close()


def test_remote_refuses_writes(served: tuple[QdrantClientIndex, VectorQueryServer]) -> None:
    _, server = served
    remote = RemoteVectorIndex(server.url, COLLECTION)
    p = point(Q)
    writes: list[Callable[[], None]] = [
        lambda: remote.ensure_collection(DIM),
        lambda: remote.upsert([p]),
        lambda: remote.set_payload(p.memory_id, {"status": "forgotten"}),
        lambda: remote.delete([p.memory_id]),
        remote.drop_collection,
        remote.compact,
    ]
    for write in writes:
        with pytest.raises(VectorIndexError, match=f"read-only: .*owned by the process serving {server.url}"):
            write()


def test_remote_reports_server_errors(served: tuple[QdrantClientIndex, VectorQueryServer]) -> None:
    owner, server = served
    with pytest.raises(VectorIndexError, match="'elsewhere' is not served here"):
        RemoteVectorIndex(server.url, "elsewhere").count()
    owner.drop_collection()  # the owner's engine now fails: the message travels back
    with pytest.raises(VectorIndexError, match=f"collection '{COLLECTION}'"):
        RemoteVectorIndex(server.url, COLLECTION).count()


def test_remote_rejects_malformed_requests(served: tuple[QdrantClientIndex, VectorQueryServer]) -> None:
    _, server = served
    request = urllib.request.Request(
        f"{server.url}/v1/collections/{COLLECTION}/search", data=b'{"vector": "x"}', method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(request, timeout=5)
    error = caught.value
    try:
        assert error.code == 400
        assert b"vector must be a list of numbers" in error.read()
    finally:
        error.close()


def test_remote_unreachable_names_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"  # nothing listens there any more
    with pytest.raises(VectorIndexUnreachableError, match=f"cannot reach vector query server at {url}"):
        RemoteVectorIndex(url, COLLECTION, timeout_s=2.0).count()


def test_qdrant_server_unreachable_is_told_apart() -> None:
    """A Qdrant URL nothing listens on: every call raises VectorIndexUnreachableError (a
    VectorIndexError), which the vectors projection waits out rather than failing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    index = QdrantClientIndex.for_url(f"http://127.0.0.1:{port}", COLLECTION)
    try:
        for call in (lambda: index.ensure_collection(DIM), index.count, lambda: index.delete([str(uuid7())])):
            with pytest.raises(VectorIndexUnreachableError, match="Qdrant unreachable") as info:
                call()
            assert isinstance(info.value, VectorIndexError) and info.value.collection == COLLECTION
    finally:
        index.close()
