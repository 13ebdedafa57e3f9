"""The Kafka adapters close the clients they already built when a later step of their
construction fails, so no socket of a half-built adapter is left open (no I/O: the
kafka-python classes are replaced by fakes that record what happened to them)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from kafka.errors import KafkaConnectionError

from ledger import kafka_log, tombstone_log
from ledger.errors import EventLogError


class FakeClient:
    """Stands in for a KafkaProducer or KafkaConsumer: remembers every instance and
    whether (and how) it was closed."""

    built: ClassVar[list[FakeClient]] = []

    def __init__(self, **config: Any) -> None:
        self.config = config
        self.closed: dict[str, Any] | None = None
        FakeClient.built.append(self)

    def close(self, **kwargs: Any) -> None:
        self.closed = kwargs


class UnreachableConsumer:
    def __init__(self, **config: Any) -> None:
        raise KafkaConnectionError("no broker answered")


class FailingClose(FakeClient):
    def close(self, **kwargs: Any) -> None:
        super().close(**kwargs)
        raise OSError("socket already gone")


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeClient.built = []
    for module in (kafka_log, tombstone_log):
        monkeypatch.setattr(module, "KafkaProducer", FakeClient)
        monkeypatch.setattr(module, "KafkaConsumer", FakeClient)
    monkeypatch.setattr(tombstone_log.topics, "prepare", lambda *a, **kw: {})  # no broker to check topics on


@pytest.mark.parametrize("module", [kafka_log, tombstone_log])
def test_when_the_consumer_cannot_be_built_the_producer_is_closed(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    monkeypatch.setattr(module, "KafkaConsumer", UnreachableConsumer)
    with pytest.raises(EventLogError, match="cannot reach Kafka"):
        if module is kafka_log:
            kafka_log.KafkaEventLog("127.0.0.1:1", create_topics=False)
        else:
            tombstone_log.KafkaTombstoneLog("127.0.0.1:1")
    [producer] = FakeClient.built
    assert producer.closed == {"timeout": 5}


def test_when_the_topic_never_shows_both_clients_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_log.KafkaEventLog, "_wait_for_topic", lambda self, topic, timeout_s: set())
    with pytest.raises(EventLogError, match="does not exist"):
        kafka_log.KafkaEventLog("127.0.0.1:1", topic="missing", create_topics=False)
    producer, consumer = FakeClient.built
    assert producer.closed == {"timeout": 5} and consumer.closed == {}


def test_any_failure_while_waiting_for_the_topic_closes_both_and_is_raised_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupted(self: Any, topic: str, timeout_s: float) -> set[int]:
        raise KeyboardInterrupt

    monkeypatch.setattr(kafka_log.KafkaEventLog, "_wait_for_topic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        kafka_log.KafkaEventLog("127.0.0.1:1", create_topics=False)
    assert [c.closed is not None for c in FakeClient.built] == [True, True]


def test_an_error_while_closing_does_not_hide_the_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_log, "KafkaProducer", FailingClose)
    monkeypatch.setattr(kafka_log, "KafkaConsumer", UnreachableConsumer)
    with pytest.raises(EventLogError, match="cannot reach Kafka"):
        kafka_log.KafkaEventLog("127.0.0.1:1", create_topics=False)
    assert FakeClient.built[0].closed == {"timeout": 5}


def test_a_complete_adapter_keeps_its_clients_open_until_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeClient, "topics", lambda self: {"memory.events"}, raising=False)
    monkeypatch.setattr(FakeClient, "partitions_for_topic", lambda self, t: {0, 1}, raising=False)
    log = kafka_log.KafkaEventLog("127.0.0.1:1", create_topics=False)
    assert log.partitions == 2 and all(c.closed is None for c in FakeClient.built)
    log.close()
    assert all(c.closed is not None for c in FakeClient.built)
