"""The EventLog contract on the real adapters (PostgresEventLog, KafkaEventLog), gapless
concurrent appends on Postgres, the dead-letter queues of both, and a distributed build
that fails after its Kafka log was built."""

from __future__ import annotations

import importlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from ledger.errors import EventLogError
from ledger.eventlog import DeadLetter, EventLog, read_all
from ledger.postgres_log import PostgresDeadLetterQueue, PostgresEventLog
from tests.eventlog_contract import EventLogContract, MakeLog
from tests.integration.distributed import distributed_settings

pytestmark = pytest.mark.integration

"""Marks every Kafka test. The Kafka modules are imported inside the tests (``_kafka``),
not at module level, so the Postgres tests of this module still run."""


def _kafka() -> ModuleType:
    """``ledger.kafka_log``, imported where the test runs."""
    return importlib.import_module("ledger.kafka_log")


def _dlq_topic() -> str:
    return f"memory.dlq.t{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- Postgres


class TestPostgresEventLog(EventLogContract):
    @pytest.fixture
    def make_log(self, pool: ConnectionPool) -> Iterator[MakeLog]:
        logs: list[EventLog] = []

        def make(partitions: int) -> EventLog:
            # one table per database; a unique topic keeps logs of one test apart
            log = PostgresEventLog(pool, partitions=partitions, topic=f"memory.events.t{uuid.uuid4().hex[:10]}")
            logs.append(log)
            return log

        yield make
        for log in logs:
            log.close()


