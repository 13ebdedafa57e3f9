"""The Kafka ``EventLog`` adapter (kafka-python).

The producer is idempotent with ``acks=all``: ``append`` returns only after every
in-sync replica has the record, and a retried send cannot duplicate it. The record key
is the UTF-8 ``subject_id``, so the client's default partitioner (murmur2 of the key)
puts all events of a subject in one partition. Reads use a group-less consumer with
explicit partition assignment; consumer groups belong to the workers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from ledger.errors import EventLogError
from ledger.eventlog import DLQ_TOPIC, TOPIC, DeadLetter, LogPosition, LogRecord

log = logging.getLogger(__name__)


def close_quietly(client: Any, **kwargs: Any) -> None:
    """Close a Kafka client built before a later step failed (``client.close(**kwargs)``).
    An error while closing is logged, not raised: the failure being reported is the
    caller's. Used as an ``ExitStack`` callback, so no socket of a half-built adapter
    stays open."""
    try:
        client.close(**kwargs)
    except Exception as exc:  # one line: the failure that made it close is the caller's to report
        log.warning("closing %s after a failure failed: %s: %s", type(client).__name__, type(exc).__name__, exc)
        log.debug("closing %s failed", type(client).__name__, exc_info=True)


def ensure_topics(
    bootstrap: str, partitions: int, topics: Sequence[str] = (TOPIC, DLQ_TOPIC), compacted: Sequence[str] = ()
) -> None:
    """Create the topics with the admin client when missing (replication factor 1 on a
    single broker). An existing topic is left as it is. Topics also named in
    ``compacted`` are created with ``cleanup.policy=compact`` (the latest record per key
    is kept for ever; a null value removes the key), the others keep every record.

    Raises:
        EventLogError: the broker could not be reached or refused the request.
    """
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="memledger-admin")
    except KafkaError as exc:
        raise EventLogError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        existing = set(admin.list_topics())
        # an event log keeps every record: no time or size retention
        keep = {"retention.ms": "-1", "retention.bytes": "-1"}
        compact = {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}
        missing = [
            NewTopic(
                t, num_partitions=partitions, replication_factor=1, topic_configs=compact if t in compacted else keep
            )
            for t in topics
            if t not in existing
        ]
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
    except KafkaError as exc:
        raise EventLogError(f"creating topics on {bootstrap} failed: {exc}") from exc
    finally:
        admin.close()


class KafkaEventLog:
    """``EventLog`` on a Kafka topic. ``send_timeout_s`` bounds how long ``append``
    waits for the broker's acknowledgement (seconds)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = TOPIC,
        partitions: int = 6,
        send_timeout_s: float = 30.0,
        create_topics: bool = True,
        dlq_topic: str = DLQ_TOPIC,
    ) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._send_timeout_s = send_timeout_s
        if create_topics:
            ensure_topics(bootstrap, partitions, (topic, dlq_topic))
        with ExitStack() as built:  # if a step below fails, the clients built so far are closed
            try:
                self._producer = self._new_producer()
                built.callback(close_quietly, self._producer, timeout=5)
                self._consumer = KafkaConsumer(
                    bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, client_id="memledger-reader"
                )
                built.callback(close_quietly, self._consumer)
            except KafkaError as exc:
                raise EventLogError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
            found = self._wait_for_topic(topic, timeout_s=15.0)
            if not found:
                raise EventLogError(f"topic {topic!r} does not exist on {bootstrap}", retriable=False)
            built.pop_all()  # complete: ``close`` closes them from now on
        self._partitions = len(found)
        self._read_lock = threading.Lock()

    def _new_producer(self) -> KafkaProducer:
        return KafkaProducer(
            bootstrap_servers=self._bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            client_id="memledger-ledger",
        )

    def _wait_for_topic(self, topic: str, timeout_s: float) -> set[int]:
        """Partitions of ``topic``; a topic created a moment ago takes a little while to
        show in the broker's metadata, so ask again until ``timeout_s`` seconds pass."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if topic in self._consumer.topics():  # refreshes the metadata
                    found = self._consumer.partitions_for_topic(topic)
                    if found:
                        return set(found)
            except KafkaError:
                pass
            if time.monotonic() > deadline:
                return set()
            time.sleep(0.2)

    @property
    def partitions(self) -> int:
        return self._partitions

    def append(self, key: str, value: bytes) -> LogPosition:
        return self.append_batch([(key, value)])[0]

    def append_batch(self, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        """Send every record, then wait for all acknowledgements; positions in input order.

        Raises:
            EventLogError: any record was not acknowledged within ``send_timeout_s``.
        """
        try:
            futures = [self._producer.send(self.topic, key=k.encode("utf-8"), value=v) for k, v in items]
            self._producer.flush(timeout=self._send_timeout_s)
            metas = [f.get(timeout=self._send_timeout_s) for f in futures]
        except KafkaError as exc:
            # a failed idempotent producer may keep failing (a sequence it cannot resume): the
            # next append gets a new one (what was not acknowledged stays in the outbox)
            close_quietly(self._producer, timeout=0)
            try:
                self._producer = self._new_producer()
            except KafkaError:
                log.warning("a new producer for %s could not be built yet", self.topic, exc_info=True)
            raise EventLogError(f"append to {self.topic} on {self._bootstrap} failed: {exc}") from exc
        return [LogPosition(m.partition, m.offset) for m in metas]

    def read(self, partition: int, from_offset: int, max_records: int = 500) -> list[LogRecord]:
        tp = TopicPartition(self.topic, partition)
        with self._read_lock:
            try:
                self._consumer.assign([tp])
                self._consumer.seek(tp, from_offset)
                end = self._consumer.end_offsets([tp])[tp]
                if from_offset >= end:
                    return []
                out: list[LogRecord] = []
                while len(out) < max_records:
                    batch = self._consumer.poll(timeout_ms=1000, max_records=max_records - len(out))
                    msgs = batch.get(tp, [])
                    if not msgs:
                        break
                    out.extend(
                        LogRecord(partition, m.offset, (m.key or b"").decode("utf-8", "replace"), m.value, m.timestamp)
                        for m in msgs
                    )
                    if out[-1].offset + 1 >= end:
                        break
            except KafkaError as exc:
                raise EventLogError(f"read of {self.topic}[{partition}] failed: {exc}") from exc
        return out

    def end_offsets(self) -> dict[int, int]:
        tps = [TopicPartition(self.topic, p) for p in range(self._partitions)]
        with self._read_lock:
            ends = self._consumer.end_offsets(tps)
        return {tp.partition: int(off) for tp, off in ends.items()}

    def close(self) -> None:
        self._producer.close(timeout=5)
        self._consumer.close()


FOREIGN = "unknown"
"""The projection of a record in the dead-letter topic that the ledger did not write."""


def _letter_of(m: Any) -> tuple[DeadLetter, int]:
    """The dead letter of a record of the dead-letter topic, and when it was put (ns, the
    putter's clock); a record the ledger did not write (not its JSON) is listed as one of
    projection ``unknown`` at its own place in the topic, never a failure of the listing."""
    try:
        b = json.loads(m.value)
        letter = DeadLetter(
            str(b["projection"]),
            int(b["partition"]),
            int(b["offset"]),
            str(b["key"]),
            base64.b64decode(b["value_b64"]),
            str(b["reason"]),
        )
        return letter, int(b.get("failed_at_ns", m.timestamp * 1_000_000))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # binascii.Error is a ValueError
        key = (m.key or b"").decode("utf-8", "replace")
        reason = f"not a dead letter of the ledger ({type(exc).__name__}), at the dead-letter topic's own position"
        return DeadLetter(FOREIGN, m.partition, m.offset, key, bytes(m.value or b""), reason), m.timestamp * 1_000_000


class KafkaDeadLetterQueue:
    """``DeadLetterQueue`` on the ``memory.dlq`` topic. The value is JSON with the
    projection, source partition and offset, reason, and the original key and value
    (base64); the record key is the original key."""

    def __init__(self, bootstrap: str, topic: str = DLQ_TOPIC) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)

    MAX_VALUE_BYTES = 256 * 1024
    """A dead letter keeps at most this many bytes of the original value (the rest is
    described by its length and SHA-256), so that it always fits in a Kafka record."""

    def put(self, letter: DeadLetter) -> None:
        kept = letter.value[: self.MAX_VALUE_BYTES]
        body = {
            "projection": letter.projection,
            "partition": letter.partition,
            "offset": letter.offset,
            "key": letter.key[:1024],
            "value_b64": base64.b64encode(kept).decode("ascii"),
            "value_bytes": len(letter.value),
            "value_sha256": hashlib.sha256(letter.value).hexdigest(),
            "reason": letter.reason,
            "failed_at_ns": time.time_ns(),
        }
        try:
            self._producer.send(self.topic, key=letter.key.encode("utf-8"), value=json.dumps(body).encode()).get(30)
        except KafkaError as exc:
            raise EventLogError(f"dead-lettering to {self.topic} failed: {exc}") from exc

    def list(self, limit: int = 100) -> list[DeadLetter]:
        consumer = KafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False, group_id=None)
        try:
            parts = consumer.partitions_for_topic(self.topic) or set()
            tps = [TopicPartition(self.topic, p) for p in parts]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)
            found: list[tuple[int, int, int, DeadLetter]] = []
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                for msgs in consumer.poll(timeout_ms=1000).values():
                    for m in msgs:
                        letter, at_ns = _letter_of(m)
                        found.append((at_ns, m.partition, m.offset, letter))
        finally:
            consumer.close()
        found.sort(key=lambda f: f[:3])  # put order: the putter's clock (ns), then position
        out = [f[3] for f in found]
        return out[-limit:]

    def close(self) -> None:
        self._producer.close(timeout=5)
