"""The live worker's parts without I/O: batches with no fixed timer, the supervisor's
restart delay, and stalls that stop only their partition (an in-memory log and the
recording projection of the runner tests)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import Field

from contracts import ErasureRequested, MemoryRef, encode_event
from contracts.serialization import evolved
from ledger.eventlog import InMemoryDeadLetterQueue, InMemoryEventLog, LogPosition, partition_for, read_all
from projections.errors import UnreadableErasureError
from projections.runner import ProjectionRunner
from tests.unit.test_runner import NOW, RecordingProjection, _event_bytes
from workers.live.apply import PartitionStalls, handle_contiguously
from workers.live.batches import drain
from workers.live.supervisor import RestartBackoff

# --------------------------------------------------------------------------- batches


class QueueStream:
    """What ``drain`` uses of a faust stream: ``channel.queue`` and ``events()``, over an
    asyncio queue that the test fills."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.channel = self

    async def events(self) -> AsyncIterator[Any]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item


def test_a_batch_ends_when_nothing_more_is_queued_and_never_exceeds_its_maximum() -> None:
    async def scenario() -> list[list[int]]:
        stream = QueueStream()
        batches: list[list[int]] = []
        for n in range(5):  # five records fetched together
            stream.queue.put_nowait(n)

        async def consume() -> None:
            async for batch in drain(stream, max_records=3):
                batches.append(batch)

        task = asyncio.create_task(consume())
        while len(batches) < 2:
            await asyncio.sleep(0)
        lone = len(batches)
        stream.queue.put_nowait(5)  # a lone record later: its own batch, at once
        while len(batches) == lone:
            await asyncio.sleep(0)
        stream.queue.put_nowait(None)
        await task
        return batches

    assert asyncio.run(scenario()) == [[0, 1, 2], [3, 4], [5]]


def test_a_batch_of_no_records_is_refused() -> None:
    async def first() -> None:
        async for _ in drain(QueueStream(), max_records=0):
            pass

    with pytest.raises(ValueError, match="max_records: must be at least 1"):
        asyncio.run(first())


# --------------------------------------------------------------------------- supervisor


def test_restart_delay_doubles_while_a_child_keeps_crashing_and_resets_once_it_ran_stably() -> None:
    backoff = RestartBackoff(first_s=0.2, max_s=1.0, stable_s=30.0)
    child = ("facts", 1)
    assert backoff.delay_s(child, ran_s=100.0) == 0.2  # first exit: restarted at once
    assert [backoff.delay_s(child, ran_s=1.0) for _ in range(4)] == [0.4, 0.8, 1.0, 1.0]
    assert backoff.delay_s(("cache", 1), ran_s=1.0) == 0.2  # per child
    assert backoff.delay_s(child, ran_s=30.0) == 0.2  # it had run stably: short again


# --------------------------------------------------------------------------- stalls


class ErasureRequestedV2(ErasureRequested):
    """``ErasureRequested`` as a newer writer has it: this reader (v1) cannot read it."""

    schema_version: int = Field(default=2, ge=1)


def _erasure_v2(subject: str) -> bytes:
    with evolved((ErasureRequestedV2,), {("ErasureRequested", 1): lambda raw: raw}):
        return encode_event(
            ErasureRequestedV2(
                event_id=f"erase-{subject}",
                occurred_at=NOW,
                subject_id=subject,
                producer="test",
                correlation_id="c-erase",
                request_id=str(uuid.uuid4()),
                request_kind="memories",
                requested_by="test",
                reason="test",
                legal_basis="gdpr-17",
                affected=(MemoryRef(memory_id=str(uuid.UUID(int=1)), revision=1),),
            )
        )


def _subject_in(partition: int, partitions: int) -> str:
    return next(s for s in (f"user-{n}" for n in range(1000)) if partition_for(s, partitions) == partition)


def _log_with_unreadable_erasure(partitions: int = 3) -> tuple[InMemoryEventLog, str]:
    """Two events in every partition, then in partition 0 an erasure this reader cannot
    read followed by one more event; returns the log and partition 0's subject."""
    log = InMemoryEventLog(partitions=partitions)
    subjects = [_subject_in(p, partitions) for p in range(partitions)]
    n = 0
    for _ in range(2):
        for s in subjects:
            log.append(s, _event_bytes(s, n))
            n += 1
    log.append(subjects[0], _erasure_v2(subjects[0]))
    log.append(subjects[0], _event_bytes(subjects[0], 99))
    return log, subjects[0]


