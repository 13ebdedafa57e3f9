"""ProjectionRunner without I/O: an in-memory log, an in-memory dead-letter queue and a
small real projection written here (it records what it applied and honours "already
applied"). Covers dead-lettering, retries with backoff, stalling, and catch-up."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from contracts import Event, MemoryConfirmed, encode_event
from ledger.eventlog import InMemoryDeadLetterQueue, InMemoryEventLog, LogPosition, LogRecord, read_all
from projections.errors import ProjectionStalledError
from projections.runner import ProjectionRunner, RetryPolicy, decode_records, lowest_positions

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class StoreDown(Exception):
    """What a failing store raises in these tests."""


class RecordingProjection:
    """A real projection over an in-memory store.

    ``applied`` holds (event_id, position) in the order they were applied; ``skipped``
    the positions the runner skipped. A position at or before the stored one for its
    partition is already applied and changes nothing. ``fail_times`` makes the next
    that many ``apply`` calls fail; ``fail_at`` makes every ``apply`` of that position fail.
    """

    name = "recording"
    version = 1

    def __init__(
        self,
        fail_times: int = 0,
        fail_at: LogPosition | None = None,
        positions: dict[int, int] | None = None,
    ) -> None:
        self.applied: list[tuple[str, LogPosition]] = []
        self.skipped: list[LogPosition] = []
        self.apply_calls = 0
        self._positions: dict[int, int] = dict(positions or {})
        self._fail_times = fail_times
        self._fail_at = fail_at

    @property
    def id(self) -> str:
        return f"{self.name}_v{self.version}"

    def positions(self) -> dict[int, int]:
        return dict(self._positions)

    def _done(self, position: LogPosition) -> bool:
        return position.offset <= self._positions.get(position.partition, -1)

    def apply(self, event: Event, position: LogPosition) -> None:
        self.apply_calls += 1
        if self._done(position):
            return
        if self._fail_times > 0:
            self._fail_times -= 1
            raise StoreDown(f"store down (applying {position})")
        if self._fail_at == position:
            raise StoreDown(f"store refuses {position}")
        self.applied.append((event.event_id, position))
        self._positions[position.partition] = position.offset

    def skip(self, position: LogPosition) -> None:
        if not self._done(position):
            self._positions[position.partition] = position.offset
        self.skipped.append(position)

    def reset(self) -> None:
        self.applied.clear()
        self.skipped.clear()
        self._positions.clear()

    def applied_ids(self) -> list[str]:
        return [event_id for event_id, _ in self.applied]

    def applied_offsets(self, partition: int = 0) -> list[int]:
        return [p.offset for _, p in self.applied if p.partition == partition]


class BatchProjection(RecordingProjection):
    """The same projection with ``apply_batch``, which the runner prefers."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def apply_batch(self, items: Sequence[tuple[Event, LogPosition]]) -> None:
        self.batches.append([event.event_id for event, _ in items])
        for event, position in items:
            self.apply(event, position)


