"""FanOutRunner without I/O: one read and one decode of each record for several
projections, each applying from its own position with its own dead letters and stalls."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from contracts import decode_event
from ledger.eventlog import InMemoryDeadLetterQueue, InMemoryEventLog, read_all
from projections.errors import ProjectionStalledError
from projections.fanout import FanOutRunner
from projections.runner import ProjectionRunner, RetryPolicy
from tests.unit.test_runner import FakeSleep, RecordingProjection, StoreDown, _event_bytes


def _projection(name: str, **kwargs: object) -> RecordingProjection:
    projection = RecordingProjection(**kwargs)  # type: ignore[arg-type]
    projection.name = name
    return projection


def _fan(*projections: RecordingProjection, dlq: InMemoryDeadLetterQueue, attempts: int | None = None) -> FanOutRunner:
    retry = RetryPolicy(max_attempts=attempts)
    return FanOutRunner([ProjectionRunner(p, dlq, retry, sleep=FakeSleep()) for p in projections])


def test_each_record_is_decoded_once_for_every_projection_of_the_pass() -> None:
    log = InMemoryEventLog(partitions=3)
    for n in range(30):
        key = f"user-{n % 7}"
        log.append(key, _event_bytes(key, n))
    facts, vectors, cache = (_projection(n) for n in ("facts", "vectors", "cache"))
    fan = _fan(facts, vectors, cache, dlq=InMemoryDeadLetterQueue())

    with mock.patch("projections.runner.decode_event", wraps=decode_event) as decode:
        assert fan.catch_up(log, batch_size=4) == 30

    assert decode.call_count == 30
    for projection in (facts, vectors, cache):
        assert sorted(projection.applied_ids()) == sorted(f"e-{n}" for n in range(30))
    assert fan.positions() == {p: end - 1 for p, end in log.end_offsets().items()}
    assert set(fan.times.apply_s) == {"facts_v1", "vectors_v1", "cache_v1"}


def test_a_pass_starts_at_the_lowest_position_and_each_projection_takes_what_it_lacks() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(8):
        log.append("user-1", _event_bytes("user-1", n) if n != 2 else b"garbage")
    ahead = _projection("ahead", positions={0: 5})
    behind = _projection("behind", positions={0: 1})
    dlq = InMemoryDeadLetterQueue()

    assert _fan(ahead, behind, dlq=dlq).catch_up(log) == 6  # offsets 2..7, read once

    assert ahead.applied_offsets() == [6, 7]
    assert behind.applied_offsets() == [3, 4, 5, 6, 7]
    assert [(d.projection, d.offset) for d in dlq.list()] == [("behind_v1", 2)]


def test_a_projection_that_stalls_does_not_hold_back_the_others_in_the_batch() -> None:
    log = InMemoryEventLog(partitions=1)
    for n in range(4):
        log.append("user-1", _event_bytes("user-1", n))
    down = _projection("down", fail_times=10)
    up = _projection("up")

    with pytest.raises(ProjectionStalledError, match="down_v1 stalled at partition 0 offset 0") as info:
        _fan(down, up, dlq=InMemoryDeadLetterQueue(), attempts=2).handle(read_all(log))

    assert isinstance(info.value.__cause__, StoreDown)
    assert up.applied_offsets() == [0, 1, 2, 3]
    assert down.applied == [] and down.positions() == {}


def test_an_unreadable_erasure_stops_every_projection_at_it() -> None:
    log = InMemoryEventLog(partitions=1)
    log.append("user-1", _event_bytes("user-1", 0))
    log.append("user-1", json.dumps({"type": "ErasureRequested", "subject_id": "user-1"}).encode())
    log.append("user-1", _event_bytes("user-1", 2))
    one, two = _projection("one"), _projection("two")
    dlq = InMemoryDeadLetterQueue()

    with pytest.raises(ProjectionStalledError, match="one_v1 stalled at partition 0 offset 1"):
        _fan(one, two, dlq=dlq).catch_up(log)

    assert one.applied_offsets() == two.applied_offsets() == [0]
    assert dlq.list() == []