def test_catch_up_stops_only_the_partition_of_an_unreadable_erasure_and_an_upgraded_reader_goes_on() -> None:
    log, _ = _log_with_unreadable_erasure()
    projection = RecordingProjection()
    runner = ProjectionRunner(projection, InMemoryDeadLetterQueue())
    seen: list[UnreadableErasureError] = []

    with pytest.raises(UnreadableErasureError, match="partition 0 offset 2"):
        runner.catch_up(log)  # without on_stall: raised, as before
    runner.catch_up(log, on_stall=seen.append)

    assert [(s.partition, s.offset) for s in seen] == [(0, 2)]
    assert "newer than this reader" in seen[0].cause
    assert projection.applied_offsets(0) == [0, 1]  # stopped at the erasure, not past it
    assert projection.applied_offsets(1) == projection.applied_offsets(2) == [0, 1]
    assert projection.skipped == []  # never skipped, never dead-lettered

    with evolved((ErasureRequestedV2,), {("ErasureRequested", 1): lambda raw: raw}):  # the reader upgraded
        runner.catch_up(log, on_stall=seen.append)
    assert len(seen) == 1
    assert projection.applied_offsets(0) == [0, 1, 2, 3]  # on from the erasure itself


def test_live_batches_leave_a_stalled_partition_alone_and_apply_the_others() -> None:
    log, subject = _log_with_unreadable_erasure()
    projection = RecordingProjection()
    runner = ProjectionRunner(projection, InMemoryDeadLetterQueue())
    recorded: list[tuple[int, int]] = []
    partition_stalls = PartitionStalls(projection.id, lambda s: recorded.append((s.partition, s.offset)))
    records = read_all(log)
    after = [r for r in records if r.partition == 0 and r.offset >= 2]  # the erasure and what follows it

    assert handle_contiguously(log, runner, [r for r in records if r not in after], partition_stalls) == set()
    assert handle_contiguously(log, runner, after, partition_stalls) == {0}
    assert recorded == [(0, 2)]
    other = _subject_in(1, log.partitions)
    new = [log.append(subject, _event_bytes(subject, 100)), log.append(other, _event_bytes(other, 101))]
    delivered = [r for r in read_all(log) if r.position in new]
    assert handle_contiguously(log, runner, delivered, partition_stalls) == set()  # partition 0: stalled already

    assert projection.applied_offsets(0) == [0, 1]
    assert projection.applied_offsets(1) == [0, 1, 2]
    assert projection.applied_offsets(2) == [0, 1]
    assert recorded == [(0, 2)]


def test_live_batches_read_a_gap_the_consumer_skipped_from_the_log_first() -> None:
    log, _ = _log_with_unreadable_erasure()
    projection = RecordingProjection()
    runner = ProjectionRunner(projection, InMemoryDeadLetterQueue())
    partition_stalls = PartitionStalls(projection.id, lambda _: None)
    last_of_partition_1 = [r for r in read_all(log) if r.partition == 1][-1:]

    handle_contiguously(log, runner, last_of_partition_1, partition_stalls)

    assert projection.applied_offsets(1) == [0, 1]
    assert projection.positions() == {1: 1}
    assert LogPosition(1, 1) in [p for _, p in projection.applied]


def _child_exit(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> int:
    """``_run_child`` of a worker whose faust app raises ``error``, its process-wide
    effects (signal handlers, title, metrics mode) left out."""
    import setproctitle

    from workers.live import app, supervisor
    from workers.metrics import families
    from workers.settings import Settings

    def raising(*_: Any) -> None:
        raise error

    monkeypatch.setattr(supervisor.signal, "signal", lambda *_: None)
    monkeypatch.setattr(setproctitle, "setproctitle", lambda *_: None)
    monkeypatch.setattr(families, "use_multiprocess_values", lambda: None)
    monkeypatch.setattr(app, "run_faust", raising)
    return supervisor._run_child(Settings(), ("facts", 1))


def test_a_worker_whose_store_failed_says_so_in_one_line_and_a_bug_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    terminated = psycopg.OperationalError(
        "consuming input failed: terminating connection due to administrator command\n"
        "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally"
    )
    assert _child_exit(monkeypatch, terminated) == 70
    said = capsys.readouterr().err
    assert said == (
        "worker facts_v1: a store failed: consuming input failed: terminating connection due to administrator"
        " command server closed the connection unexpectedly This probably means the server terminated"
        " abnormally; exiting with 70\n"
    )
    assert _child_exit(monkeypatch, KeyError("bug")) == 70
    assert "Traceback (most recent call last)" in capsys.readouterr().err
