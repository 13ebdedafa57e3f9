"""``compact`` waits a bounded time for each table's lock: a table another transaction
holds is reported ``busy`` while every other step still runs, the run is partial and
the erasure's ``disk`` row names what is left (its snapshot, older than the compaction,
is reported too: the rows it may see would stay in the rewritten files); once the table is free, compacting again
rewrites it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from contracts import EraseMemories, utc_now
from projections.compaction import compact
from projections.facts import FactsTables
from projections.trace import trace
from tests.builders import memory_write
from workers.bootstrap import Services
from workers.compaction import compact_targets

pytestmark = pytest.mark.integration


def test_a_table_held_by_another_transaction_is_reported_busy_and_compacted_on_the_next_run(
    svc: Services, fresh_dsn: str
) -> None:
    p = svc.principal()
    prov: dict[str, Any] = {"writer": "test-agent", "written_at": utc_now(), "turn_id": "turn-1"}
    written = svc.ledger.write(p, memory_write(content="Alice's locker code word is quetzalvine", provenance=prov))
    r = svc.ledger.erase(
        p, EraseMemories(subject_id="alice", memory_ids=(written.memory_id or "",), reason="subject asked")
    )
    svc.catch_up()
    held = FactsTables(1).facts  # the serving version's table
    with psycopg.connect(fresh_dsn) as reader:  # an open transaction that read it holds a lock on it
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # and its snapshot till it ends
        reader.execute(f"SELECT count(*) FROM {held}").fetchone()
        report = compact(svc.pool, compact_targets(svc, 0.2), "cp-busy")
        reader.rollback()
    steps = {s.target: s for s in report.steps}
    assert steps[held].status == "busy" and "run compact again" in steps[held].detail
    # its snapshot is older than the compaction: rows it may see would stay in every rewritten file
    assert steps["snapshots"].status == "busy" and "1 session(s) still hold a snapshot" in steps["snapshots"].detail
    assert steps["ledger_memories"].status == steps["memory_keys"].status == "done"  # the other steps ran
    assert not report.complete
    disk = trace(svc.pool, r.request_id or "", svc.trace_targets()).disk
    assert disk is not None and disk.status == "reported"
    assert "was partial" in disk.probe and f"{held}: its lock was not granted" in disk.probe

    again = compact(svc.pool, compact_targets(svc, 5.0), "cp-again")
    assert {s.target: s.status for s in again.steps}[held] == "done"
    assert {s.target: s.status for s in again.steps}["snapshots"] == "done"
