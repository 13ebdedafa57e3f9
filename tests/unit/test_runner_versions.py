"""The runner and schema versions (no I/O): a record of a version this reader cannot
reach is dead-lettered with the reason and the projection goes on; an erasure it cannot
read stops the projection instead (an erasure is never skipped)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from contracts import ErasureRequested, MemoryConfirmed, MemoryRef, encode_event
from ledger.eventlog import InMemoryDeadLetterQueue, LogRecord
from projections.errors import ProjectionStalledError
from projections.runner import ProjectionRunner
from tests.unit.test_runner import RecordingProjection

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
ENV = {"occurred_at": NOW, "subject_id": "alice", "producer": "p", "correlation_id": "c"}
MID = "00000000-0000-0000-0000-00000000000a"


def _record(offset: int, raw: dict[str, object]) -> LogRecord:
    return LogRecord(0, offset, "alice", json.dumps(raw).encode(), 0)


def _confirmed(n: int) -> dict[str, object]:
    raw: dict[str, object] = json.loads(
        encode_event(MemoryConfirmed(event_id=f"e{n}", memory_id=MID, revision=2, **ENV))
    )
    return raw


def test_a_newer_version_and_a_missing_step_are_dead_lettered_and_the_projection_goes_on() -> None:
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    newer = _confirmed(1) | {"schema_version": 2}
    records = [_record(0, _confirmed(0)), _record(1, newer), _record(2, _confirmed(2))]
    ProjectionRunner(projection, dlq).handle(records)
    assert [e for e, _ in projection.applied] == ["e0", "e2"]
    [letter] = dlq.letters
    assert (letter.partition, letter.offset) == (0, 1)
    assert letter.reason == (
        "schema_version: MemoryConfirmed v2 is newer than this reader's v1 (deploy a reader that knows it)"
    )


@pytest.mark.parametrize("damage", [{"schema_version": 9}, {"affected": "everything"}], ids=["newer", "malformed"])
def test_an_erasure_this_reader_cannot_read_stops_the_projection(damage: dict[str, object]) -> None:
    erasure = ErasureRequested(
        event_id="x",
        request_id="r",
        request_kind="memories",
        requested_by="alice",
        reason="asked",
        legal_basis="gdpr-17",
        affected=(MemoryRef(memory_id=MID, revision=3),),
        **ENV,
    )
    raw = json.loads(encode_event(erasure)) | damage
    projection = RecordingProjection()
    dlq = InMemoryDeadLetterQueue()
    with pytest.raises(ProjectionStalledError, match=r"partition 0 offset 1 .*unreadable erasure"):
        ProjectionRunner(projection, dlq).handle(
            [_record(0, _confirmed(0)), _record(1, raw), _record(2, _confirmed(2))]
        )
    assert [e for e, _ in projection.applied] == ["e0"]  # what came before was applied
    assert dlq.letters == [] and projection.skipped == []
    assert projection.positions() == {0: 0}
