"""The ``EventLog`` port: an append-only, partitioned log of event bytes keyed by subject.

Offsets follow Kafka's meaning: the offset of a record is its position in its
partition, starting at 0; a consumer that has processed offset ``n`` resumes at
``n + 1``. All events of one subject go to one partition (the key is ``subject_id``),
so they are totally ordered.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

TOPIC = "memory.events"
DLQ_TOPIC = "memory.dlq"

MAX_EVENT_BYTES = 1_000_000
"""The largest encoded event a command may append, bytes: under the producer's 1 MiB
request limit (``ledger.topics.MIN_MESSAGE_BYTES``) with room for the key and the record
batch's headers. A bigger one is refused before anything is written (a record the broker
refuses would stay in the outbox, its subject's later records behind it); the same rule
holds in the embedded default, so a log moved to Kafka takes every event it holds."""


@dataclass(frozen=True)
class LogPosition:
    """Where a record sits: ``partition`` and ``offset`` within it."""

    partition: int
    offset: int


@dataclass(frozen=True)
class LogRecord:
    """One record read from the log. ``timestamp_ms`` is UTC milliseconds since the epoch."""

    partition: int
    offset: int
    key: str
    value: bytes
    timestamp_ms: int

    @property
    def position(self) -> LogPosition:
        return LogPosition(self.partition, self.offset)


class EventLog(Protocol):
    """An append-only log. ``append`` returns only once the record is durable."""

    topic: str

    @property
    def partitions(self) -> int:
        """Number of partitions (fixed for the life of the log)."""
        ...

    def append(self, key: str, value: bytes) -> LogPosition:
        """Append one record; raises ``EventLogError`` if it cannot be made durable."""
        ...

    def append_batch(self, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        """Append several (key, value) records; positions in input order. Durable on return."""
        ...

    def read(self, partition: int, from_offset: int, max_records: int = 500) -> list[LogRecord]:
        """Records of ``partition`` with offset >= ``from_offset``, in order, at most
        ``max_records``; an empty list at the end of the partition."""
        ...

    def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset the next appended record will get (the high watermark)."""
        ...

    def close(self) -> None:
        """Release connections; idempotent."""
        ...


def partition_for(key: str, partitions: int) -> int:
    """A stable partition for ``key`` (CRC-32 of its UTF-8 bytes, modulo ``partitions``).

    Used by the logs this project implements itself; the Kafka adapter leaves the
    choice to the client's default partitioner, which is equally stable per key.
    """
    return zlib.crc32(key.encode("utf-8")) % partitions


class InMemoryEventLog:
    """A real, thread-safe, in-memory ``EventLog`` for tests and single-process use."""

    def __init__(self, partitions: int = 1, topic: str = TOPIC) -> None:
        if partitions < 1:
            raise ValueError("partitions: must be at least 1")
        self.topic = topic
        self._records: list[list[LogRecord]] = [[] for _ in range(partitions)]
        self._lock = threading.Lock()

    @property
    def partitions(self) -> int:
        return len(self._records)

    def append(self, key: str, value: bytes) -> LogPosition:
        partition = partition_for(key, self.partitions)
        with self._lock:
            records = self._records[partition]
            record = LogRecord(partition, len(records), key, value, int(time.time() * 1000))
            records.append(record)
        return record.position

    def append_batch(self, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        return [self.append(k, v) for k, v in items]

    def read(self, partition: int, from_offset: int, max_records: int = 500) -> list[LogRecord]:
        with self._lock:
            return list(self._records[partition][from_offset : from_offset + max_records])

    def end_offsets(self) -> dict[int, int]:
        with self._lock:
            return {p: len(r) for p, r in enumerate(self._records)}

    def close(self) -> None:
        return None


def iter_records(log: EventLog, partitions: Sequence[int] | None = None) -> Iterator[LogRecord]:
    """Every record of the given partitions (all by default) up to their current ends,
    partition by partition, read a batch at a time."""
    ends = log.end_offsets()
    for partition in partitions if partitions is not None else range(log.partitions):
        offset = 0
        while offset < ends.get(partition, 0):
            batch = log.read(partition, offset)
            if not batch:
                break
            yield from batch
            offset = batch[-1].offset + 1


def read_all(log: EventLog, partitions: Sequence[int] | None = None) -> list[LogRecord]:
    """Every record of the given partitions (all by default), partition by partition."""
    return list(iter_records(log, partitions))


@dataclass(frozen=True)
class DeadLetter:
    """A record a projection could not decode: where it was and why it was refused."""

    projection: str
    partition: int
    offset: int
    key: str
    value: bytes
    reason: str


class DeadLetterQueue(Protocol):
    """Where malformed or unknown records go (``memory.dlq``), so a projection can go on.
    Erasures are never dead-lettered."""

    def put(self, letter: DeadLetter) -> None:
        """Store the letter durably; raises ``EventLogError`` on failure."""
        ...

    def list(self, limit: int = 100) -> list[DeadLetter]:
        """The most recent letters, newest last."""
        ...


class InMemoryDeadLetterQueue:
    """A real in-memory ``DeadLetterQueue`` for tests."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    def put(self, letter: DeadLetter) -> None:
        self.letters.append(letter)

    def list(self, limit: int = 100) -> list[DeadLetter]:
        return self.letters[-limit:]