class FakeSleep:
    """Records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _event_bytes(subject: str, n: int) -> bytes:
    return encode_event(
        MemoryConfirmed(
            event_id=f"e-{n}",
            occurred_at=NOW,
            subject_id=subject,
            producer="test",
            correlation_id=f"c-{n}",
            memory_id=str(uuid.UUID(int=n)),
            revision=2,
        )
    )


def _runner(
    projection: RecordingProjection, dlq: InMemoryDeadLetterQueue, retry: RetryPolicy | None = None
) -> tuple[ProjectionRunner, FakeSleep]:
    sleep = FakeSleep()
    return ProjectionRunner(projection, dlq, retry=retry or RetryPolicy(), sleep=sleep), sleep


# --------------------------------------------------------------------------- dead letters


def test_malformed_records_are_dead_lettered_and_valid_ones_around_them_applied_in_order() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))  # 0
    log.append("user-1", b"\xff\xfenot json")  # 1: garbage
    log.append("user-1", _event_bytes("user-1", 2))  # 2
    log.append("user-1", b"[1, 2, 3]")  # 3: not an object
    log.append("user-1", json.dumps({"type": "MemoryExploded", "subject_id": "user-1"}).encode())  # 4: unknown
    log.append("user-1", _event_bytes("user-1", 5))  # 5
    log.append("user-1", _event_bytes("user-1", 6))  # 6
    records = read_all(log)
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, sleep = _runner(projection, dlq)

    runner.handle(records)

    assert projection.applied_ids() == ["e-0", "e-2", "e-5", "e-6"]
    assert projection.applied_offsets() == [0, 2, 5, 6]
    assert [(d.partition, d.offset) for d in dlq.list()] == [(0, 1), (0, 3), (0, 4)]
    by_offset = {d.offset: d for d in dlq.list()}
    assert "not valid UTF-8 JSON" in by_offset[1].reason
    assert "JSON object" in by_offset[3].reason
    assert "MemoryExploded" in by_offset[4].reason
    for letter in dlq.list():
        assert letter.projection == projection.id
        assert letter.key == "user-1"
        assert letter.value == records[letter.offset].value
    assert projection.skipped == [LogPosition(0, 1), LogPosition(0, 3), LogPosition(0, 4)]
    assert projection.positions() == {0: 6}
    assert sleep.delays == []


def test_malformed_record_at_the_end_moves_the_position_past_it() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    log.append("user-1", b"{}")
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, _ = _runner(projection, dlq)

    runner.handle(read_all(log))

    assert projection.applied_ids() == ["e-0"]
    assert [(d.partition, d.offset) for d in dlq.list()] == [(0, 1)]
    assert "type" in dlq.list()[0].reason
    assert projection.positions() == {0: 1}


def test_a_malformed_record_delivered_again_is_not_dead_lettered_twice() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    log.append("user-1", b"{}")
    log.append("user-1", _event_bytes("user-1", 2))
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, _ = _runner(projection, dlq)

    runner.handle(read_all(log))
    runner.handle(read_all(log))  # a consumer group's redelivery after a catch-up from the positions

    assert [(d.partition, d.offset) for d in dlq.list()] == [(0, 1)]
    assert projection.applied_ids() == ["e-0", "e-2"]


def test_event_whose_subject_differs_from_the_record_key_is_dead_lettered() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    log.append("user-1", _event_bytes("user-2", 1))  # keyed user-1, about user-2
    log.append("user-1", _event_bytes("user-1", 2))
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, _ = _runner(projection, dlq)

    runner.handle(read_all(log))

    assert projection.applied_ids() == ["e-0", "e-2"]
    [letter] = dlq.list()
    assert (letter.partition, letter.offset, letter.key) == (0, 1, "user-1")
    assert "subject_id" in letter.reason
    assert "user-2" in letter.reason and "user-1" in letter.reason
    assert projection.positions() == {0: 2}


def test_dead_letters_keep_their_partition() -> None:
    log = InMemoryEventLog(partitions=4)
    keys = [f"user-{i}" for i in range(12)]
    for n, key in enumerate(keys):
        log.append(key, _event_bytes(key, n))
        log.append(key, b"garbage")
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, _ = _runner(projection, dlq)

    handled = runner.catch_up(log)

    assert handled == 2 * len(keys)
    garbage = {(r.partition, r.offset) for r in read_all(log) if r.value == b"garbage"}
    assert {(d.partition, d.offset) for d in dlq.list()} == garbage
    assert len({d.partition for d in dlq.list()}) > 1
    assert sorted(projection.applied_ids()) == sorted(f"e-{n}" for n in range(len(keys)))


# --------------------------------------------------------------------------- retries


def test_failing_store_is_retried_until_it_succeeds_with_doubling_capped_delays() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(3):
        log.append("user-1", _event_bytes("user-1", n))
    projection = RecordingProjection(fail_times=6)
    dlq = InMemoryDeadLetterQueue()
    runner, sleep = _runner(projection, dlq, RetryPolicy(initial_s=0.5, max_s=3.0, max_attempts=None))

    runner.handle(read_all(log))

    assert sleep.delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert projection.applied_ids() == ["e-0", "e-1", "e-2"]
    assert projection.positions() == {0: 2}
    assert dlq.list() == []


def test_retry_uses_the_default_policy_delays() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    projection = RecordingProjection(fail_times=2)
    runner = ProjectionRunner(projection, InMemoryDeadLetterQueue(), sleep=(sleep := FakeSleep()))

    runner.handle(read_all(log))

    default = RetryPolicy()
    assert sleep.delays == [default.initial_s, min(2 * default.initial_s, default.max_s)]
    assert projection.applied_ids() == ["e-0"]


def test_retry_does_not_apply_an_event_twice() -> None:
    """A failure in the middle of a batch retries the batch; what was applied stays applied once."""
    log = InMemoryEventLog(partitions=1)
    for n in range(4):
        log.append("user-1", _event_bytes("user-1", n))
    projection = RecordingProjection()
    runner, sleep = _runner(projection, InMemoryDeadLetterQueue(), RetryPolicy(initial_s=1, max_s=1))
    failing_once = iter([True])
    original_apply = projection.apply

    def apply_failing_once_at_2(event: Event, position: LogPosition) -> None:
        if position.offset == 2 and next(failing_once, False):
            raise StoreDown("blip")
        original_apply(event, position)

    projection.apply = apply_failing_once_at_2  # type: ignore[method-assign]
    runner.handle(read_all(log))

    assert projection.applied_ids() == ["e-0", "e-1", "e-2", "e-3"]
    assert sleep.delays == [1]


def test_runner_prefers_apply_batch_and_keeps_log_order() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(5):
        log.append("user-1", _event_bytes("user-1", n) if n != 2 else b"bad")
    projection = BatchProjection()
    runner, _ = _runner(projection, InMemoryDeadLetterQueue())

    runner.handle(read_all(log))

    assert projection.batches == [["e-0", "e-1"], ["e-3", "e-4"]]
    assert projection.applied_ids() == ["e-0", "e-1", "e-3", "e-4"]


def test_dead_letter_queue_failure_is_retried_not_skipped() -> None:
    class FlakyDlq(InMemoryDeadLetterQueue):
        def __init__(self) -> None:
            super().__init__()
            self.failures = 2

        def put(self, letter):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                raise StoreDown("dlq down")
            super().put(letter)

    log = InMemoryEventLog(partitions=1)
    log.append("user-1", b"garbage")
    log.append("user-1", _event_bytes("user-1", 1))
    projection = RecordingProjection()
    dlq = FlakyDlq()
    runner, sleep = _runner(projection, dlq, RetryPolicy(initial_s=0.25, max_s=10))

    runner.handle(read_all(log))

    assert [d.offset for d in dlq.list()] == [0]
    assert sleep.delays == [0.25, 0.5]
    assert projection.applied_ids() == ["e-1"]


# --------------------------------------------------------------------------- stalling


def test_permanently_failing_store_stalls_with_partition_and_offset() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(5):
        log.append("user-1", _event_bytes("user-1", n))
    projection = RecordingProjection(fail_at=LogPosition(0, 2))
    dlq = InMemoryDeadLetterQueue()
    runner, sleep = _runner(projection, dlq, RetryPolicy(initial_s=1, max_s=8, max_attempts=3))

    with pytest.raises(ProjectionStalledError) as info:
        runner.catch_up(log, batch_size=1)

    error = info.value
    assert (error.projection, error.partition, error.offset, error.attempts) == (projection.id, 0, 2, 3)
    assert "partition 0 offset 2" in str(error)
    assert "store refuses" in str(error)
    assert isinstance(error.__cause__, StoreDown)
    assert sleep.delays == [1, 2]
    assert projection.applied_offsets() == [0, 1]  # nothing at or after the failing record
    assert projection.positions() == {0: 1}
    assert dlq.list() == [], "a valid event is never dead-lettered"


def test_stalled_event_is_not_skipped_on_the_next_run() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(3):
        log.append("user-1", _event_bytes("user-1", n))
    projection = RecordingProjection(fail_at=LogPosition(0, 1))
    runner, _ = _runner(projection, InMemoryDeadLetterQueue(), RetryPolicy(max_attempts=2))
    with pytest.raises(ProjectionStalledError):
        runner.catch_up(log, batch_size=1)
    assert projection.positions() == {0: 0}

    projection._fail_at = None  # the store is back
    assert runner.catch_up(log) == 2
    assert projection.applied_offsets() == [0, 1, 2]


def test_stall_inside_a_batch_names_the_failing_record() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(5):
        log.append("user-1", _event_bytes("user-1", n))
    projection = RecordingProjection(fail_at=LogPosition(0, 2))
    runner, _ = _runner(projection, InMemoryDeadLetterQueue(), RetryPolicy(max_attempts=3))

    with pytest.raises(ProjectionStalledError) as info:
        runner.handle(read_all(log))

    assert projection.applied_offsets() == [0, 1]
    assert (info.value.partition, info.value.offset) == (0, 2)


def test_stall_inside_a_batch_applies_nothing_after_the_failing_record() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(5):
        log.append("user-1", _event_bytes("user-1", n))
    log.append("user-1", b"garbage")  # 5: must not be dead-lettered past the stall
    projection = RecordingProjection(fail_at=LogPosition(0, 2))
    dlq = InMemoryDeadLetterQueue()
    runner, sleep = _runner(projection, dlq, RetryPolicy(initial_s=0.1, max_attempts=3))

    with pytest.raises(ProjectionStalledError) as info:
        runner.handle(read_all(log))

    assert info.value.partition == 0
    assert info.value.attempts == 3
    assert sleep.delays == [0.1, 0.2]
    assert projection.applied_offsets() == [0, 1]
    assert projection.positions() == {0: 1}
    assert dlq.list() == []
    assert projection.skipped == []


def test_max_attempts_one_does_not_sleep() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    projection = RecordingProjection(fail_at=LogPosition(0, 0))
    runner, sleep = _runner(projection, InMemoryDeadLetterQueue(), RetryPolicy(max_attempts=1))
    with pytest.raises(ProjectionStalledError) as info:
        runner.handle(read_all(log))
    assert (info.value.offset, info.value.attempts) == (0, 1)
    assert sleep.delays == []
    assert projection.applied == []


# --------------------------------------------------------------------------- catch-up


def _fill(log: InMemoryEventLog, subjects: int, per_subject: int) -> list[tuple[str, int]]:
    """Append ``per_subject`` events for each subject, interleaved; returns (key, n) in append order."""
    appended = []
    n = 0
    for _ in range(per_subject):
        for s in range(subjects):
            key = f"user-{s}"
            log.append(key, _event_bytes(key, n))
            appended.append((key, n))
            n += 1
    return appended


def test_catch_up_applies_everything_in_partition_order_and_is_idempotent() -> None:
    log = InMemoryEventLog(partitions=3)
    appended = _fill(log, subjects=7, per_subject=5)
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, _ = _runner(projection, dlq)
    progress: list[int] = []

    assert runner.lag(log) == log.end_offsets()
    handled = runner.catch_up(log, batch_size=4, progress=progress.append)

    assert handled == len(appended) == 35
    assert sum(progress) == handled
    assert max(progress) <= 4
    assert sorted(projection.applied_ids()) == sorted(f"e-{n}" for _, n in appended)
    for partition in range(log.partitions):
        offsets = projection.applied_offsets(partition)
        assert offsets == list(range(log.end_offsets()[partition]))
    # per subject, events are applied in the order they were appended
    key_of = {f"e-{n}": key for key, n in appended}
    for s in range(7):
        key = f"user-{s}"
        applied_for_key = [eid for eid in projection.applied_ids() if key_of[eid] == key]
        assert applied_for_key == [f"e-{n}" for k, n in appended if k == key]
    assert runner.lag(log) == dict.fromkeys(range(3), 0)
    assert projection.positions() == {p: end - 1 for p, end in log.end_offsets().items() if end}

    applied_before = list(projection.applied)
    assert runner.catch_up(log) == 0
    assert projection.applied == applied_before
    assert dlq.list() == []


def test_catch_up_resumes_from_stored_positions() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(10):
        log.append("user-1", _event_bytes("user-1", n))
    projection = RecordingProjection(positions={0: 5})  # offsets 0..5 were applied by an earlier run
    runner, _ = _runner(projection, InMemoryDeadLetterQueue())

    assert runner.lag(log) == {0: 4}
    assert runner.catch_up(log) == 4
    assert projection.applied_offsets() == [6, 7, 8, 9]
    assert projection.applied_ids() == ["e-6", "e-7", "e-8", "e-9"]
    assert runner.catch_up(log) == 0


def test_catch_up_picks_up_new_records_only() -> None:
    log = InMemoryEventLog(partitions=2)
    _fill(log, subjects=4, per_subject=2)
    projection = RecordingProjection()
    runner, _ = _runner(projection, InMemoryDeadLetterQueue())
    first = runner.catch_up(log)
    assert first == 8

    log.append("user-0", _event_bytes("user-0", 100))
    log.append("user-3", _event_bytes("user-3", 101))
    assert runner.catch_up(log) == 2
    assert projection.applied_ids()[-2:] in (["e-100", "e-101"], ["e-101", "e-100"])
    assert len(projection.applied) == 10
    assert runner.catch_up(log) == 0


def test_catch_up_with_dead_letters_is_idempotent() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    log.append("user-1", b"garbage")
    log.append("user-1", b"garbage")
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    runner, _ = _runner(projection, dlq)

    assert runner.catch_up(log) == 3
    assert runner.catch_up(log) == 0
    assert [d.offset for d in dlq.list()] == [1, 2]
    assert projection.positions() == {0: 2}
    assert runner.lag(log) == {0: 0}


def test_catch_up_on_an_empty_log_handles_nothing() -> None:
    log = InMemoryEventLog(partitions=3)
    projection = RecordingProjection()
    runner, _ = _runner(projection, InMemoryDeadLetterQueue())
    assert runner.catch_up(log) == 0
    assert projection.applied == []
    assert runner.lag(log) == {0: 0, 1: 0, 2: 0}


def test_handle_of_already_applied_records_changes_nothing() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(3):
        log.append("user-1", _event_bytes("user-1", n))
    records: list[LogRecord] = read_all(log)
    projection = RecordingProjection()
    runner, _ = _runner(projection, InMemoryDeadLetterQueue())
    runner.handle(records)
    runner.handle(records)  # redelivery
    assert projection.applied_ids() == ["e-0", "e-1", "e-2"]


# --------------------------------------------------------------------------- decode, then apply


def test_decode_step_says_what_becomes_of_each_record_after_the_positions_given() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))  # 0: done already
    log.append("user-1", _event_bytes("user-1", 1))  # 1: an event
    log.append("user-1", b"garbage")  # 2: a dead letter
    log.append("user-1", _event_bytes("user-2", 3))  # 3: another subject's, under user-1's key
    log.append("user-1", json.dumps({"type": "ErasureRequested", "subject_id": "user-1"}).encode())  # 4: a stall

    decoded = decode_records(read_all(log), {0: 0})

    assert [d.record.offset for d in decoded] == [1, 2, 3, 4]
    event, garbage, foreign, erasure = decoded
    assert event.event is not None and event.event.event_id == "e-1"
    assert (event.dead_letter, event.stall) == (None, None)
    assert garbage.event is None and garbage.stall is None and "UTF-8 JSON" in (garbage.dead_letter or "")
    assert foreign.event is None and "subject_id" in (foreign.dead_letter or "")
    assert erasure.event is None and erasure.dead_letter is None
    assert (erasure.stall or "").startswith("unreadable erasure: ")


def test_lowest_positions_is_what_every_projection_has_applied() -> None:
    assert lowest_positions([{0: 5, 1: 3}, {0: 2}, {0: 7, 1: 9, 2: 1}]) == {0: 2, 1: -1, 2: -1}
    assert lowest_positions([]) == {}


def test_one_decode_feeds_projections_at_different_positions_each_from_its_own() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(6):
        log.append("user-1", _event_bytes("user-1", n) if n != 3 else b"garbage")
    ahead = RecordingProjection(positions={0: 4})
    behind = RecordingProjection(positions={0: 0})
    ahead.name, behind.name = "ahead", "behind"
    dlq = InMemoryDeadLetterQueue()
    runners = [ProjectionRunner(p, dlq, sleep=FakeSleep()) for p in (ahead, behind)]

    decoded = decode_records(read_all(log), lowest_positions([p.positions() for p in (ahead, behind)]))
    for runner in runners:
        runner.apply(decoded)

    assert ahead.applied_offsets() == [5]
    assert behind.applied_offsets() == [1, 2, 4, 5]
    assert [(d.projection, d.offset) for d in dlq.list()] == [("behind_v1", 3)]  # the one that had not passed it
    assert ahead.positions() == behind.positions() == {0: 5}


def test_apply_step_stops_at_a_stall_for_each_projection_after_applying_what_precedes_it() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    log.append("user-1", json.dumps({"type": "ErasureRequested", "subject_id": "user-1"}).encode())
    log.append("user-1", _event_bytes("user-1", 2))
    decoded = decode_records(read_all(log), {})
    dlq = InMemoryDeadLetterQueue()
    for name in ("one", "two"):
        projection = RecordingProjection()
        projection.name = name
        with pytest.raises(ProjectionStalledError, match=rf"{name}_v1 stalled at partition 0 offset 1"):
            ProjectionRunner(projection, dlq).apply(decoded)
        assert projection.applied_offsets() == [0]
        assert projection.skipped == []
    assert dlq.list() == []