def test_postgres_concurrent_appends_are_gapless(pool: ConnectionPool) -> None:
    log = PostgresEventLog(pool, partitions=1)
    threads_n, per_thread = 4, 40
    results: list[list[int]] = [[] for _ in range(threads_n)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def work(n: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                results[n].append(log.append(f"subject-{n}-{i}", f"{n}/{i}".encode()).offset)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    total = threads_n * per_thread
    assert sorted(o for r in results for o in r) == list(range(total))
    for offsets in results:
        assert offsets == sorted(offsets), "one thread's appends keep their order"
    records = read_all(log)
    assert [r.offset for r in records] == list(range(total))
    assert log.end_offsets() == {0: total}
    by_value = {r.value: r.offset for r in records}
    for n, offsets in enumerate(results):
        assert [by_value[f"{n}/{i}".encode()] for i in range(per_thread)] == offsets


def test_postgres_concurrent_batches_are_gapless_per_partition(pool: ConnectionPool) -> None:
    log = PostgresEventLog(pool, partitions=3)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                log.append_batch([(f"user-{(n + i + j) % 9}", f"{n}/{i}/{j}".encode()) for j in range(5)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    records = read_all(log)
    assert len(records) == 4 * 10 * 5
    ends = log.end_offsets()
    for partition in range(3):
        assert [r.offset for r in records if r.partition == partition] == list(range(ends[partition]))


def test_postgres_logs_with_different_topics_are_independent(pool: ConnectionPool) -> None:
    a = PostgresEventLog(pool, partitions=1, topic="topic-a")
    b = PostgresEventLog(pool, partitions=1, topic="topic-b")
    assert a.append("k", b"a0").offset == 0
    assert b.append("k", b"b0").offset == 0
    assert a.append("k", b"a1").offset == 1
    assert [r.value for r in read_all(a)] == [b"a0", b"a1"]
    assert [r.value for r in read_all(b)] == [b"b0"]


def _letters(projection: str = "facts_v1") -> list[DeadLetter]:
    return [
        DeadLetter(projection, 0, 5, "user-1", b"\xff\xfenot json", "not valid UTF-8 JSON: Expecting value"),
        DeadLetter(projection, 2, 17, "user-2", b"[1, 2]", "an event must be a JSON object"),
        DeadLetter(projection, 1, 3, "ünïcödé", b"", "(root): Unable to extract tag using discriminator 'type'"),
        DeadLetter(projection, 0, 6, "user-1", bytes(range(256)), "subject_id: 'x' differs from the record key"),
    ]


def test_postgres_dead_letter_queue_round_trip(pool: ConnectionPool) -> None:
    dlq = PostgresDeadLetterQueue(pool)
    assert dlq.list() == []
    letters = _letters()
    for letter in letters:
        dlq.put(letter)
    assert dlq.list() == letters
    assert dlq.list(limit=2) == letters[-2:]
    # the same (projection, partition, offset) is kept once
    dlq.put(letters[0])
    assert dlq.list() == letters
    # another projection may dead-letter the same record
    other = DeadLetter("vectors_v1", 0, 5, "user-1", b"x", "reason")
    dlq.put(other)
    assert dlq.list() == [*letters, other]
    # a second queue object on the same database sees the same letters
    assert PostgresDeadLetterQueue(pool).list() == [*letters, other]


def test_postgres_log_failures_are_event_log_errors(fresh_dsn: str) -> None:
    with ConnectionPool(fresh_dsn, min_size=1, max_size=1, open=True) as own_pool:
        log = PostgresEventLog(own_pool, partitions=2)
        log.append("user-1", b"v")
    # the pool is closed now: the store is unreachable
    with pytest.raises(EventLogError) as info:
        log.append("user-1", b"w")
    assert info.value.retriable
    assert log.topic in str(info.value)
    with pytest.raises(EventLogError):
        log.append_batch([("user-1", b"x"), ("user-2", b"y")])
    with pytest.raises(EventLogError):
        log.read(0, 0)


def test_postgres_dead_letter_queue_failure_is_an_event_log_error(fresh_dsn: str) -> None:
    with ConnectionPool(fresh_dsn, min_size=1, max_size=1, open=True) as own_pool:
        dlq = PostgresDeadLetterQueue(own_pool)
    with pytest.raises(EventLogError):
        dlq.put(_letters()[0])


# --------------------------------------------------------------------------- Kafka


class TestKafkaEventLog(EventLogContract):
    @pytest.fixture
    def make_log(self, kafka_bootstrap: str, kafka_topic: str) -> Iterator[MakeLog]:
        kafka_log = _kafka()
        logs: list[EventLog] = []

        def make(partitions: int) -> EventLog:
            log: EventLog = kafka_log.KafkaEventLog(
                kafka_bootstrap,
                topic=f"{kafka_topic}.{len(logs)}",
                partitions=partitions,
                dlq_topic=_dlq_topic(),
            )
            logs.append(log)
            return log

        yield make
        for log in logs:
            log.close()


def test_kafka_log_creates_its_topics_with_the_partitions_asked(kafka_bootstrap: str, kafka_topic: str) -> None:
    kafka_log = _kafka()
    dlq_topic = _dlq_topic()
    log = kafka_log.KafkaEventLog(kafka_bootstrap, topic=kafka_topic, partitions=3, dlq_topic=dlq_topic)
    try:
        assert log.partitions == 3
        assert log.end_offsets() == {0: 0, 1: 0, 2: 0}
    finally:
        log.close()
    consumer = importlib.import_module("kafka").KafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False
    )
    try:
        assert consumer.partitions_for_topic(dlq_topic) == {0, 1, 2}
    finally:
        consumer.close()


def test_kafka_dead_letter_queue_round_trip(kafka_bootstrap: str) -> None:
    kafka_log = _kafka()
    topic = _dlq_topic()
    kafka_log.ensure_topics(kafka_bootstrap, 1, [topic])
    dlq = kafka_log.KafkaDeadLetterQueue(kafka_bootstrap, topic=topic)
    try:
        assert dlq.list() == []
        letters = _letters()
        for letter in letters:
            dlq.put(letter)
        assert dlq.list() == letters
        assert dlq.list(limit=2) == letters[-2:]
        assert dlq.list(limit=1) == letters[-1:]
    finally:
        dlq.close()


def test_kafka_dead_letter_queue_lists_newest_last_on_a_partitioned_topic(kafka_bootstrap: str) -> None:
    kafka_log = _kafka()
    topic = _dlq_topic()
    kafka_log.ensure_topics(kafka_bootstrap, 3, [topic])
    dlq = kafka_log.KafkaDeadLetterQueue(kafka_bootstrap, topic=topic)
    try:
        letters = [DeadLetter("facts_v1", 0, n, f"user-{n % 6}", f"v{n}".encode(), f"r{n}") for n in range(12)]
        for letter in letters:
            dlq.put(letter)
        listed = dlq.list()
        assert sorted(listed, key=lambda d: d.offset) == letters, "every letter comes back"
        assert listed == letters
        assert dlq.list(limit=3) == letters[-3:]
    finally:
        dlq.close()


def test_a_record_of_the_dead_letter_topic_the_ledger_did_not_write_is_listed_not_a_failure(
    kafka_bootstrap: str,
) -> None:
    from kafka import KafkaProducer

    kafka_log = _kafka()
    topic = _dlq_topic()
    kafka_log.ensure_topics(kafka_bootstrap, 1, [topic])
    dlq = kafka_log.KafkaDeadLetterQueue(kafka_bootstrap, topic=topic)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        letter = DeadLetter("facts_v1", 0, 7, "user-1", b"v", "unknown event type")
        dlq.put(letter)
        for value in (b"x", b'{"projection": "facts_v1"}', b"[1]"):  # not JSON; not a letter's fields; not an object
            producer.send(topic, key=b"user-2", value=value).get(30)
        listed = dlq.list()
        assert listed[0] == letter and len(listed) == 4
        for foreign, offset in zip(listed[1:], (1, 2, 3), strict=True):
            assert (foreign.projection, foreign.partition, foreign.offset, foreign.key) == (
                "unknown",
                0,
                offset,
                "user-2",
            )
            assert foreign.reason.startswith("not a dead letter of the ledger")
    finally:
        producer.close()
        dlq.close()


def test_a_distributed_build_that_fails_after_the_kafka_log_closes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str
) -> None:
    kafka_log = _kafka()
    closed: list[object] = []
    real_close = kafka_log.KafkaEventLog.close

    def close(self: Any) -> None:
        closed.append(self)
        real_close(self)

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise EventLogError("cannot reach Kafka for the DLQ")

    monkeypatch.setattr(kafka_log.KafkaEventLog, "close", close)
    monkeypatch.setattr(kafka_log, "KafkaDeadLetterQueue", unreachable)
    build = importlib.import_module("workers.bootstrap").build
    with pytest.raises(EventLogError, match="for the DLQ"):
        build(distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url))
    assert len(closed) == 1  # its producer and consumer did not outlive the failed build
