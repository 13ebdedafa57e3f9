"""The EventLog contract on ``InMemoryEventLog``, and its own few rules."""

from __future__ import annotations

import threading

import pytest

from ledger.eventlog import InMemoryEventLog, partition_for, read_all
from tests.eventlog_contract import EventLogContract, MakeLog


class TestInMemoryEventLog(EventLogContract):
    @pytest.fixture
    def make_log(self) -> MakeLog:
        return lambda partitions: InMemoryEventLog(partitions=partitions)


@pytest.mark.parametrize("partitions", [0, -1])
def test_needs_at_least_one_partition(partitions: int) -> None:
    with pytest.raises(ValueError, match="partitions"):
        InMemoryEventLog(partitions=partitions)


def test_partition_is_crc32_of_the_key() -> None:
    log = InMemoryEventLog(partitions=5)
    for s in range(20):
        key = f"user-{s}"
        assert log.append(key, b"v").partition == partition_for(key, 5)
    assert partition_for("user-1", 1) == 0
    assert {partition_for(f"user-{s}", 5) for s in range(100)} == set(range(5))


def test_concurrent_appends_are_gapless() -> None:
    log = InMemoryEventLog(partitions=1)
    per_thread = 200
    results: list[list[int]] = [[] for _ in range(4)]

    def work(n: int) -> None:
        for i in range(per_thread):
            results[n].append(log.append(f"t{n}", f"{n}/{i}".encode()).offset)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(o for r in results for o in r) == list(range(4 * per_thread))
    for offsets in results:
        assert offsets == sorted(offsets)
    assert [r.offset for r in read_all(log)] == list(range(4 * per_thread))


def test_close_is_idempotent() -> None:
    log = InMemoryEventLog()
    log.close()
    log.close()
