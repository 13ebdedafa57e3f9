"""The contract every ``EventLog`` adapter must meet (``ledger.eventlog.EventLog``).

Abstract: subclasses provide the ``make_log`` fixture, a factory that returns a new,
empty log with the given number of partitions (and closes it after the test)::

    class TestMyLog(EventLogContract):
        @pytest.fixture
        def make_log(self) -> Iterator[MakeLog]:
            ...

This module's name does not start with ``test_``, so pytest collects the tests only
through the subclasses.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from ledger.eventlog import EventLog, LogPosition, LogRecord, read_all

MakeLog = Callable[[int], EventLog]

ODD_VALUES: list[bytes] = [
    b"",
    b"\x00",
    b"\xff\xfe\xfd\x80\x81",  # not UTF-8
    bytes(range(256)),
    "ünïcödé ✓ 🙂".encode(),
    b'{"type": "MemoryWritten"}',
    b"trailing newline\n",
    b"\x00" * 1024,
    bytes((i * 37) % 256 for i in range(64 * 1024)),
]


def _by_partition(positions: list[LogPosition]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for position in positions:
        out[position.partition].append(position.offset)
    return dict(out)


class EventLogContract:
    """Tests shared by every ``EventLog`` adapter."""

    @pytest.fixture
    def make_log(self) -> MakeLog:
        raise NotImplementedError("subclasses of EventLogContract provide the make_log fixture")

    # ----------------------------------------------------------------- partitions, offsets

    def test_partitions_is_as_requested(self, make_log: MakeLog) -> None:
        assert make_log(1).partitions == 1
        assert make_log(3).partitions == 3

    def test_append_returns_increasing_offsets_per_partition_from_zero(self, make_log: MakeLog) -> None:
        log = make_log(3)
        positions = [log.append(f"subject-{i % 7}", f"value-{i}".encode()) for i in range(40)]
        per_partition = _by_partition(positions)
        for partition, offsets in per_partition.items():
            assert 0 <= partition < 3
            assert offsets == list(range(len(offsets))), f"partition {partition}: offsets {offsets}"
        assert sum(len(o) for o in per_partition.values()) == 40

    def test_single_partition_offsets_are_0_to_n_minus_1(self, make_log: MakeLog) -> None:
        log = make_log(1)
        positions = [log.append(f"k{i}", b"v") for i in range(10)]
        assert positions == [LogPosition(0, i) for i in range(10)]

    def test_same_key_always_goes_to_the_same_partition(self, make_log: MakeLog) -> None:
        log = make_log(3)
        first: dict[str, int] = {}
        for round_ in range(4):
            for s in range(10):
                key = f"user-{s}"
                position = log.append(key, f"{key}/{round_}".encode())
                assert first.setdefault(key, position.partition) == position.partition
        records = read_all(log)
        for record in records:
            assert record.partition == first[record.key]
        # each key's records keep their append order
        for s in range(10):
            key = f"user-{s}"
            assert [r.value for r in records if r.key == key] == [f"{key}/{n}".encode() for n in range(4)]

    def test_distinct_keys_use_more_than_one_partition(self, make_log: MakeLog) -> None:
        log = make_log(3)
        partitions = {log.append(f"user-{s}", b"v").partition for s in range(30)}
        assert len(partitions) > 1

    # ----------------------------------------------------------------- reads

    def test_read_from_an_offset_with_max_records_and_at_the_end(self, make_log: MakeLog) -> None:
        log = make_log(3)
        positions = [log.append("the-key", f"v{i}".encode()) for i in range(10)]
        partition = positions[0].partition
        assert {p.partition for p in positions} == {partition}
        assert [p.offset for p in positions] == list(range(10))

        records = log.read(partition, 3)
        assert [r.offset for r in records] == list(range(3, 10))
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(3, 10)]
        assert all(r.partition == partition and r.key == "the-key" for r in records)
        assert all(r.position == LogPosition(partition, r.offset) for r in records)

        limited = log.read(partition, 3, max_records=4)
        assert [r.offset for r in limited] == [3, 4, 5, 6]
        assert [r.offset for r in log.read(partition, 8, max_records=4)] == [8, 9]
        assert [r.offset for r in log.read(partition, 0, max_records=1)] == [0]
        assert log.read(partition, 9)[0].value == b"v9"

        assert log.read(partition, 10) == []
        assert log.read(partition, 1000) == []
        for other in set(range(3)) - {partition}:
            assert log.read(other, 0) == []

    def test_read_sees_records_appended_after_an_earlier_read(self, make_log: MakeLog) -> None:
        log = make_log(1)
        log.append("k", b"first")
        assert [r.value for r in log.read(0, 0)] == [b"first"]
        assert log.read(0, 1) == []
        log.append("k", b"second")
        assert [r.value for r in log.read(0, 1)] == [b"second"]
        assert [r.value for r in log.read(0, 0)] == [b"first", b"second"]

    def test_records_carry_key_and_a_plausible_utc_timestamp(self, make_log: MakeLog) -> None:
        log = make_log(1)
        log.append("ünïcödé-subject", b"v")
        [record] = log.read(0, 0)
        assert isinstance(record, LogRecord)
        assert record.key == "ünïcödé-subject"
        assert isinstance(record.timestamp_ms, int)
        now_ms = time.time() * 1000
        assert abs(record.timestamp_ms - now_ms) < 24 * 3600 * 1000, "timestamp_ms is not epoch milliseconds"

    # ----------------------------------------------------------------- end offsets

    def test_end_offsets(self, make_log: MakeLog) -> None:
        log = make_log(3)
        assert log.end_offsets() == {0: 0, 1: 0, 2: 0}
        positions = [log.append(f"user-{i % 5}", b"v") for i in range(17)]
        counts = {p: 0 for p in range(3)}
        for position in positions:
            counts[position.partition] += 1
        ends = log.end_offsets()
        assert ends == counts
        for position in positions:
            assert position.offset < ends[position.partition]
        for partition, end in ends.items():
            assert log.read(partition, end) == []

    # ----------------------------------------------------------------- batches

    def test_append_batch_returns_positions_in_input_order(self, make_log: MakeLog) -> None:
        log = make_log(3)
        log.append("user-0", b"before")
        items = [(f"user-{i % 4}", f"batch-{i}".encode()) for i in range(25)]
        positions = log.append_batch(items)
        assert len(positions) == len(items)
        assert len(set(positions)) == len(positions)
        for (key, value), position in zip(items, positions, strict=True):
            [record] = log.read(position.partition, position.offset, max_records=1)
            assert (record.key, record.value) == (key, value)
            assert record.offset == position.offset
        per_key: dict[str, list[LogPosition]] = defaultdict(list)
        for (key, _), position in zip(items, positions, strict=True):
            per_key[key].append(position)
        for key_positions in per_key.values():
            assert len({p.partition for p in key_positions}) == 1
            offsets = [p.offset for p in key_positions]
            assert offsets == sorted(offsets)
        values = {r.value for r in read_all(log)}
        assert values == {v for _, v in items} | {b"before"}

    def test_append_batch_of_nothing(self, make_log: MakeLog) -> None:
        log = make_log(2)
        assert log.append_batch([]) == []
        assert log.end_offsets() == {0: 0, 1: 0}

    # ----------------------------------------------------------------- values

    def test_values_are_bytes_preserved_exactly(self, make_log: MakeLog) -> None:
        log = make_log(2)
        positions = [log.append(f"user-{i}", value) for i, value in enumerate(ODD_VALUES)]
        positions += log.append_batch([(f"batch-{i}", value) for i, value in enumerate(ODD_VALUES)])
        expected = ODD_VALUES + ODD_VALUES
        for position, value in zip(positions, expected, strict=True):
            [record] = log.read(position.partition, position.offset, max_records=1)
            assert type(record.value) is bytes
            assert record.value == value

    # ----------------------------------------------------------------- read_all

    def test_read_all_returns_every_record_partition_by_partition(self, make_log: MakeLog) -> None:
        log = make_log(3)
        items = [(f"user-{i % 11}", f"{i}".encode()) for i in range(300)]
        positions = log.append_batch(items)
        records = read_all(log)
        assert len(records) == len(items)
        assert sorted(r.value for r in records) == sorted(v for _, v in items)
        partitions_seen = [r.partition for r in records]
        assert partitions_seen == sorted(partitions_seen), "read_all goes partition by partition"
        ends = log.end_offsets()
        for partition in range(3):
            assert [r.offset for r in records if r.partition == partition] == list(range(ends[partition]))
        chosen = positions[0].partition
        only = read_all(log, [chosen])
        assert [r.offset for r in only] == list(range(ends[chosen]))
        assert {r.partition for r in only} == {chosen}
        assert read_all(log, []) == []

    def test_read_all_reads_past_one_batch(self, make_log: MakeLog) -> None:
        """More records than one ``read`` returns by default (500)."""
        log = make_log(1)
        log.append_batch([(f"user-{i % 3}", i.to_bytes(4, "big")) for i in range(1_234)])
        records = read_all(log)
        assert [r.offset for r in records] == list(range(1_234))
        assert [int.from_bytes(r.value, "big") for r in records] == list(range(1_234))

    def test_read_all_of_an_empty_log(self, make_log: MakeLog) -> None:
        assert read_all(make_log(2)) == []
