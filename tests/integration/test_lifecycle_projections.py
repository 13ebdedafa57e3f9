"""The read side of the memory lifecycle (issue 3) on the real stores: reinforcement,
conflicts, revocation, expiry and regenerated summaries in facts, vectors and summaries;
recall's key guard, summary grouping and uncacheable classes; and a replay from offset 0
with the keys destroyed that equals live processing row for row."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import utc_now
from ledger import state
from ledger.crypto import Keyring
from projections.base import ContentAccess
from projections.cache import CacheProjection, RecallCache
from projections.conflicts import list_conflicts
from projections.embedding import build_embedder
from projections.facts import FactsProjection, FactsTables
from projections.qdrant_client_index import QdrantClientIndex
from projections.recall import Recall, RecallResult
from projections.summaries import SummariesProjection
from projections.vectors import VectorsProjection
from tests.builders import PURPOSE, later
from tests.integration.lifecycle_stage import READER, Stage, ids

pytestmark = pytest.mark.integration

TABLES = FactsTables(1)


class World:
    """The projections, recall and cache of one test, on a fresh database."""

    def __init__(self, pool: Any, keyring: Keyring, redis_client: Any, tmp: Path) -> None:
        with pool.connection() as conn:
            state.install(conn)
            Keyring.install(conn)
        content = ContentAccess(pool, keyring)
        self.pool = pool
        self.index = QdrantClientIndex.for_path(str(tmp / "qdrant"), "memories_v1")
        embedder = build_embedder("hashing")
        self.facts = FactsProjection(pool, content)
        self.summaries = SummariesProjection(pool, content)
        self.vectors = VectorsProjection(pool, self.index, embedder, content)
        self.cache = RecallCache(redis_client)
        self.recall_ = Recall(pool, self.index, embedder, self.cache)
        cache = CacheProjection(pool, self.cache)
        self.stage = Stage(pool, keyring, [self.facts, self.summaries, self.vectors, cache])

    def recall(self, query: str, recall: Recall | None = None, **kw: Any) -> RecallResult:
        return (recall or self.recall_).recall(READER, "alice", PURPOSE, query, utc_now(), **kw)

    def row(self, sql: str, *params: Any) -> Any:
        with self.pool.connection() as conn:
            return conn.execute(sql, params).fetchone()

    def payload(self, memory_id: str) -> dict[str, Any] | None:
        point = self.index.retrieve([memory_id]).get(memory_id)
        return None if point is None else dict(point.payload)


@pytest.fixture
def world(pool: Any, keyring: Keyring, redis_client: Any, tmp_path: Path) -> Iterator[World]:
    w = World(pool, keyring, redis_client, tmp_path)
    yield w
    w.index.close()


def test_reinforcement_raises_confidence_and_revision_and_is_revision_guarded(world: World) -> None:
    s = world.stage
    m = s.write("Alice prefers short answers", confidence=0.7)
    s.reinforce(m, 0.85)
    assert world.row("SELECT confidence, revision, status FROM facts_v1 WHERE memory_id = %s", m) == (
        0.85,
        2,
        "active",
    )
    assert world.row("SELECT event_type FROM facts_history_v1 WHERE memory_id = %s AND revision = 2", m) == (
        "MemoryReinforced",
    )
    payload = world.payload(m)
    assert payload is not None and payload["revision"] == 2 and payload["status"] == "active"
    s.revisions[m] = 1  # an older revision arriving late changes nothing
    s.reinforce(m, 0.1)
    assert world.row("SELECT confidence, revision FROM facts_v1 WHERE memory_id = %s", m) == (0.85, 2)


def test_conflict_marks_members_hides_them_from_recall_and_is_open_until_resolved(world: World) -> None:
    s = world.stage
    a = s.write("Alice wants short answers", key="answer_length", provenance={"source_ref": "chat-1"})
    b = s.write("Alice wants long answers", key="answer_length", veracity="tool", provenance={"source_ref": "crm"})
    cid = s.conflict(a, b)
    for m in (a, b):
        assert world.row("SELECT status, revision FROM facts_v1 WHERE memory_id = %s", m) == ("needs_confirmation", 2)
        payload = world.payload(m)
        assert payload is not None and payload["status"] == "needs_confirmation"
    assert ids(world.recall("answers")) == []
    unconfirmed = world.recall("answers", include_unconfirmed=True).items
    assert {i.memory_id for i in unconfirmed} == {a, b}
    assert all(i.needs_confirmation and i.conflicts == [cid] for i in unconfirmed)

    [conflict] = list_conflicts(world.pool, TABLES, "alice")
    assert conflict.conflict_id == cid and conflict.open and conflict.key == "answer_length"
    members = {m.memory_id: m for m in conflict.members}
    assert members[a].content == "Alice wants short answers" and members[a].source["source_ref"] == "chat-1"
    assert members[b].veracity == "tool" and members[b].status == "needs_confirmation"
    assert list_conflicts(world.pool, TABLES, "bob") == []

    s.supersede(b, a)
    s.confirm(a)
    assert list_conflicts(world.pool, TABLES, "alice") == []
    [closed] = list_conflicts(world.pool, TABLES, "alice", include_resolved=True)
    assert not closed.open and {m.memory_id: m.status for m in closed.members} == {a: "active", b: "superseded"}
    assert json.loads(json.dumps(closed.to_dict()))["members"][0]["memory_id"] == a
    assert ids(world.recall("answers")) == [a]
    assert world.recall("answers").items[0].conflicts == []


def test_revocation_nulls_content_removes_the_point_and_drops_derived_summaries(world: World) -> None:
    s = world.stage
    kept = s.write("Alice uses vim")
    gone = s.write("Alice lives at 12 Elm Street", provenance={"consent_ref": "c-1"})
    s.write("Alice: vim, Elm Street", kind="summary", provenance={"derived_from": [kept, gone]})
    s.revoke(gone)
    assert world.row("SELECT status, content, revision FROM facts_v1 WHERE memory_id = %s", gone) == (
        "revoked",
        None,
        2,
    )
    assert world.row("SELECT count(*) FROM facts_v1 WHERE tsv @@ to_tsquery('english', 'elm')") == (0,)
    assert world.payload(gone) is None
    assert world.row("SELECT count(*) FROM summaries_v1") == (0,)
    assert gone not in ids(world.recall("Elm Street", include_unconfirmed=True))


def test_expiry_by_date_expires_and_consent_grace_only_bumps_the_revision(world: World) -> None:
    s = world.stage
    soon = s.write("Alice is in Lisbon this week", retention={"basis": "session", "expires_at": later(1)})
    revoked = s.write("Alice's badge number is 42", provenance={"consent_ref": "c-1"})
    s.write("Alice: Lisbon", kind="summary", provenance={"derived_from": [soon]})
    s.expire(soon)
    assert world.row("SELECT status, content, revision FROM facts_v1 WHERE memory_id = %s", soon) == (
        "expired",
        None,
        2,
    )
    assert world.payload(soon) is None and world.row("SELECT count(*) FROM summaries_v1") == (0,)
    s.revoke(revoked)
    s.expire(revoked, reason="consent_grace")
    assert world.row("SELECT status, content, revision FROM facts_v1 WHERE memory_id = %s", revoked) == (
        "revoked",
        None,
        3,
    )
    assert world.row("SELECT status FROM facts_history_v1 WHERE memory_id = %s AND revision = 3", revoked) == (
        "revoked",
    )


def test_regenerated_summary_replaces_the_old_one_and_survives_the_invalidation(world: World) -> None:
    s = world.stage
    a = s.write("Alice uses vim")
    b = s.write("Alice uses tmux")
    c = s.write("Alice uses zsh")
    old = s.write("Alice: vim, tmux, zsh", kind="summary", provenance={"derived_from": [a, b, c]})
    other = s.write("Alice: tmux, zsh", kind="summary", provenance={"derived_from": [b, c]})
    s.supersede(a, b)  # invalidates old
    new = s.write("Alice: tmux, zsh (again)", kind="summary", provenance={"derived_from": [b, c]}, replaces=old)
    s.supersede(old, new)  # the ledger's own invalidation of the replaced summary
    rows = world.row("SELECT array_agg(memory_id ORDER BY memory_id) FROM summaries_v1")[0]
    assert sorted(rows) == sorted([other, new])
    # replaces also drops a replaced summary that is still there
    newer = s.write("Alice: tmux and zsh", kind="summary", provenance={"derived_from": [b, c]}, replaces=other)
    rows = world.row("SELECT array_agg(memory_id ORDER BY memory_id) FROM summaries_v1")[0]
    assert sorted(rows) == sorted([new, newer])
    assert world.payload(new) is None  # summaries stay out of the vector index


def test_recall_returns_one_active_answer_per_key(world: World) -> None:
    s = world.stage
    # two active memories for one key: what a projection can show in the middle of a batch
    first = s.write("Alice wants answers in French", key="language")
    second = s.write("Alice wants answers in German", key="language")
    other = s.write("Alice wants answers with examples", key="style")
    got = world.recall("Alice wants answers", include_summaries=False).items
    language = [i for i in got if i.key == "language"]
    assert len(language) == 1 and language[0].memory_id in (first, second)
    assert other in [i.memory_id for i in got]


def test_recall_groups_a_summary_with_its_sources(world: World) -> None:
    s = world.stage
    a = s.write("Alice deploys with Kubernetes")
    b = s.write("Alice deploys on Fridays")
    lone = s.write("Alice deploys rarely")
    summary = s.write("Alice deploys with Kubernetes on Fridays", kind="summary", provenance={"derived_from": [a, b]})
    result = world.recall("Alice deploys Kubernetes Fridays", k=2)
    assert len(result.items) == 2
    top = {i.memory_id: i for i in result.items}
    assert summary in top and {g.memory_id for g in top[summary].grouped} == {a, b}
    assert top[summary].kind == "summary" and top[summary].status == "active"
    assert top[summary].derived_from == [a, b] and "summary_fts" in top[summary].matched_by
    assert top[summary].provenance["writer"] == "agent"
    assert lone in top  # k counts top-level items: the sources take no places
    flat = world.recall("Alice deploys Kubernetes Fridays", include_summaries=False)
    assert summary not in ids(flat) and all(not i.grouped for i in flat.items)
    assert {a, b} <= set(ids(flat))
    cached = world.recall("Alice deploys Kubernetes Fridays", k=2)
    assert cached.cached and ids(cached) == ids(result)
    assert {g.memory_id for g in cached.items[ids(cached).index(summary)].grouped} == {a, b}


def test_results_with_an_uncacheable_class_are_never_stored(world: World) -> None:
    s = world.stage
    s.write("Alice's salary band is B", sensitivity="personal")
    restricted_source = s.write("Alice's diagnosis is private", sensitivity="restricted")
    s.write("Alice: private notes", kind="summary", provenance={"derived_from": [restricted_source]})
    strict = Recall(
        world.pool, world.index, build_embedder("hashing"), world.cache, uncacheable=frozenset({"personal"})
    )
    assert world.recall("salary band", recall=strict, k=1).items[0].sensitivity == "personal"
    assert world.cache.entries("alice") == []
    assert not world.recall("salary band", recall=strict, k=1).cached
    world.recall("salary band", k=1)  # personal is cacheable by default
    assert len(world.cache.entries("alice")) == 1
    result = world.recall("Alice private diagnosis notes")  # a restricted source grouped under a summary
    assert any(g.sensitivity == "restricted" for i in result.items for g in i.members())
    assert len(world.cache.entries("alice")) == 1


def _snapshot(world: World) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with world.pool.connection() as conn:
        for table, order in (
            ("facts_v1", "memory_id"),
            ("facts_history_v1", "memory_id, revision"),
            ("facts_conflicts_v1", "conflict_id"),
            ("summaries_v1", "memory_id"),
        ):
            out[table] = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
    points = world.index.retrieve(world.index.scroll_ids())
    out["vectors"] = {m: (dict(p.payload), p.vector) for m, p in points.items()}
    return out


def test_replay_with_destroyed_keys_equals_live_row_for_row(world: World) -> None:
    s = world.stage
    a = s.write("Alice wants short answers", key="answer_length", provenance={"source_ref": "chat"})
    b = s.write("Alice wants long answers", key="answer_length", veracity="tool", provenance={"source_ref": "crm"})
    s.conflict(a, b)
    s.supersede(b, a)
    s.confirm(a)
    open_a = s.write("Alice likes tea", key="drink", veracity="inferred", provenance={"source_ref": "x"})
    open_b = s.write("Alice likes coffee", key="drink", veracity="tool", provenance={"source_ref": "y"})
    s.conflict(open_a, open_b)
    vim = s.write("Alice uses vim", confidence=0.6)
    s.reinforce(vim, 0.8)
    phone = s.write("Alice's phone is 555-0100, call after 6pm", provenance={"consent_ref": "c-1"})
    s.redact(phone, "Alice prefers calls after 6pm")
    trip = s.write("Alice is in Lisbon", retention={"basis": "session", "expires_at": later(2)})
    inference = s.write("Alice is an engineer", kind="inference", confirmed=False, provenance={"derived_from": [vim]})
    old = s.write("Alice: vim, calls after 6pm", kind="summary", provenance={"derived_from": [vim, phone]})
    s.write("Alice: Lisbon, vim", kind="summary", provenance={"derived_from": [trip, vim]})
    s.revoke(phone)
    new = s.write("Alice: vim", kind="summary", provenance={"derived_from": [vim]}, replaces=old)
    s.supersede(old, new)
    s.expire(trip)
    s.expire(phone, reason="consent_grace")
    secret = s.write("Alice's locker code is 4711")
    s.erase(secret)
    live = _snapshot(world)
    assert live["facts_v1"] and live["facts_history_v1"] and len(live["facts_conflicts_v1"]) == 2
    assert live["vectors"] and set(live["vectors"]) == {a, open_a, open_b, vim, inference}
    assert [r[0] for r in live["summaries_v1"]] == [new]

    s.replay()
    replayed = _snapshot(world)
    for name in live:
        assert replayed[name] == live[name], name
    assert world.row(
        "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%555-0100%%' OR content LIKE '%%Lisbon%%'"
    ) == (0,)


def test_a_summary_of_a_summary_is_not_recalled_once_a_source_below_expired(world: World) -> None:
    s = world.stage
    soon = utc_now() + timedelta(minutes=5)
    a = s.write("Alice runs the Tuesday standup", retention={"expires_at": soon})
    b = s.write("Alice writes the release notes")
    inner = s.write("Alice: standup, release notes", kind="summary", provenance={"derived_from": [a, b]})
    outer = s.write("Alice leads the team rituals", kind="summary", provenance={"derived_from": [inner]})
    query = "Alice standup release notes team rituals"
    assert outer in ids(world.recall(query))
    later = utc_now() + timedelta(minutes=10)  # a expired, not swept yet
    result = world.recall_.recall(READER, "alice", PURPOSE, query, later)
    assert inner not in ids(result) and outer not in ids(result)
    assert b in ids(result)
