"""The topic settings the ledger's guarantees need (``ledger.topics``) and how a tombstone
reader tells that its topic was created again (``ledger.tombstone_log.recreated``)."""

from __future__ import annotations

from ledger import topics
from ledger.tombstone_log import recreated

GOOD_EVENTS = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def test_an_events_topic_that_keeps_everything_in_the_expected_partitions_fits() -> None:
    spec = topics.events_topic("memory.events", 6)
    assert topics.problems(spec, topics.TopicState("memory.events", True, "id", 6, GOOD_EVENTS)) == []


def test_each_wrong_setting_is_named_with_what_it_must_be() -> None:
    spec = topics.events_topic("memory.events", 6)
    found = topics.TopicState("memory.events", True, "id", 3, GOOD_EVENTS | {"retention.ms": "604800000"})
    wrong = {(p.setting, p.required, p.found) for p in topics.problems(spec, found)}
    assert wrong == {("partitions", "6", "3"), ("retention.ms", "-1", "604800000")}


def test_a_compacted_events_topic_is_refused() -> None:
    spec = topics.events_topic("memory.events", 6)
    found = topics.TopicState("memory.events", True, "id", 6, GOOD_EVENTS | {"cleanup.policy": "compact"})
    (problem,) = topics.problems(spec, found)
    assert str(problem) == "topic memory.events: cleanup.policy: must be delete, is compact"


def test_a_tombstone_topic_must_be_compacted_for_ever_and_exist() -> None:
    spec = topics.tombstone_topic("memory.tombstones")
    fine = topics.TopicState("memory.tombstones", True, "id", 1, GOOD_EVENTS | {"cleanup.policy": "compact"})
    assert topics.problems(spec, fine) == []
    deleting = topics.TopicState("memory.tombstones", True, "id", 1, GOOD_EVENTS)
    assert [p.setting for p in topics.problems(spec, deleting)] == ["cleanup.policy"]
    (missing,) = topics.problems(spec, topics.TopicState("memory.tombstones", False))
    assert missing.setting == "exists" and "memledger topics create" in str(missing)


def test_a_topic_that_refuses_records_the_producer_sends_is_refused() -> None:
    for spec in (topics.events_topic("memory.events", 6), topics.tombstone_topic("memory.tombstones")):
        configs = GOOD_EVENTS | {"cleanup.policy": spec.configs["cleanup.policy"]}
        small = topics.TopicState(spec.name, True, "id", 6, configs | {"max.message.bytes": "65536"})
        (problem,) = topics.problems(spec, small)
        assert str(problem) == f"topic {spec.name}: max.message.bytes: must be at least 1048576, is 65536"
        default = topics.TopicState(spec.name, True, "id", 6, configs | {"max.message.bytes": "1048588"})
        assert topics.problems(spec, default) == []


def test_a_reader_sees_a_recreated_topic_by_its_offsets() -> None:
    assert not recreated({}, {0: 5})
    assert not recreated({0: 5, 1: 2}, {0: 7, 1: 2})
    assert recreated({0: 5}, {0: 1})  # the partition ends before where it was read to
    assert recreated({0: 5, 1: 2}, {0: 5})  # a partition is gone
    assert not recreated({0: 5}, {})  # the topic cannot be seen right now: nothing to judge by
