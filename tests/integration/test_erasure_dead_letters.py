"""Dead letters of an erased subject: purged from the Postgres DLQ in the erasure's
transaction; listed by trace (store ``dlq``, status ``reported``) when the DLQ is a Kafka
topic, which cannot be edited."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories
from projections.trace import to_json, trace
from projections.trace_html import render_html
from tests.builders import memory_write
from tests.integration.distributed import distributed_settings
from workers.bootstrap import Services, build

pytestmark = pytest.mark.integration

PROJECTIONS = 4
"""Each projection dead-letters a bad record on its own."""


@pytest.fixture
def local(svc: Services) -> Services:
    return svc


def bad_record(memory_id: str, text: str) -> bytes:
    """Not an event (unknown type), but naming a memory and carrying plain text."""
    return json.dumps({"type": "MemoryExploded", "memory_id": memory_id, "content": text}).encode()


def dlq_rows(svc: Services) -> list[tuple[str, str]]:
    with svc.pool.connection() as conn:
        return [(k, bytes(v).decode()) for k, v in conn.execute("SELECT key, value FROM memory_dlq ORDER BY id")]


def store(report: Any, name: str) -> Any:
    return next(s for s in report.stores if s.store == name)


def test_postgres_dlq_letters_of_the_erasure_are_purged_in_its_transaction(local: Services) -> None:
    svc = local
    p = svc.principal()
    pin = svc.ledger.write(p, memory_write(content="Alice's PIN is 9911")).memory_id
    svc.ledger.write(p, memory_write("bob", "Bob's PIN is 1234"))
    assert pin
    svc.log.append("alice", bad_record(pin, "Alice's PIN is 9911"))
    svc.log.append("alice", bad_record("unknown", "Alice said something else"))
    svc.log.append("bob", bad_record("unknown", "Bob's PIN is 1234"))
    svc.catch_up()
    assert len(dlq_rows(svc)) == 3 * PROJECTIONS

    first = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(pin,), reason="asked"))
    assert first.request_id
    left = dlq_rows(svc)
    assert len(left) == 2 * PROJECTIONS and not [v for _, v in left if "9911" in v]  # only the letters naming it
    svc.catch_up()
    report = trace(svc.pool, first.request_id, svc.trace_targets())
    dlq = store(report, "dlq")
    assert (dlq.status, dlq.items_removed, dlq.probe_found, dlq.probe) == ("applied", PROJECTIONS, 0, "absent")
    assert report.verdict == "complete"
    with svc.pool.connection() as conn:
        purged = conn.execute(
            "SELECT queue, purged, letters FROM erasure_dead_letters WHERE request_id = %s", (first.request_id,)
        ).fetchone()
    assert purged is not None and purged[:2] == ("memory_dlq", PROJECTIONS)
    assert sorted(x["projection"] for x in purged[2]) == ["cache_v1", "facts_v1", "summaries_v1", "vectors_v1"]

    svc.ledger.write(p, memory_write(content="Alice prefers tea"))
    whole = svc.ledger.erase(p, EraseMemories(subject_id="alice", whole_subject=True, reason="asked"))
    assert whole.request_id
    assert [k for k, _ in dlq_rows(svc)] == ["bob"] * PROJECTIONS  # another subject's letters stay
    svc.catch_up()
    again = trace(svc.pool, whole.request_id, svc.trace_targets())
    assert store(again, "dlq").items_removed == PROJECTIONS and again.verdict == "complete"


def test_kafka_dlq_letters_of_the_erasure_are_listed_by_trace_as_reported(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    svc = build(distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url))
    try:
        p = svc.principal()
        pin = svc.ledger.write(p, memory_write(content="Alice's PIN is 9911")).memory_id
        other = svc.ledger.write(p, memory_write(content="Alice prefers tea", key="drink")).memory_id
        assert pin and other
        svc.log.append("alice", bad_record(pin, "Alice's PIN is 9911"))
        svc.log.append("bob", bad_record(pin, "Bob quoted it"))  # another subject's letter: not the erasure's
        svc.catch_up()
        assert len(svc.dlq.list(100)) == 2 * PROJECTIONS

        r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(pin,), reason="asked"))
        assert r.request_id
        svc.catch_up()
        report = trace(svc.pool, r.request_id, svc.trace_targets())
        dlq = store(report, "dlq")
        assert dlq.status == "reported" and dlq.probe_found == PROJECTIONS and dlq.items_removed == 0
        assert dlq.probe.startswith(f"{PROJECTIONS} letters kept: {svc.settings.dlq_topic} is append-only")
        assert "facts_v1 p" in dlq.probe and "(dlq p" in dlq.probe
        assert report.verdict == "complete"  # every editable store is clean; the DLQ's letters are listed
        assert '"store": "dlq"' in to_json(report)
        assert 'data-status="reported"' in render_html(report)
        assert len(svc.dlq.list(100)) == 2 * PROJECTIONS  # nothing was deleted from the topic

        # an erasure whose memories no letter names has nothing in the DLQ
        r2 = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(other,), reason="asked"))
        assert r2.request_id
        svc.catch_up()
        clean = store(trace(svc.pool, r2.request_id, svc.trace_targets()), "dlq")
        assert (clean.status, clean.probe) == ("applied", "absent")

        # a record of the subject in the topic that the ledger did not write may hold anything: listed
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
        try:
            producer.send(svc.settings.dlq_topic, key=b"alice", value=b"not a letter").get(30)
        finally:
            producer.close()
        foreign = store(trace(svc.pool, r2.request_id, svc.trace_targets()), "dlq")
        assert foreign.status == "reported" and foreign.probe_found == 1 and "unknown p" in foreign.probe
    finally:
        svc.close()
