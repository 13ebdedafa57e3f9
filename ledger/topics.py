"""The Kafka topics the ledger's guarantees rest on, created and checked at start.

- the events topic (``memory.events``): every record kept for ever (``retention.ms`` and
  ``retention.bytes`` -1, ``cleanup.policy=delete``: compaction would keep only a
  subject's latest event), and exactly the configured partition count (the partition of
  a subject is its key's hash modulo that count: another count reorders subjects);
- the tombstone topic (``memory.tombstones``): ``cleanup.policy=compact`` and infinite
  retention (the latest tombstone of every memory kept for ever: a time or size limit
  would lose tombstones, the copy that survives a restored PostgreSQL);
- the dead-letter topic (``memory.dlq``): must exist; its retention is the operator's.

The events and tombstone topics also take records of ``MIN_MESSAGE_BYTES`` at least
(``max.message.bytes``): a record the broker refuses for its size stays in the ledger's
outbox, and every later record of its subject waits behind it.

``prepare`` creates what is missing (when allowed) and refuses a topic whose settings
differ, naming the topic and the setting (``TopicMisconfiguredError``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from ledger.errors import EventLogError, TopicMisconfiguredError

log = logging.getLogger(__name__)

KEEP_FOR_EVER = {"retention.ms": "-1", "retention.bytes": "-1"}

MIN_MESSAGE_BYTES = 1_048_576
"""The smallest ``max.message.bytes`` of the events and tombstone topics: the producer's
own limit (kafka-python's ``max_request_size`` default, 1 MiB), so a record the producer
sends is never refused by the topic for its size (Kafka's default is 1 048 588)."""

TAKES_RECORDS = {"max.message.bytes": MIN_MESSAGE_BYTES}
"""The minimum the events and tombstone topics must meet (``TopicSpec.minimums``)."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic and the settings it must have: ``partitions`` (``None``: any count),
    ``configs`` (setting -> required value) and ``minimums`` (setting -> smallest
    integer value)."""

    name: str
    role: str
    partitions: int | None
    configs: dict[str, str]
    minimums: dict[str, int] = field(default_factory=dict)


def events_topic(name: str, partitions: int) -> TopicSpec:
    """The events topic: infinite retention, no compaction, ``partitions`` partitions."""
    return TopicSpec(name, "events", partitions, {"cleanup.policy": "delete", **KEEP_FOR_EVER}, dict(TAKES_RECORDS))


def tombstone_topic(name: str) -> TopicSpec:
    """The tombstone topic: compacted, infinite retention (any partition count: its
    readers read every partition)."""
    return TopicSpec(name, "tombstones", None, {"cleanup.policy": "compact", **KEEP_FOR_EVER}, dict(TAKES_RECORDS))


def dlq_topic(name: str) -> TopicSpec:
    """The dead-letter topic: must exist; its settings are the operator's."""
    return TopicSpec(name, "dead letters", None, {})


@dataclass(frozen=True)
class TopicState:
    """What ``describe`` found of one topic: whether it exists, its id (changes when the
    topic is deleted and created again), its partition count and settings."""

    name: str
    exists: bool
    topic_id: str | None = None
    partitions: int = 0
    configs: dict[str, str] | None = None


def problems(spec: TopicSpec, found: TopicState) -> list[TopicMisconfiguredError]:
    """How ``found`` differs from ``spec``: one error per setting (empty when it fits)."""
    if not found.exists:
        return [TopicMisconfiguredError(spec.name, "exists", "yes", "missing")]
    out: list[TopicMisconfiguredError] = []
    if spec.partitions is not None and found.partitions != spec.partitions:
        out.append(TopicMisconfiguredError(spec.name, "partitions", str(spec.partitions), str(found.partitions)))
    configs = found.configs or {}
    for setting, required in spec.configs.items():
        if configs.get(setting) != required:
            out.append(TopicMisconfiguredError(spec.name, setting, required, configs.get(setting, "unset")))
    for setting, least in spec.minimums.items():
        value = configs.get(setting)
        if value is not None and not (value.lstrip("-").isdigit() and int(value) >= least):
            out.append(TopicMisconfiguredError(spec.name, setting, f"at least {least}", value))
    return out


def _admin(bootstrap: str) -> KafkaAdminClient:
    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="memledger-admin")
    except KafkaError as exc:
        raise EventLogError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc


def describe(bootstrap: str, names: Sequence[str]) -> dict[str, TopicState]:
    """The state of each named topic on the broker.

    Raises:
        EventLogError: the broker could not be reached or refused the request.
    """
    admin = _admin(bootstrap)
    try:
        existing = set(admin.list_topics())
        present = [n for n in names if n in existing]
        found = {n: TopicState(n, False) for n in names if n not in existing}
        if present:
            topics = {t["name"]: t for t in admin.describe_topics(present)}
            resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in present]
            configs = _flat_configs(admin.describe_configs(resources, config_filter="all"))
            for n in present:
                t = topics.get(n, {})
                found[n] = TopicState(n, True, str(t.get("topic_id")), len(t.get("partitions", [])), configs.get(n, {}))
        return found
    except KafkaError as exc:
        raise EventLogError(f"describing topics on {bootstrap} failed: {exc}") from exc
    finally:
        admin.close()


def _flat_configs(response: Any) -> dict[str, dict[str, str]]:
    """``describe_configs``' answer ({type: {topic: {setting: {"value": ...}}}}) as
    {topic: {setting: value}}."""
    out: dict[str, dict[str, str]] = {}
    for by_name in (response or {}).values():
        for name, settings in by_name.items():
            out[name] = {k: str(v.get("value")) for k, v in settings.items() if isinstance(v, dict)}
    return out


def create_missing(bootstrap: str, specs: Sequence[TopicSpec], partitions: int) -> list[str]:
    """Create the topics of ``specs`` that do not exist, with their required settings
    (``partitions`` where the spec does not fix a count; replication factor 1, a single
    broker). Returns the names created.

    Raises:
        EventLogError: the broker could not be reached or refused.
    """
    found = describe(bootstrap, [s.name for s in specs])
    missing = [s for s in specs if not found[s.name].exists]
    if not missing:
        return []
    admin = _admin(bootstrap)
    try:
        new = [NewTopic(s.name, s.partitions or partitions, 1, topic_configs=dict(s.configs)) for s in missing]
        try:
            admin.create_topics(new)
        except TopicAlreadyExistsError:  # another process created one of them meanwhile
            pass
        admin.wait_for_topics([s.name for s in missing], timeout_ms=15_000)
    except KafkaError as exc:
        raise EventLogError(f"creating topics on {bootstrap} failed: {exc}") from exc
    finally:
        admin.close()
    for s in missing:
        log.info("created %s topic %s", s.role, s.name)
    return [s.name for s in missing]


def prepare(bootstrap: str, specs: Sequence[TopicSpec], partitions: int, create: bool) -> dict[str, TopicState]:
    """Check every topic of ``specs`` (creating missing ones first when ``create``);
    returns their states.

    Raises:
        TopicMisconfiguredError: a topic is missing (and ``create`` is false) or one of its
            settings differs: the first problem, naming the topic and the setting.
        EventLogError: the broker could not be reached or refused.
    """
    if create:
        create_missing(bootstrap, specs, partitions)
    found = describe(bootstrap, [s.name for s in specs])
    for spec in specs:
        wrong = problems(spec, found[spec.name])
        if wrong:
            raise wrong[0]
    return found
