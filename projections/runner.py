"""Feeding log records to a projection in two steps: decode, then apply.

The decode step (:func:`decode_records`) is pure and shared by every projection of a
pass over the log: each record is read and decoded once, whatever number of projections
it feeds. It skips records every projection has applied already, and says for each
other record what becomes of it: a valid event to apply, a dead letter (with the reason),
or a stall. The apply step (:meth:`ProjectionRunner.apply`) is each projection's own: it
skips what that projection has applied (its own stored positions), applies the events in
log order with retries, dead-letters and stops as the decode step said.

A record that is not a valid event goes to the dead-letter queue with its partition,
offset and reason, and the projection moves past it (invariant 6), except a record that
claims to be an ``ErasureRequested``: one this reader cannot decode (malformed, or of a
schema version it cannot upcast) stops the projection with ``ProjectionStalledError``
instead, since an erasure is never skipped (invariant 3). A record that is a
valid event is never skipped: when its store fails, it is retried with exponential
backoff, and if ``max_attempts`` runs out the projection stops with
``ProjectionStalledError`` (invariant 3: an erasure is never skipped or dead-lettered).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from contracts import Event, UnknownEventError, decode_event
from ledger.eventlog import DeadLetter, DeadLetterQueue, EventLog, LogPosition, LogRecord
from projections.base import Projection
from projections.errors import ProjectionStalledError, UnreadableErasureError
from projections.opening import OpenedContent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``initial_s`` doubling up to ``max_s`` seconds between
    attempts; ``max_attempts`` None means retry until the store comes back."""

    initial_s: float = 0.2
    max_s: float = 10.0
    max_attempts: int | None = None


@dataclass(frozen=True)
class DecodedRecord:
    """What the decode step made of one log record.

    Exactly one of these holds: ``event`` is set (a valid event, to apply); ``stall`` is
    set (an ``ErasureRequested`` this reader cannot read: the projection stops at it,
    ``stall`` says why); or ``dead_letter`` is set (not a valid event: it goes to the
    dead-letter queue with that reason and the projection moves past it)."""

    record: LogRecord
    event: Event | None = None
    dead_letter: str | None = None
    stall: str | None = None


def decode_records(records: Sequence[LogRecord], done: Mapping[int, int]) -> list[DecodedRecord]:
    """The decode step: every record of ``records`` after ``done`` (the last applied
    offset per partition; a partition not in it: none), decoded once, in input order.

    Records at or before ``done`` are left out before they are decoded (a malformed one
    delivered again is not dead-lettered twice). For a pass that feeds several
    projections, ``done`` is the lowest position among them (:func:`lowest_positions`):
    each projection's apply step skips what it has applied itself. Pure: no I/O, never
    raises for a record's content.
    """
    out: list[DecodedRecord] = []
    for record in records:
        if record.offset <= done.get(record.partition, -1):
            continue
        try:
            event = decode_event(record.value)
        except UnknownEventError as exc:
            if exc.event_type == "ErasureRequested":
                out.append(DecodedRecord(record, stall=f"unreadable erasure: {exc.reason}"))
            else:
                out.append(DecodedRecord(record, dead_letter=exc.reason))
            continue
        if event.subject_id != record.key:
            reason = f"subject_id: {event.subject_id!r} differs from the record key {record.key!r}"
            out.append(DecodedRecord(record, dead_letter=reason))
            continue
        out.append(DecodedRecord(record, event=event))
    return out


def lowest_positions(positions: Sequence[Mapping[int, int]]) -> dict[int, int]:
    """Per partition, the lowest of several projections' last applied offsets (a
    partition missing from one of them counts as -1, nothing applied): what every one of
    them has applied."""
    partitions = {p for done in positions for p in done}
    return {p: min(done.get(p, -1) for done in positions) for p in partitions}


def apply_batch_to(
    projection: Projection, items: Sequence[tuple[Event, LogPosition]], opened: OpenedContent | None = None
) -> None:
    """Apply ``items`` (in log order) to ``projection``: its ``apply_batch`` when it has
    one, given ``opened`` (the batch's content, opened once for a pass) when the
    projection reads text (``opens_content``); else ``apply`` event by event. Raises what
    the projection raises."""
    batch = getattr(projection, "apply_batch", None)
    if batch is None:
        for event, position in items:
            projection.apply(event, position)
    elif opened is not None and getattr(projection, "opens_content", False):
        batch(items, opened)
    else:
        batch(items)


