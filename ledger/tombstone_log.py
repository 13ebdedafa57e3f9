"""The tombstone registry as a log: one record per erased memory, on a compacted topic.

The ``tombstones`` table in Postgres is the ledger's registry of erased memories. In the
distributed mode the ledger also writes every tombstone to a compacted Kafka topic
(default ``memory.tombstones``): key = ``memory_id``, value = a small JSON object
``{"subject_id", "request_id", "erased_at"}`` (never any content). Compaction keeps the
latest record per memory for ever, so the topic is a second, independent copy of the
registry, held by a different system with its own replication and backups.

Why a second copy: a Postgres database restored from a backup taken before an erasure
brings back the erased memories' wrapped data keys *and* drops their tombstone rows. On
such a database alone, a replay would decrypt and re-project erased content. The
projections therefore treat a memory as erased when EITHER registry names it (the union;
the topic can only add tombstones, never remove one the table has), and check it before
applying any write-type event (``projections.tombstone_registry``).

A record with a null value (a Kafka compaction tombstone) retracts a tombstone: the
ledger sends one only when the erasure that published it failed before its event was
appended (nothing was erased).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from ledger import topics
from ledger.errors import EventLogError
from ledger.kafka_log import close_quietly

log = logging.getLogger(__name__)

TOMBSTONE_TOPIC = "memory.tombstones"


@dataclass(frozen=True)
class Tombstone:
    """One erased memory: whose it was, which request erased it and when (UTC)."""

    memory_id: str
    subject_id: str
    request_id: str
    erased_at: datetime

    def encode(self) -> bytes:
        """The record value: JSON with ``subject_id``, ``request_id``, ``erased_at`` (ISO 8601 UTC)."""
        body = {"subject_id": self.subject_id, "request_id": self.request_id, "erased_at": self.erased_at.isoformat()}
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, memory_id: str, value: bytes) -> Tombstone:
        """Parse a record value written by ``encode``.

        Raises:
            ValueError: not JSON of that shape, or ``erased_at`` without a timezone.
        """
        body = json.loads(value)
        erased_at = datetime.fromisoformat(body["erased_at"])
        if erased_at.tzinfo is None:
            raise ValueError("erased_at: must be timezone-aware (UTC)")
        return cls(memory_id, str(body["subject_id"]), str(body["request_id"]), erased_at)


def recreated(offsets: dict[int, int], ends: dict[int, int]) -> bool:
    """Whether a topic read up to ``offsets`` (partition -> next offset) was deleted and
    created again, judged by its current ``ends``: a partition ended before where it was
    read to, or gone. (A compacted topic's offsets never go back otherwise.)"""
    return bool(ends) and any(p not in ends or ends[p] < off for p, off in offsets.items() if off > 0)


class TombstoneLog(Protocol):
    """Where tombstones are published besides the Postgres table, and read back."""

    topic: str

    def publish(self, tombstones: Sequence[Tombstone]) -> None:
        """Make the tombstones durable (acknowledged by every in-sync replica).

        Raises:
            EventLogError: not acknowledged in time.
        """
        ...

    def retract(self, memory_ids: Sequence[str]) -> None:
        """Publish null values for these memories (their erasure failed). Best effort."""
        ...

    def read_from(self, offsets: dict[int, int]) -> tuple[list[tuple[str, Tombstone | None]], dict[int, int]]:
        """Every record from ``offsets`` (partition -> next offset; absent = 0) to the
        current end, as (memory_id, tombstone or None for a retraction), and the new
        offsets. Undecodable values are skipped (and logged).

        Raises:
            EventLogError: the topic cannot be read.
        """
        ...

    def close(self) -> None: ...


class InMemoryTombstoneLog:
    """A real, thread-safe in-memory ``TombstoneLog`` (one partition) for unit tests."""

    def __init__(self, topic: str = TOMBSTONE_TOPIC) -> None:
        self.topic = topic
        self.records: list[tuple[str, bytes | None]] = []
        self._lock = threading.Lock()

    def publish(self, tombstones: Sequence[Tombstone]) -> None:
        with self._lock:
            self.records += [(t.memory_id, t.encode()) for t in tombstones]

    def retract(self, memory_ids: Sequence[str]) -> None:
        with self._lock:
            self.records += [(m, None) for m in memory_ids]

    def read_from(self, offsets: dict[int, int]) -> tuple[list[tuple[str, Tombstone | None]], dict[int, int]]:
        with self._lock:
            start = offsets.get(0, 0)
            new = self.records[start:]
            end = len(self.records)
        return [(k, None if v is None else Tombstone.decode(k, v)) for k, v in new], {0: end}

    def close(self) -> None:
        return None


class KafkaTombstoneLog:
    """``TombstoneLog`` on a compacted Kafka topic (kafka-python). The producer is
    idempotent with ``acks=all``; reads use a group-less consumer. A topic deleted and
    created again is read again from the start: its id differs from the one the last read
    saw (the new topic may already hold as many records as the old one), or a partition
    ends before where it was read to.

    ``checked``: the caller has just checked the topic itself (``workers.bootstrap``
    judges every topic at once, and lets ``lag`` and ``dlq`` go on with a wrong setting
    to show it); otherwise it is checked here.

    Raises (constructor):
        EventLogError: Kafka cannot be reached.
        TopicMisconfiguredError: the topic is missing, or not compacted with infinite
            retention (``ledger.topics``; ``memledger topics create`` makes it).
    """

    def __init__(
        self, bootstrap: str, topic: str = TOMBSTONE_TOPIC, timeout_s: float = 30.0, *, checked: bool = False
    ) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        if not checked:  # never created here: a reader that made a missing topic would start from nothing
            topics.prepare(bootstrap, [topics.tombstone_topic(topic)], 1, create=False)
        with ExitStack() as built:  # if the consumer cannot be built, the producer is closed
            try:
                self._producer = KafkaProducer(
                    bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, client_id="memledger-tombstones"
                )
                built.callback(close_quietly, self._producer, timeout=5)
                self._consumer = KafkaConsumer(
                    bootstrap_servers=bootstrap,
                    enable_auto_commit=False,
                    group_id=None,
                    client_id="memledger-tombstones",
                )
                built.callback(self._consumer.close)
                self._admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="memledger-tombstones")
            except KafkaError as exc:
                raise EventLogError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
            built.pop_all()
        self._lock = threading.Lock()
        self._read_topic_id: str | None = None  # the topic id the offsets of the last read belong to

    def publish(self, tombstones: Sequence[Tombstone]) -> None:
        self._send([(t.memory_id, t.encode()) for t in tombstones])

    def retract(self, memory_ids: Sequence[str]) -> None:
        try:
            self._send([(m, None) for m in memory_ids])
        except EventLogError:
            log.exception("could not retract tombstones %s", list(memory_ids))

    def _send(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        if not items:
            return
        try:
            futures = [self._producer.send(self.topic, key=k.encode("utf-8"), value=v) for k, v in items]
            self._producer.flush(timeout=self._timeout_s)
            for f in futures:
                f.get(timeout=self._timeout_s)
        except KafkaError as exc:
            close_quietly(self._producer, timeout=0)  # as the event log's: the next publish gets a new producer
            try:
                self._producer = KafkaProducer(
                    bootstrap_servers=self._bootstrap,
                    acks="all",
                    enable_idempotence=True,
                    client_id="memledger-tombstones",
                )
            except KafkaError:
                log.warning("a new producer for %s could not be built yet", self.topic, exc_info=True)
            raise EventLogError(f"publishing tombstones to {self.topic} on {self._bootstrap} failed: {exc}") from exc

    def read_from(self, offsets: dict[int, int]) -> tuple[list[tuple[str, Tombstone | None]], dict[int, int]]:
        out: list[tuple[str, Tombstone | None]] = []
        with self._lock:
            try:
                parts = self._consumer.partitions_for_topic(self.topic) or set()
                tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
                ends = {tp.partition: int(o) for tp, o in self._consumer.end_offsets(tps).items()} if tps else {}
                topic_id = self._topic_id()
                replaced = bool(offsets) and self._read_topic_id not in (None, topic_id)
                if replaced or recreated(offsets, ends):
                    log.warning("%s was deleted and created again: reading it again from the start", self.topic)
                    offsets = {}
                self._read_topic_id = topic_id
                todo = [tp for tp in tps if offsets.get(tp.partition, 0) < ends[tp.partition]]
                new = dict(offsets) | {p: max(offsets.get(p, 0), 0) for p in ends}
                if not todo:
                    return out, new
                self._consumer.assign(todo)
                for tp in todo:
                    self._consumer.seek(tp, offsets.get(tp.partition, 0))
                deadline = time.monotonic() + self._timeout_s
                while any(self._consumer.position(tp) < ends[tp.partition] for tp in todo):
                    if time.monotonic() > deadline:
                        raise EventLogError(f"reading {self.topic}: not at its end after {self._timeout_s}s")
                    for tp, msgs in self._consumer.poll(timeout_ms=1000).items():
                        for m in msgs:
                            if m.offset >= ends[tp.partition]:
                                continue
                            key = (m.key or b"").decode("utf-8", "replace")
                            if m.value is None:
                                out.append((key, None))
                            else:
                                try:
                                    out.append((key, Tombstone.decode(key, m.value)))
                                except (ValueError, KeyError, TypeError) as exc:
                                    log.error("%s[%d]@%d: not a tombstone: %s", self.topic, m.partition, m.offset, exc)
                for tp in todo:
                    new[tp.partition] = ends[tp.partition]
            except KafkaError as exc:
                raise EventLogError(f"reading {self.topic} on {self._bootstrap} failed: {exc}") from exc
        return out, new

    def _topic_id(self) -> str | None:
        """The topic's id now (Kafka gives a topic a new id when it is created again), or
        ``None`` if the broker does not say. Raises ``KafkaError``."""
        described = self._admin.describe_topics([self.topic])
        found = described[0].get("topic_id") if described else None
        return None if found is None else str(found)

    def close(self) -> None:
        self._producer.close(timeout=5)
        self._consumer.close()
        self._admin.close()
