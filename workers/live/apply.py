"""Applying what a live worker consumed: no offset skipped, and a stall stops only its partition.

The consumer group's committed offsets are only a hint of where to resume: a record the
projection has not applied (its stored position is behind the first record delivered)
is read from the log directly and applied first, and records at or before the position
are already done. A partition whose next record is an ``ErasureRequested`` this reader
cannot read stops there (``PartitionStalls``); the other partitions go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from psycopg_pool import ConnectionPool

from ledger.eventlog import EventLog, LogRecord
from projections import stalls
from projections.errors import UnreadableErasureError
from projections.runner import ProjectionRunner, decode_records

log = logging.getLogger(__name__)


class PartitionStalls:
    """The partitions on which projection version ``projection_id`` stopped at an
    unreadable erasure in this process (``stalled``: partition -> the error, naming the
    offset and the reason). Each new one is passed to ``record`` (``record_in(pool)``:
    into ``projection_stalls``, for ``lag`` and ``dlq``). A stalled partition stays
    stopped until the process restarts with a reader that can read the record."""

    def __init__(self, projection_id: str, record: Callable[[UnreadableErasureError], None]) -> None:
        self.projection_id = projection_id
        self._record = record
        self.stalled: dict[int, UnreadableErasureError] = {}

    def note(self, stall: UnreadableErasureError) -> None:
        """Stop ``stall.partition`` here and record why."""
        log.error(
            "%s: partition %d stopped at offset %d: %s (the other partitions go on; deploy a reader that"
            " can read it and restart the worker)",
            self.projection_id,
            stall.partition,
            stall.offset,
            stall.cause,
        )
        self.stalled[stall.partition] = stall
        self._record(stall)


def record_in(pool: ConnectionPool) -> Callable[[UnreadableErasureError], None]:
    """A ``PartitionStalls`` recorder that writes each stall to ``projection_stalls``
    (a failed write is logged: the partition is stopped all the same)."""

    def record(stall: UnreadableErasureError) -> None:
        try:
            with pool.connection() as conn:
                stalls.record(conn, stall.projection, stall.partition, stall.offset, stall.cause)
        except psycopg.Error as exc:
            log.warning("%s: could not record the stall of partition %d: %s", stall.projection, stall.partition, exc)

    return record


def handle_contiguously(
    log_: EventLog, runner: ProjectionRunner, records: list[LogRecord], partition_stalls: PartitionStalls
) -> set[int]:
    """Apply ``records`` (any order, any partitions) so that no offset is ever skipped;
    returns the partitions that stopped at an unreadable erasure during this call.

    Records of a partition already stalled are left alone. For each other partition, a
    gap between the stored position and the first record delivered is read from
    ``log_`` and applied first.

    Raises:
        RuntimeError: a gap cannot be read from the log.
        ProjectionStalledError: a store stayed down beyond the runner's retry policy.
    """
    done = runner.projection.positions()
    by_partition: dict[int, list[LogRecord]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        if record.partition not in partition_stalls.stalled:
            by_partition.setdefault(record.partition, []).append(record)
    newly: set[int] = set()
    for partition, batch in by_partition.items():
        try:
            _fill_gap(log_, runner, partition, done.get(partition, -1) + 1, batch[0].offset)
            runner.apply(decode_records(batch, done), done)
        except UnreadableErasureError as stall:
            partition_stalls.note(stall)
            newly.add(partition)
    return newly


def _fill_gap(log_: EventLog, runner: ProjectionRunner, partition: int, expected: int, first: int) -> None:
    """Read and apply ``partition``'s offsets ``expected .. first - 1`` from the log."""
    while expected < first:
        missing = log_.read(partition, expected, min(500, first - expected))
        if not missing:
            raise RuntimeError(f"partition {partition}: offsets {expected}..{first - 1} are not readable")
        log.warning(
            "%s: re-reading partition %d offsets %d..%d the consumer skipped",
            runner.projection.id,
            partition,
            missing[0].offset,
            missing[-1].offset,
        )
        runner.handle(missing)
        expected = missing[-1].offset + 1
