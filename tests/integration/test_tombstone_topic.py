"""The compacted tombstone topic (distributed mode) and the tombstone check every
projection makes before applying a write-type event, live and in a replay, against real
Kafka, Postgres and Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from contracts import (
    EraseMemories,
    MemoryRedacted,
    MemoryReinforced,
    MemoryWritten,
    RedactMemory,
    decode_event,
    utc_now,
)
from ledger.erasure import restore_tombstones
from ledger.eventlog import LogRecord, read_all
from ledger.tombstone_log import KafkaTombstoneLog
from projections.tombstone_registry import TombstoneSet
from tests.builders import memory_write
from tests.integration.distributed import distributed_settings
from workers.bootstrap import Services, build

pytestmark = pytest.mark.integration


@pytest.fixture
def svc(tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    services = build(distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url))
    assert services.tombstone_set is not None
    services.tombstone_set._interval_s = 0.0  # read the topic on every lookup: no timing in the test
    yield services
    services.close()


def topic_records(bootstrap: str, topic: str) -> list[tuple[str, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[tuple[str, bytes | None]] = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for msgs in consumer.poll(timeout_ms=1000).values():
                out += [(m.key.decode(), m.value) for m in msgs]
        return out
    finally:
        consumer.close()


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    finally:
        admin.close()
    flat: dict[str, str] = {}

    def walk(node: Any) -> None:  # the response is nested dicts: resource type -> name -> key -> entry
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict) and "value" in value:
                    flat[str(key)] = str(value["value"])
                else:
                    walk(value)

    walk(found)
    return flat


def test_erasure_writes_one_content_free_record_per_memory_to_a_compacted_topic(svc: Services) -> None:
    p = svc.principal()
    settings = svc.settings
    assert settings.kafka_bootstrap is not None
    gone = svc.ledger.write(p, memory_write(content="Alice's locker code is 4471")).memory_id
    keep = svc.ledger.write(p, memory_write(content="Alice likes jasmine tea", key="tea")).memory_id
    summary = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: locker 4471, jasmine tea",
            provenance={"writer": "test-agent", "written_at": "2026-11-01T00:00:00Z", "derived_from": [gone, keep]},
        ),
    ).memory_id
    assert gone and keep and summary
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))

    config = topic_config(settings.kafka_bootstrap, settings.tombstone_topic)
    assert config["cleanup.policy"] == "compact"
    assert config["retention.ms"] == "-1"
    records = topic_records(settings.kafka_bootstrap, settings.tombstone_topic)
    assert sorted(k for k, _ in records) == sorted([gone, summary])  # the summary restated it: erased too
    for _, value in records:
        assert value is not None
        body = json.loads(value)
        assert set(body) == {"subject_id", "request_id", "erased_at"}
        assert body["subject_id"] == "alice" and body["request_id"] == r.request_id
        assert body["erased_at"].endswith("+00:00")
        assert b"4471" not in value and b"locker" not in value and b"jasmine" not in value
    with svc.pool.connection() as conn:
        table = {m: rid for m, rid in conn.execute("SELECT memory_id, request_id FROM tombstones")}
    assert table == {k: r.request_id for k, _ in records}

    # a second reader (another process) loads the same set from the topic alone
    reader = KafkaTombstoneLog(settings.kafka_bootstrap, settings.tombstone_topic)
    try:
        loaded = TombstoneSet(reader).all()
    finally:
        reader.close()
    assert set(loaded) == {gone, summary} and loaded[gone].request_id == r.request_id


def _memory_events(svc: Services, memory_id: str) -> list[tuple[LogRecord, Any]]:
    out = []
    for record in read_all(svc.log):
        event = decode_event(record.value)
        if getattr(event, "memory_id", None) == memory_id:
            out.append((record, event))
    return out


def _stored(svc: Services, ids: list[str]) -> dict[str, Any]:
    with svc.pool.connection() as conn:
        facts = conn.execute("SELECT count(*) FROM facts_v1 WHERE memory_id = ANY(%s)", (ids,)).fetchone()
        summaries = conn.execute(
            "SELECT count(*) FROM summaries_v1 WHERE memory_id = ANY(%s) OR derived_from && %s", (ids, ids)
        ).fetchone()
        history = conn.execute(
            "SELECT count(*) FROM facts_history_v1 WHERE memory_id = ANY(%s) AND content_hmac IS NOT NULL", (ids,)
        ).fetchone()
        text = conn.execute(
            "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%Orchid%%' OR content LIKE '%%77 Dock%%'"
        ).fetchone()
    assert svc.index is not None
    return {
        "facts": facts,
        "summaries": summaries,
        "history": history,
        "text": text,
        "vectors": sorted(svc.index.retrieve(ids)),
    }


NOTHING = {"facts": (0,), "summaries": (0,), "history": (0,), "text": (0,), "vectors": []}


@pytest.mark.parametrize("registry", ["table", "topic"])
def test_a_tombstoned_memory_is_never_stored_again_even_with_its_key_readable(svc: Services, registry: str) -> None:
    """``table``: the tombstone row is there, but the data keys were put back (a restored
    key table). ``topic``: Postgres restored from a backup older than the erasure: keys
    back AND tombstone rows gone; only the compacted topic still names the memories."""
    p = svc.principal()
    gone = svc.ledger.write(p, memory_write(content="Alice's wifi password is Orchid-77")).memory_id
    assert gone
    svc.ledger.write(p, memory_write(content="Alice's wifi password is Orchid-77"))  # MemoryReinforced
    svc.ledger.redact(p, "alice", RedactMemory(memory_id=gone, replacement="Alice lives at 77 Dock Road"))
    keep = svc.ledger.write(p, memory_write(content="Alice prefers dark mode", key="theme")).memory_id
    summary = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: wifi Orchid-77, dark mode",
            provenance={"writer": "test-agent", "written_at": "2026-11-01T00:00:00Z", "derived_from": [gone, keep]},
        ),
    ).memory_id
    assert keep and summary
    events = _memory_events(svc, gone)
    assert [type(e) for _, e in events] == [MemoryWritten, MemoryReinforced, MemoryRedacted]
    svc.catch_up()
    assert _stored(svc, [gone, summary])["facts"] == (1,)
    with svc.pool.connection() as conn:  # the "backup", taken before the erasure
        keys = conn.execute("SELECT key_id, wrapped_key FROM memory_keys WHERE wrapped_key IS NOT NULL").fetchall()

    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    svc.catch_up()
    assert _stored(svc, [gone, summary]) == NOTHING

    with svc.pool.connection() as conn:  # the restore
        for key_id, wrapped in keys:
            conn.execute(
                "UPDATE memory_keys SET wrapped_key = %s, destroyed_at = NULL WHERE key_id = %s", (wrapped, key_id)
            )
        if registry == "topic":
            conn.execute("DELETE FROM tombstones")
        redacted = next(e for _, e in events if isinstance(e, MemoryRedacted))
        assert svc.keyring.open(conn, redacted.content) == "Alice lives at 77 Dock Road"  # readable again

    # live: the original records delivered again (a producer re-sending old bytes)
    for record, _ in events:
        svc.log.append(record.key, record.value)
    svc.catch_up()
    assert _stored(svc, [gone, summary]) == NOTHING

    # replay: every projection rebuilt from offset 0
    for projection in svc.projections.values():
        projection.reset()
    svc.catch_up()
    assert _stored(svc, [gone, summary]) == NOTHING
    with svc.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM facts_v1 WHERE memory_id = %s", (keep,)).fetchone() == (1,)
        # the summary regenerated from what remains is there
        assert conn.execute("SELECT content FROM summaries_v1").fetchall() == [("Alice prefers dark mode",)]

    # what reapply-tombstones does first in the distributed mode: the table and keys follow the topic again
    assert svc.tombstone_set is not None
    with svc.pool.connection() as conn, conn.transaction():
        restored, destroyed = restore_tombstones(conn, svc.keyring, svc.tombstone_set.all(), utc_now())
    assert (restored, destroyed) == ((2 if registry == "topic" else 0), 2)  # gone's redaction key, the summary's
    with svc.pool.connection() as conn:
        assert svc.keyring.open(conn, redacted.content) is None
        assert {m for (m,) in conn.execute("SELECT memory_id FROM tombstones")} == {gone, summary}
        assert conn.execute("SELECT status FROM ledger_memories WHERE memory_id = %s", (gone,)).fetchone() == (
            "erased",
        )


def test_recall_consults_the_topic_when_the_tombstones_table_lost_the_erasure(svc: Services) -> None:
    p = svc.principal()
    gone = svc.ledger.write(p, memory_write(content="Alice's pager code is 8080")).memory_id
    assert gone
    svc.catch_up()
    with svc.pool.connection() as conn:  # a backup of the fact row, taken before the erasure
        conn.execute("CREATE TABLE facts_backup AS SELECT * FROM facts_v1 WHERE memory_id = %s", (gone,))
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    svc.catch_up()
    with svc.pool.connection() as conn:  # restored over the erasure: the row is back, the tombstone row gone
        row = conn.execute(
            "SELECT string_agg(column_name, ', ') FROM information_schema.columns"
            " WHERE table_name = 'facts_v1' AND is_generated = 'NEVER'"
        ).fetchone()
        assert row is not None
        conn.execute(f"INSERT INTO facts_v1 ({row[0]}) SELECT {row[0]} FROM facts_backup")
        conn.execute("DELETE FROM tombstones")
    result = svc.recall.recall(p, "alice", "technical_writing", "pager code 8080", utc_now())
    assert gone not in [i.memory_id for i in result.items]  # the topic still names it


@pytest.mark.parametrize("made_by", ["a ledger process", "topics create"])
def test_a_tombstone_topic_deleted_and_made_again_starts_with_every_tombstone(
    tmp_path: Path,
    kafka_bootstrap: str,
    fresh_dsn: str,
    redis_url: str,
    redis_client: Any,
    caplog: Any,
    monkeypatch: pytest.MonkeyPatch,
    made_by: str,
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    first = build(settings)
    try:
        p = first.principal()
        gone = [first.ledger.write(p, memory_write("tia", f"Tia fact {i}", key=f"k{i}")).memory_id for i in range(3)]
        first.ledger.erase(p, EraseMemories(subject_id="tia", memory_ids=tuple(m for m in gone if m), reason="asked"))
    finally:
        first.close()
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_topics([settings.tombstone_topic])
        for _ in range(100):  # deletion is asynchronous on the broker
            if settings.tombstone_topic not in admin.list_topics():
                break
            time.sleep(0.1)
    finally:
        admin.close()
    caplog.set_level("WARNING", logger="workers.bootstrap")
    if made_by == "a ledger process":
        again = build(settings)  # it makes the missing topic, and says so
        again.close()
        assert any(
            settings.tombstone_topic in r.getMessage() and "was missing" in r.getMessage() for r in caplog.records
        )
    else:
        from workers.cli import root

        for name in (
            "kafka_bootstrap",
            "postgres_dsn",
            "redis_url",
            "topic",
            "tombstone_topic",
            "dlq_topic",
            "partitions",
        ):
            monkeypatch.setenv(f"MEMLEDGER_{name.upper()}", str(getattr(settings, name)))
        assert root.run_args(["topics", "create", "--json"]) == 0
    assert sorted(k for k, v in topic_records(kafka_bootstrap, settings.tombstone_topic) if v is not None) == sorted(
        m for m in gone if m
    )