class ProjectionRunner:
    """Runs one projection over records; ``catch_up`` reads the log to its end."""

    def __init__(
        self,
        projection: Projection,
        dlq: DeadLetterQueue,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.projection = projection
        self._dlq = dlq
        self._retry = retry or RetryPolicy()
        self._sleep = sleep

    def handle(self, records: Sequence[LogRecord]) -> None:
        """Decode ``records`` (in log order) and apply them: :func:`decode_records` from
        the projection's stored positions, then :meth:`apply`. Raises
        ``ProjectionStalledError`` at an unreadable erasure, or if a store stays down
        beyond the retry policy."""
        done = self.projection.positions() if records else {}
        self.apply(decode_records(records, done), done)

    def apply(
        self,
        decoded: Sequence[DecodedRecord],
        done: Mapping[int, int] | None = None,
        opened: OpenedContent | None = None,
    ) -> None:
        """The apply step of this projection: the decoded records after its own stored
        positions (``done`` when the caller has just read them, else read here), in log
        order. Runs of valid events are applied as one batch each (``apply_batch`` when
        the projection has it, given ``opened``, the batch's content opened once for
        every projection of a pass, when the projection reads text: its
        ``opens_content``), retried with backoff; a dead letter is put in the queue and
        skipped once what precedes it is applied.

        Raises:
            ProjectionStalledError: at a stall (what precedes it is applied first; it is
                neither dead-lettered nor skipped), or when a store stays down beyond the
                retry policy (naming the first record not applied).
        """
        if done is None:
            done = self.projection.positions() if decoded else {}
        pending: list[tuple[Event, LogPosition]] = []
        for item in decoded:
            record = item.record
            if record.offset <= done.get(record.partition, -1):
                continue
            if item.event is not None:
                pending.append((item.event, record.position))
                continue
            self._with_retry(pending, opened)
            pending = []
            if item.stall is not None:
                log.error("%s: cannot read the erasure at %s: %s", self.projection.id, record.position, item.stall)
                raise UnreadableErasureError(self.projection.id, record.partition, record.offset, 1, item.stall)
            self._dead_letter(record, item.dead_letter or "not a valid event")
        self._with_retry(pending, opened)

    def _dead_letter(self, record: LogRecord, reason: str) -> None:
        log.warning(
            "%s: dead-lettering partition %d offset %d: %s", self.projection.id, record.partition, record.offset, reason
        )
        letter = DeadLetter(self.projection.id, record.partition, record.offset, record.key, record.value, reason)

        def put_and_skip() -> None:
            self._dlq.put(letter)
            self.projection.skip(record.position)

        self._call_with_retry(put_and_skip, record.position)

    def _with_retry(self, items: list[tuple[Event, LogPosition]], opened: OpenedContent | None = None) -> None:
        """Apply ``items`` as one batch, retrying the batch with backoff (each apply is
        idempotent, so a partly applied batch is safe to retry). A stall names the first
        record of the batch that the projection has not applied."""
        if not items:
            return
        try:
            self._call_with_retry(lambda: apply_batch_to(self.projection, items, opened), items[0][1])
        except ProjectionStalledError as stall:
            try:
                done = self.projection.positions()
            except Exception:  # the store is down: the batch's first record is the best we know
                raise stall from stall.__cause__
            first = next((p for _, p in items if p.offset > done.get(p.partition, -1)), items[0][1])
            raise ProjectionStalledError(
                self.projection.id, first.partition, first.offset, stall.attempts, str(stall.__cause__)
            ) from stall.__cause__

    def _call_with_retry(self, action: Callable[[], object], position: LogPosition) -> None:
        limit = self._retry.max_attempts
        attempt = 0
        delay = self._retry.initial_s
        while True:
            attempt += 1
            try:
                action()
                return
            except Exception as exc:  # a store failure of any kind: retry, never skip
                if limit is not None and attempt >= limit:
                    raise ProjectionStalledError(
                        self.projection.id, position.partition, position.offset, attempt, repr(exc)
                    ) from exc
                log.error(
                    "%s: attempt %d failed at partition %d offset %d (%s); retrying in %.1fs",
                    self.projection.id,
                    attempt,
                    position.partition,
                    position.offset,
                    exc,
                    delay,
                )
                self._sleep(delay)
                delay = min(delay * 2, self._retry.max_s)

    def lag(self, log_: EventLog) -> dict[int, int]:
        """Records not yet applied, per partition."""
        done = self.projection.positions()
        return {p: max(0, end - (done.get(p, -1) + 1)) for p, end in log_.end_offsets().items()}

    def catch_up(
        self,
        log_: EventLog,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
        lock: AbstractContextManager[object] | None = None,
        on_stall: Callable[[UnreadableErasureError], None] | None = None,
    ) -> int:
        """Apply every record from the stored positions to the current end of the log.
        Returns the number of records handled; ``progress`` gets each batch's size;
        ``lock``, when given, is held while each batch is applied (another user of the
        store, e.g. an erasure lane, waits for one batch at most).

        ``on_stall``, when given, is told of an unreadable erasure and the catch-up goes
        on with the next partition (that partition stops at the erasure); without it the
        error is raised.

        Raises:
            UnreadableErasureError: without ``on_stall``, at an unreadable erasure.
            ProjectionStalledError: a store stayed down beyond the retry policy.
        """
        handled = 0
        ends = log_.end_offsets()
        for partition, end in ends.items():
            offset = self.projection.positions().get(partition, -1) + 1
            while offset < end:
                records = log_.read(partition, offset, min(batch_size, end - offset))
                if not records:
                    break
                try:
                    with lock or nullcontext():
                        self.handle(records)
                except UnreadableErasureError as stall:
                    if on_stall is None:
                        raise
                    on_stall(stall)
                    handled += sum(1 for r in records if r.offset < stall.offset)  # applied before it
                    break
                handled += len(records)
                offset = records[-1].offset + 1
                if progress is not None:
                    progress(len(records))
        return handled
