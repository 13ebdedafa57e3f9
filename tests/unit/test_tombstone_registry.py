"""The tombstone record format and the in-memory tombstone set (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ledger.tombstone_log import InMemoryTombstoneLog, Tombstone
from projections.tombstone_registry import TombstoneSet

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_a_tombstone_record_is_small_content_free_json_and_round_trips() -> None:
    t = Tombstone("m-1", "alice", "er-1", AT)
    assert t.encode() == b'{"subject_id":"alice","request_id":"er-1","erased_at":"2026-11-29T12:00:00+00:00"}'
    assert Tombstone.decode("m-1", t.encode()) == t


@pytest.mark.parametrize(
    "value",
    [b"not json", b'{"subject_id": "a"}', b'{"subject_id":"a","request_id":"r","erased_at":"2026-11-29T12:00:00"}'],
)
def test_a_malformed_tombstone_record_is_refused(value: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        Tombstone.decode("m-1", value)


def test_the_set_follows_the_log_with_retractions_and_reads_only_new_records() -> None:
    source = InMemoryTombstoneLog()
    registry = TombstoneSet(source, refresh_interval_s=0.0)
    assert registry.erased_among(["m-1"]) == set()
    source.publish([Tombstone("m-1", "alice", "er-1", AT), Tombstone("m-2", "alice", "er-1", AT)])
    assert registry.erased_among(["m-1", "m-2", "m-3"]) == {"m-1", "m-2"}
    source.retract(["m-2"])  # that erasure failed before its event was appended
    assert registry.erased_among(["m-1", "m-2"]) == {"m-1"}
    assert registry.refresh() == 0  # nothing new since the last read
    got = registry.get("m-1")
    assert got is not None and got.request_id == "er-1"
    assert set(registry.all()) == {"m-1"} and len(registry) == 1


def test_lookups_between_refreshes_use_what_was_read() -> None:
    source = InMemoryTombstoneLog()
    registry = TombstoneSet(source, refresh_interval_s=3600.0)
    assert registry.erased_among(["m-1"]) == set()  # first use reads the log
    source.publish([Tombstone("m-1", "alice", "er-1", AT)])
    assert registry.erased_among(["m-1"]) == set()  # not due yet
    registry.refresh()
    assert registry.erased_among(["m-1"]) == {"m-1"}
