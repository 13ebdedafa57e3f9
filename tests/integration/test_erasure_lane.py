"""The erasure lane against the real stores: a store gives up an erased memory as soon as
its lane polls, before the projection reaches the erasure in the log; the receipt still
comes from the in-order event; events ahead of the erasure bring nothing back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts import EraseMemories, utc_now
from projections.erasure_lane import lane_for
from projections.trace import StoreTrace, trace
from tests.builders import memory_write
from tests.integration.conftest import one, recall_ids
from workers.bootstrap import Services

pytestmark = pytest.mark.integration


def provenance(**fields: Any) -> dict[str, Any]:
    return {"writer": "test-agent", "written_at": utc_now(), "turn_id": "t-1", **fields}


def store_trace(svc: Services, request_id: str, store: str) -> StoreTrace:
    report = trace(svc.pool, request_id, svc.trace_targets())
    return next(s for s in report.stores if s.store == store)


@pytest.mark.parametrize("store", ["facts", "vectors", "cache", "summaries"])
def test_the_lane_purges_an_erased_memory_before_the_projection_reaches_the_erasure(svc: Services, store: str) -> None:
    p = svc.principal()
    gone = svc.ledger.write(p, memory_write(content="Alice's locker code is 4711")).memory_id
    keep = svc.ledger.write(p, memory_write(content="Alice likes green tea")).memory_id
    assert gone and keep
    svc.ledger.write(
        p,
        memory_write(
            kind="summary", content="Alice: locker 4711, green tea", provenance=provenance(derived_from=[gone, keep])
        ),
    )
    svc.catch_up()
    assert gone in recall_ids(svc, "locker code 4711")  # now cached too
    lane = lane_for(svc.pool, svc.projections[store])

    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    assert r.request_id
    before = store_trace(svc, r.request_id, store)
    assert before.status == "pending" and before.probe_found, before  # nothing applied it yet

    purged = lane.poll()
    assert purged is not None and purged.items_removed >= 1 and purged.request_ids == [r.request_id]
    after = store_trace(svc, r.request_id, store)
    assert (after.status, after.probe, after.applied_at) == ("pending", "absent", None)  # no receipt from the lane
    assert lane.poll() is None  # each tombstone is purged once

    svc.catch_up()
    done = store_trace(svc, r.request_id, store)
    assert (done.status, done.probe) == ("applied", "absent") and done.log_offset is not None
    assert trace(svc.pool, r.request_id, svc.trace_targets()).verdict == "complete"
    assert keep in recall_ids(svc, "green tea") and gone not in recall_ids(svc, "locker code 4711")


def test_events_ahead_of_the_erasure_bring_nothing_back_after_the_lane_ran(svc: Services) -> None:
    p = svc.principal()
    gone = svc.ledger.write(p, memory_write(content="Alice's pager code is 8080")).memory_id
    assert gone
    lanes = [lane_for(svc.pool, svc.projections[name]) for name in ("facts", "vectors", "cache", "summaries")]
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    assert r.request_id
    for lane in lanes:  # nothing projected yet: nothing to remove, but the poll is done
        purged = lane.poll()
        assert purged is not None and purged.items_removed == 0
    svc.catch_up()  # the MemoryWritten ahead of the erasure meets the tombstone
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE memory_id = %s", gone) == 0
    assert svc.index is not None and svc.index.retrieve([gone]) == {}
    assert trace(svc.pool, r.request_id, svc.trace_targets()).verdict == "complete"


def test_a_lane_leaves_erasures_older_than_its_window_to_the_log(svc: Services) -> None:
    p = svc.principal()
    gone = svc.ledger.write(p, memory_write(content="Alice's gate code is 1234")).memory_id
    assert gone
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
    started_later = lane_for(svc.pool, svc.projections["facts"], clock=lambda: utc_now() + timedelta(hours=1))
    assert started_later.poll() is None  # a worker started long after the erasure leaves it to the log
    fresh = lane_for(svc.pool, svc.projections["facts"])
    purged = fresh.poll()
    assert purged is not None and purged.tombstones == 1
