"""Every projection against its real store (Postgres, Redis, Qdrant local engine),
driven by the ledger through the Postgres event log and in-process runners."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from contracts import (
    EraseMemories,
    MemoryConfirmed,
    MemorySuperseded,
    RedactMemory,
    RevokeConsent,
    utc_now,
)
from ledger.eventlog import LogPosition
from projections.trace import trace
from tests.builders import PURPOSE, later, memory_write
from tests.integration.conftest import one, recall_ids
from workers.bootstrap import PROJECTION_NAMES, Services

pytestmark = pytest.mark.integration


def test_facts_row_history_and_full_text(svc: Services) -> None:
    r = svc.ledger.write(svc.principal(), memory_write(content="Alice deploys with Kubernetes"))
    svc.catch_up()
    row = one(
        svc,
        "SELECT status, revision, content, tsv @@ to_tsquery('english', 'kubernetes') FROM facts_v1"
        " WHERE memory_id = %s",
        r.memory_id,
    )
    assert row == ("active", 1, "Alice deploys with Kubernetes", True)
    assert one(svc, "SELECT event_type FROM facts_history_v1 WHERE memory_id = %s", r.memory_id) == "MemoryWritten"


def test_applying_a_record_twice_or_an_older_revision_changes_nothing(svc: Services) -> None:
    r = svc.ledger.write(svc.principal(), memory_write())
    svc.catch_up()
    facts = svc.projections["facts"]
    written = r.events[0]
    before = one(svc, "SELECT count(*), max(revision) FROM facts_history_v1")
    facts.apply(written, r.positions[0])  # same position again: already applied
    assert one(svc, "SELECT count(*), max(revision) FROM facts_history_v1") == before
    env = {"subject_id": "alice", "producer": "test", "correlation_id": "c", "occurred_at": utc_now()}
    facts.apply(MemoryConfirmed(event_id="e3", memory_id=r.memory_id, revision=3, **env), LogPosition(0, 100))
    facts.apply(
        MemorySuperseded(event_id="e2", memory_id=r.memory_id, revision=2, superseded_by=str(uuid.uuid4()), **env),
        LogPosition(0, 101),
    )
    assert one(svc, "SELECT status, revision FROM facts_v1 WHERE memory_id = %s", r.memory_id) == ("active", 3)


def test_vectors_payload_and_lifecycle(svc: Services) -> None:
    p = svc.principal()
    r = svc.ledger.write(
        p, memory_write(content="Alice likes Rust", retention={"expires_at": later(), "basis": "consent"})
    )
    svc.catch_up()
    assert svc.index is not None
    point = svc.index.retrieve([r.memory_id])[r.memory_id]
    assert point.payload["subject_id"] == "alice" and point.payload["purpose"] == PURPOSE
    assert point.payload["scope_key"] == "subject:alice" and point.payload["status"] == "active"
    assert point.payload["revision"] == 1 and point.payload["model"] == svc.embedder.model_name
    assert point.payload["expires_at"] == pytest.approx(later().timestamp(), abs=60)
    svc.ledger.redact(p, "alice", RedactMemory(memory_id=r.memory_id, replacement="Alice likes [redacted]"))
    svc.catch_up()
    assert svc.index.retrieve([r.memory_id])[r.memory_id].payload["revision"] == 2
    new = svc.ledger.supersede(p, r.memory_id, memory_write(content="Alice likes Go"))
    svc.catch_up()
    assert r.memory_id not in svc.index.retrieve([r.memory_id])
    assert new.memory_id in svc.index.retrieve([new.memory_id or ""])


def test_cache_entry_dropped_by_any_event_of_the_subject_and_ttl_bounded(svc: Services) -> None:
    p = svc.principal()
    expires = later(100 / 86400)  # 100 s from now, well under the 300 s default TTL
    svc.ledger.write(
        p, memory_write(content="Alice reads Kafka docs", retention={"expires_at": expires, "basis": "session"})
    )
    svc.catch_up()
    assert svc.cache is not None
    recall_ids(svc, "Kafka docs")
    keys = svc.cache.entries("alice")
    assert len(keys) == 1
    ttl_ms = svc.cache._r.pttl(keys[0])
    assert 0 < ttl_ms <= 100_000
    assert svc.recall.recall(p, "alice", PURPOSE, "Kafka docs", utc_now()).cached
    svc.ledger.write(p, memory_write(subject="alice", content="unrelated"))
    svc.catch_up()
    assert svc.cache.entries("alice") == []
    assert not svc.recall.recall(p, "alice", PURPOSE, "Kafka docs", utc_now()).cached


def test_summaries_dropped_when_a_source_is_invalidated(svc: Services) -> None:
    p = svc.principal()
    a = svc.ledger.write(p, memory_write(content="Alice uses vim")).memory_id
    b = svc.ledger.write(p, memory_write(content="Alice uses tmux")).memory_id
    assert a and b
    s1 = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: vim and tmux",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [a, b]},
        ),
    ).memory_id
    s2 = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: tmux",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [b]},
        ),
    ).memory_id
    svc.catch_up()
    assert one(svc, "SELECT count(*) FROM summaries_v1") == 2
    r = svc.ledger.supersede(p, a, memory_write(content="Alice uses emacs"))
    svc.catch_up()
    (regenerated,) = [e.memory_id for e in r.events if e.type == "SummaryDerived"]
    rows = one(
        svc, "SELECT array_agg(memory_id ORDER BY memory_id), array_agg(content ORDER BY memory_id) FROM summaries_v1"
    )
    assert rows == (
        sorted([s2, regenerated]),
        [c for _, c in sorted({s2: "Alice: tmux", regenerated: "Alice uses tmux"}.items())],
    )
    assert s1 not in recall_ids(svc, "vim tmux")


def test_recall_rules(svc: Services) -> None:
    p = svc.principal()
    visible = svc.ledger.write(p, memory_write(content="Alice wants Python examples")).memory_id
    svc.ledger.write(p, memory_write(subject="bob", content="Bob wants Python examples"))
    svc.ledger.write(p, memory_write(content="Python examples for marketing", purpose="marketing"))
    doc = svc.ledger.write(
        p, memory_write(content="Python examples in the deck", scope={"type": "document", "id": "deck"})
    ).memory_id
    inf = svc.ledger.write(
        p,
        memory_write(
            kind="inference",
            confirmed=False,
            content="Alice knows Python well",
            provenance={"writer": "x", "written_at": utc_now(), "derived_from": [visible]},
        ),
    ).memory_id
    revoked = svc.ledger.write(
        p,
        memory_write(
            content="Alice Python consent", provenance={"writer": "x", "written_at": utc_now(), "consent_ref": "c-1"}
        ),
    ).memory_id
    svc.ledger.revoke_consent(p, RevokeConsent(subject_id="alice", consent_ref="c-1"))
    svc.catch_up()
    assert recall_ids(svc, "Python examples") == [visible]
    assert set(recall_ids(svc, "Python examples", scope_keys=("document:deck",))) == {visible, doc}
    assert set(recall_ids(svc, "Python", include_unconfirmed=True)) == {visible, inf}
    assert revoked not in recall_ids(svc, "Python consent", include_unconfirmed=True)
    items = svc.recall.recall(p, "alice", PURPOSE, "Python", utc_now()).items
    assert all(i.provenance["writer"] for i in items)


def test_an_inference_written_confirmed_is_confirmed_by_the_log_live_and_in_a_replay(svc: Services) -> None:
    p = svc.principal()
    stated = svc.ledger.write(p, memory_write(content="Alice prefers Python", key="language")).memory_id
    source = svc.ledger.write(p, memory_write(content="Alice wrote Go all week")).memory_id
    inferred = svc.ledger.write(
        p,
        memory_write(
            kind="inference",
            content="Alice prefers Go",
            key="language",
            veracity="inferred",
            confirmed=True,
            provenance={"writer": "x", "written_at": utc_now(), "derived_from": [source]},
        ),
    ).memory_id
    svc.catch_up()

    def snapshot() -> tuple[Any, ...]:
        with svc.pool.connection() as conn:
            facts = conn.execute(
                "SELECT memory_id, revision, status, confirmed, superseded_by, updated_at FROM facts_v1"
                " ORDER BY memory_id"
            ).fetchall()
            history = conn.execute(
                "SELECT memory_id, revision, event_type, status FROM facts_history_v1 ORDER BY memory_id, revision"
            ).fetchall()
        assert svc.index is not None
        points = {m: (pt.payload["status"], pt.payload["revision"]) for m, pt in svc.index.retrieve([inferred]).items()}
        return facts, history, points

    live = snapshot()
    assert one(svc, "SELECT status, revision, confirmed FROM facts_v1 WHERE memory_id = %s", inferred) == (
        "active",
        2,
        True,
    )
    assert [r[2] for r in live[1] if r[0] == inferred] == ["MemoryWritten", "MemoryConfirmed"]
    assert one(svc, "SELECT status, superseded_by FROM facts_v1 WHERE memory_id = %s", stated) == (
        "superseded",
        inferred,
    )
    assert live[2] == {inferred: ("active", 2)}
    recalled = recall_ids(svc, "which language does Alice prefer")  # no --include-unconfirmed needed
    assert inferred in recalled and stated not in recalled
    for name in PROJECTION_NAMES:
        svc.projections[name].reset()
        svc.runner(name).catch_up(svc.log)
    assert snapshot() == live


def test_erasure_reaches_every_store_and_survives_replay(svc: Services) -> None:
    p = svc.principal()
    keep = svc.ledger.write(p, memory_write(content="Alice prefers dark mode")).memory_id
    gone = svc.ledger.write(p, memory_write(content="Alice's phone is 555-0100")).memory_id
    assert gone
    svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: dark mode, phone 555-0100",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [keep, gone]},
        ),
    )
    svc.catch_up()
    assert gone in recall_ids(svc, "phone 555-0100")
    request = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="test"))
    svc.catch_up()
    assert request.request_id
    report = trace(svc.pool, request.request_id, svc.trace_targets())
    assert report.verdict == "complete", report
    for name in PROJECTION_NAMES:
        svc.projections[name].reset()
        svc.runner(name).catch_up(svc.log)
    assert gone not in recall_ids(svc, "phone 555-0100")
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%555-0100%%'") == 0
    assert one(svc, "SELECT count(*) FROM summaries_v1 WHERE content LIKE '%%555-0100%%'") == 0
    assert svc.index is not None and svc.index.retrieve([gone]) == {}
    assert trace(svc.pool, request.request_id, svc.trace_targets()).verdict == "complete"
    assert keep in recall_ids(svc, "dark mode")


def test_malformed_record_goes_to_the_dlq_and_the_projection_goes_on(svc: Services) -> None:
    svc.log.append("alice", b"{not json")
    r = svc.ledger.write(svc.principal(), memory_write(content="after the bad record"))
    svc.catch_up()
    letters = svc.dlq.list()
    assert {d.projection for d in letters} == {f"{n}_v1" for n in PROJECTION_NAMES}
    assert all(d.offset == 0 and d.partition == 0 and "JSON" in d.reason for d in letters)
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE memory_id = %s", r.memory_id) == 1


def test_erasing_a_memory_again_is_refused_and_the_first_trace_stays_complete(svc: Services) -> None:
    from ledger.errors import InvalidCommandError

    p = svc.principal()
    gone = svc.ledger.write(p, memory_write(content="Alice's locker code is 4711")).memory_id
    assert gone
    first = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    svc.catch_up()
    with pytest.raises(InvalidCommandError, match="already erased"):
        svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked again"))
    # a whole subject is erased even with no memory left: rows the heads do not know may remain
    again = svc.ledger.erase(p, EraseMemories(subject_id="alice", whole_subject=True, reason="everything"))
    svc.catch_up()
    assert gone not in again.affected
    assert first.request_id and again.request_id
    assert trace(svc.pool, first.request_id, svc.trace_targets()).verdict == "complete"
    assert trace(svc.pool, again.request_id, svc.trace_targets()).verdict == "complete"


def test_deriving_from_an_erased_memory_is_refused(svc: Services) -> None:
    from ledger.errors import InvalidCommandError

    p = svc.principal()
    keep = svc.ledger.write(p, memory_write(content="Alice prefers dark mode")).memory_id
    gone = svc.ledger.write(p, memory_write(content="Alice's phone is 555-0100")).memory_id
    assert keep and gone
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    summary = memory_write(
        kind="summary",
        content="Alice: dark mode, phone 555-0100",
        provenance={"writer": "s", "written_at": utc_now(), "derived_from": [keep, gone]},
    )
    with pytest.raises(InvalidCommandError, match="is erased") as info:
        svc.ledger.write(p, summary)
    assert info.value.field == "provenance.derived_from"
    assert gone in str(info.value)
    ok = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: dark mode",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [keep]},
        ),
    )
    assert ok.memory_id


def test_redaction_makes_the_replaced_text_unreadable_and_survives_replay(svc: Services) -> None:
    from contracts import MemoryWritten, decode_event
    from ledger.eventlog import read_all

    p = svc.principal()
    mid = svc.ledger.write(p, memory_write(content="Alice's phone is 555-0199, call after 6pm")).memory_id
    assert mid
    svc.ledger.confirm(p, "alice", mid)
    svc.ledger.redact(p, "alice", RedactMemory(memory_id=mid, replacement="Alice prefers calls after 6pm"))
    svc.catch_up()
    with svc.pool.connection() as conn:
        originals = [decode_event(r.value) for r in read_all(svc.log)]
        written = [e for e in originals if isinstance(e, MemoryWritten) and e.memory_id == mid]
        assert written and svc.keyring.open(conn, written[0].memory.content) is None
    for name in PROJECTION_NAMES:
        svc.projections[name].reset()
        svc.runner(name).catch_up(svc.log)
    assert one(svc, "SELECT content, status FROM facts_v1 WHERE memory_id = %s", mid) == (
        "Alice prefers calls after 6pm",
        "active",
    )
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%555-0199%%'") == 0
    assert svc.index is not None and svc.index.retrieve([mid])[mid].payload["status"] == "active"
    assert recall_ids(svc, "calls after 6pm") == [mid]


def test_sweep_expires_what_has_passed_in_every_store(svc: Services) -> None:
    from datetime import timedelta

    from ledger.errors import InvalidCommandError

    p = svc.principal()
    soon = svc.ledger.write(
        p, memory_write(content="Alice is in Lisbon this week", retention={"expires_at": later(1), "basis": "session"})
    ).memory_id
    lasting = svc.ledger.write(p, memory_write(content="Alice is based in Porto")).memory_id
    assert soon and lasting
    summary = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: Porto, in Lisbon this week",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [soon, lasting]},
        ),
    ).memory_id
    svc.catch_up()
    assert svc.ledger.sweep(p, utc_now()) == []  # nothing has passed yet
    results = svc.ledger.sweep(p, utc_now() + timedelta(days=2))
    assert [set(r.affected) for r in results] == [{soon, summary}]  # the summary restates it: it expires too
    svc.catch_up()
    assert one(svc, "SELECT status, content FROM facts_v1 WHERE memory_id = %s", soon) == ("expired", None)
    assert svc.index is not None and svc.index.retrieve([soon]) == {}
    # regenerated from the source that remains
    assert one(svc, "SELECT content, derived_from FROM summaries_v1") == ("Alice is based in Porto", [lasting])
    assert soon not in recall_ids(svc, "Lisbon this week")
    assert svc.ledger.sweep(p, utc_now() + timedelta(days=2)) == []
    with pytest.raises(InvalidCommandError, match="now"):
        svc.ledger.sweep(p, (utc_now() + timedelta(days=2)).replace(tzinfo=None))


def test_a_summary_is_not_recalled_while_a_source_is_disputed_or_expired(svc: Services) -> None:
    from datetime import timedelta

    p = svc.principal()

    def doc(content: str, source: str) -> Any:
        prov = {"writer": "importer", "written_at": utc_now(), "source_ref": source}
        return memory_write(content=content, key="city", veracity="imported", provenance=prov)

    paris = svc.ledger.write(p, doc("Alice lives in Paris", "doc-1")).memory_id
    brief = svc.ledger.write(p, memory_write(content="Alice is moving house soon", retention={"expires_at": later(1)}))
    assert paris and brief.memory_id
    summary = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice lives in Paris and is moving house soon",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [paris, brief.memory_id]},
        ),
    ).memory_id
    svc.catch_up()
    assert summary in recall_ids(svc, "Paris moving house")
    tomorrow_and_more = utc_now() + timedelta(days=2)
    late = svc.recall.recall(p, "alice", PURPOSE, "Paris moving house", tomorrow_and_more)
    assert summary not in [i.memory_id for i in late.items]  # a source expired at that now, sweep or not
    svc.ledger.write(p, doc("Alice lives in Berlin", "doc-2"))  # disputes the summary's source
    svc.catch_up()
    assert summary not in recall_ids(svc, "Paris moving house")


def test_a_sweep_of_many_memories_appends_them_in_parts_and_expires_all(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from contracts import RetentionExpired
    from ledger import service

    monkeypatch.setattr(service, "REFS_PER_SWEEP_EVENT", 2)  # as 5,000 keeps an event under its limit
    p = svc.principal()
    retention = {"expires_at": later(1), "basis": "session"}
    ids = {svc.ledger.write(p, memory_write("cleo", f"Cleo note {i}", retention=retention)).memory_id for i in range(5)}
    (result,) = svc.ledger.sweep(p, utc_now() + timedelta(days=2))
    expired = [e for e in result.events if isinstance(e, RetentionExpired)]
    assert [len(e.affected) for e in expired] == [2, 2, 1]
    assert set(result.affected) == ids
    svc.catch_up()
    with svc.pool.connection() as conn:
        statuses = conn.execute("SELECT status FROM facts_v1 WHERE subject_id = 'cleo'").fetchall()
    assert statuses == [("expired",)] * 5
