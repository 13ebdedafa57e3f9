"""Wrappers that count what the ports do, put around the adapters where the composition
root (``workers.bootstrap``) builds them, so that the ledger's and the projections' own
code stays free of metrics. Each delegates every call to the object it wraps and adds
its counts to ``workers.metrics.families``; attributes it does not define are the
wrapped object's."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from contracts import Event
from ledger.eventlog import DeadLetter, DeadLetterQueue, EventLog, LogPosition, LogRecord
from projections.base import Projection
from projections.opening import OpenedContent
from projections.recall import Recall, RecallResult
from projections.runner import apply_batch_to
from workers.metrics import families


class MeteredEventLog:
    """An ``EventLog`` that counts the events appended (``memledger_events_appended_total``,
    by type, once the log acknowledged them) and the appends that failed."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.topic = inner.topic

    @property
    def partitions(self) -> int:
        return self.inner.partitions

    def append(self, key: str, value: bytes) -> LogPosition:
        return self.append_batch([(key, value)])[0]

    def append_batch(self, items: Sequence[tuple[str, bytes]]) -> list[LogPosition]:
        """As the wrapped log's; raises what it raises (the failure is counted)."""
        try:
            positions = self.inner.append_batch(items)
        except Exception:
            families.APPEND_FAILURES.inc()
            raise
        for _, value in items:
            families.EVENTS_APPENDED.labels(families.event_type(value)).inc()
        return positions

    def read(self, partition: int, from_offset: int, max_records: int = 500) -> list[LogRecord]:
        return self.inner.read(partition, from_offset, max_records)

    def end_offsets(self) -> dict[int, int]:
        return self.inner.end_offsets()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def count_committed(types: Sequence[str]) -> None:
    """Count events the ledger's own PostgreSQL log committed (the embedded default, where
    no ``append_batch`` runs): ``memledger_events_appended_total`` by type."""
    for t in types:
        families.EVENTS_APPENDED.labels(t if t in families.EVENT_TYPE_NAMES else "other").inc()


class MeteredDeadLetterQueue:
    """A ``DeadLetterQueue`` that counts the letters put (``memledger_dead_letters_total``,
    by the projection that refused the record), once the queue stored them."""

    def __init__(self, inner: DeadLetterQueue) -> None:
        self.inner = inner

    def put(self, letter: DeadLetter) -> None:
        self.inner.put(letter)
        families.DEAD_LETTERS.labels(letter.projection).inc()

    def list(self, limit: int = 100) -> list[DeadLetter]:
        return self.inner.list(limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class MeteredRecall(Recall):
    """``Recall`` timed: ``memledger_recall_duration_seconds`` by result (``cache_hit``,
    ``cache_miss``, ``error``: the recall raised, e.g. a refused grant or a store down).
    Built with ``Recall``'s arguments."""

    def recall(self, *args: Any, **kwargs: Any) -> RecallResult:
        """``Recall.recall`` (same arguments, result and errors), timed."""
        started = time.perf_counter()
        try:
            result = super().recall(*args, **kwargs)
        except Exception:
            families.RECALL_SECONDS.labels("error").observe(time.perf_counter() - started)
            raise
        families.RECALL_SECONDS.labels("cache_hit" if result.cached else "cache_miss").observe(
            time.perf_counter() - started
        )
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class MeteredProjection:
    """A ``Projection`` whose batches are counted and timed
    (``memledger_projection_records_applied_total``,
    ``memledger_projection_batch_duration_seconds``, by projection id). A batch that
    raises is not counted (the runner retries it)."""

    def __init__(self, inner: Projection) -> None:
        self.inner = inner
        self.name = inner.name
        self.version = inner.version

    @property
    def id(self) -> str:
        return self.inner.id

    def positions(self) -> dict[int, int]:
        return self.inner.positions()

    def apply(self, event: Event, position: LogPosition) -> None:
        self.apply_batch([(event, position)])

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]], opened: OpenedContent | None = None) -> None:
        """The wrapped projection's ``apply_batch`` (given ``opened``, the content a pass
        opened once, when it reads text), or ``apply`` one by one when it has none."""
        started = time.perf_counter()
        apply_batch_to(self.inner, items, opened)
        families.BATCH_SECONDS.labels(self.inner.id).observe(time.perf_counter() - started)
        families.RECORDS_APPLIED.labels(self.inner.id).inc(len(items))

    def skip(self, position: LogPosition) -> None:
        self.inner.skip(position)

    def reset(self) -> None:
        self.inner.reset()

    def drop(self) -> None:
        self.inner.drop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def metered(projection: Projection) -> Projection:
    """``projection`` counted and timed (once: a wrapped one is returned as it is)."""
    return projection if isinstance(projection, MeteredProjection) else MeteredProjection(projection)
