"""Topics checked at start (distributed mode, real Kafka): a topic whose settings would
break a guarantee is refused naming the topic and the setting, a worker never creates a
missing topic, ``memledger topics create|check`` make and check them, and a tombstone
reader follows a tombstone topic that was deleted and created again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from ledger import topics
from ledger.errors import TopicMisconfiguredError
from ledger.kafka_log import ensure_topics
from ledger.tombstone_log import KafkaTombstoneLog, Tombstone
from projections.tombstone_registry import TombstoneSet
from tests.e2e.conftest import Cli
from tests.integration.distributed import distributed_settings
from tests.integration.test_erasure_crash import settings_env
from workers.bootstrap import build

pytestmark = pytest.mark.integration


def test_a_tombstone_topic_that_is_not_compacted_is_refused_naming_the_setting(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    ensure_topics(kafka_bootstrap, 3, (settings.tombstone_topic,))  # delete retention: would lose tombstones
    with pytest.raises(TopicMisconfiguredError) as raised:
        build(settings)
    assert raised.value.topic == settings.tombstone_topic and raised.value.setting == "cleanup.policy"
    assert f"topic {settings.tombstone_topic}: cleanup.policy: must be compact, is delete" in str(raised.value)


def test_an_events_topic_with_another_partition_count_is_refused(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    ensure_topics(kafka_bootstrap, 2, (settings.topic,))
    with pytest.raises(TopicMisconfiguredError) as raised:
        build(settings)
    assert (raised.value.setting, raised.value.required, raised.value.found) == ("partitions", "3", "2")


def test_a_worker_never_creates_a_missing_tombstone_topic(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    ensure_topics(kafka_bootstrap, 3, (settings.topic, settings.dlq_topic))
    with pytest.raises(TopicMisconfiguredError) as raised:
        build(settings, own_vectors=False, projections=(), create_topics=False)  # as a worker builds
    assert (raised.value.topic, raised.value.setting) == (settings.tombstone_topic, "exists")
    assert not topics.describe(kafka_bootstrap, [settings.tombstone_topic])[settings.tombstone_topic].exists


@pytest.mark.parametrize("tombstones", ["delete retention", "missing"])
def test_memledger_worker_refuses_to_start_in_one_line_naming_the_topic_and_the_setting(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, tombstones: str
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    ensure_topics(kafka_bootstrap, 3, (settings.topic, settings.dlq_topic))
    if tombstones == "delete retention":
        ensure_topics(kafka_bootstrap, 3, (settings.tombstone_topic,))
    env = {**settings_env(settings), "MEMLEDGER_METRICS_PORT": "0"}
    started = Cli(env).run("worker", check=False, timeout_s=120)  # refused before any child is forked
    assert started.returncode == 2, started.stdout + started.stderr
    expected = (
        f"error: topic {settings.tombstone_topic}: cleanup.policy: must be compact, is delete"
        if tombstones == "delete retention"
        else f"error: topic {settings.tombstone_topic}: missing (create it with `memledger topics create`)"
    )
    assert expected in started.stderr.splitlines()
    assert "Traceback" not in started.stderr and "supervising" not in started.stdout
    if tombstones == "missing":
        assert not topics.describe(kafka_bootstrap, [settings.tombstone_topic])[settings.tombstone_topic].exists


def test_topics_create_then_check_from_the_cli(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    cli = Cli(settings_env(settings))
    missing = cli.run("topics", "check", check=False)
    assert missing.returncode == 1 and f"topic {settings.tombstone_topic}: missing" in missing.stdout
    created = cli.json("topics", "create")
    assert {r["topic"] for r in created if r["created"]} == {
        settings.topic,
        settings.tombstone_topic,
        settings.dlq_topic,
    }
    assert all(not r["problems"] for r in created)
    config = topics.describe(kafka_bootstrap, [settings.tombstone_topic])[settings.tombstone_topic].configs or {}
    assert (config["cleanup.policy"], config["retention.ms"], config["retention.bytes"]) == ("compact", "-1", "-1")
    assert cli.run("topics", "check").returncode == 0


def _recreate(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    deadline = time.monotonic() + 60
    while True:  # the broker finishes the deletion in the background
        try:
            topics.create_missing(bootstrap, [topics.tombstone_topic(topic)], 1)
            if topics.describe(bootstrap, [topic])[topic].exists:
                return
        except KafkaError:
            pass
        assert time.monotonic() < deadline, "the topic could not be created again"
        time.sleep(0.5)


def _fresh_tombstone_topic(bootstrap: str, kafka_topic: str) -> tuple[str, KafkaTombstoneLog, KafkaTombstoneLog]:
    """A new tombstone topic (named after ``kafka_topic``), a writer and a reader of it."""
    topic = kafka_topic + ".tombstones"
    topics.create_missing(bootstrap, [topics.tombstone_topic(topic)], 1)
    return topic, KafkaTombstoneLog(bootstrap, topic), KafkaTombstoneLog(bootstrap, topic)


def test_a_long_running_reader_follows_a_recreated_tombstone_topic(kafka_bootstrap: str, kafka_topic: str) -> None:
    topic, writer, reader = _fresh_tombstone_topic(kafka_bootstrap, kafka_topic)
    now = datetime.now(UTC)
    try:
        tombstones = TombstoneSet(reader, refresh_interval_s=0)
        writer.publish([Tombstone(f"m-{n}", "alice", "er-1", now) for n in range(3)])
        assert tombstones.erased_among(["m-0", "m-2"]) == {"m-0", "m-2"}
        writer.close()
        _recreate(kafka_bootstrap, topic)
        writer = KafkaTombstoneLog(kafka_bootstrap, topic)
        writer.publish([Tombstone("m-new", "alice", "er-2", now)])  # offset 0 of the new topic
        deadline = time.monotonic() + 30
        while "m-new" not in tombstones.erased_among(["m-new"]):
            assert time.monotonic() < deadline, "the reader did not follow the new topic"
            time.sleep(0.5)
        assert tombstones.erased_among(["m-0"]) == {"m-0"}  # what it knew stays refused
    finally:
        writer.close()
        reader.close()


def test_a_long_running_reader_follows_a_recreated_tombstone_topic_that_refilled_to_its_old_end(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    topic, writer, reader = _fresh_tombstone_topic(kafka_bootstrap, kafka_topic)
    now = datetime.now(UTC)
    try:
        tombstones = TombstoneSet(reader, refresh_interval_s=0)
        writer.publish([Tombstone("m-old", "alice", "er-1", now)])
        assert tombstones.erased_among(["m-old"]) == {"m-old"}
        writer.close()
        _recreate(kafka_bootstrap, topic)
        writer = KafkaTombstoneLog(kafka_bootstrap, topic)
        writer.publish([Tombstone("m-new", "alice", "er-2", now)])  # the new topic ends where the old one did
        assert tombstones.erased_among(["m-new"]) == {"m-new"}
        assert tombstones.erased_among(["m-old"]) == {"m-old"}  # what it knew stays refused
    finally:
        writer.close()
        reader.close()
