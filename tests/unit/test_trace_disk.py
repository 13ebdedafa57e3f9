"""The ``disk`` row of a trace says what it waits for: the stores still pending by name,
or the steps a partial compaction left."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from projections import trace
from projections.compaction import LastCompaction
from projections.trace import StoreTrace

REQUESTED = datetime(2026, 12, 1, tzinfo=UTC)


def disk(monkeypatch: pytest.MonkeyPatch, stores: list[StoreTrace], last: LastCompaction) -> StoreTrace:
    monkeypatch.setattr(trace, "last_complete", lambda conn, after: last)
    return trace._disk_trace(cast(Any, None), stores, REQUESTED)


def test_the_disk_row_names_the_stores_it_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = [
        StoreTrace(store="facts", status="applied", applied_at="2026-12-01T00:00:01Z"),
        StoreTrace(store="vectors", status="pending"),
        StoreTrace(store="dlq", status="pending", probe="unreachable"),
    ]
    row = disk(monkeypatch, stores, LastCompaction(None))
    assert (row.status, row.probe) == (
        "reported",
        "residue until compaction (run memledger compact once every store applied the erasure;"
        " pending: vectors, dlq unreachable)",
    )


def test_a_partial_compaction_is_named_with_what_it_left(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = [StoreTrace(store="facts", status="applied", applied_at="2026-12-01T00:00:01Z")]
    left = LastCompaction(None, "2026-12-01T00:05:00Z", ("postgres wal: skipped",))
    row = disk(monkeypatch, stores, left)
    assert row.probe == (
        "residue until compaction (the compaction at 2026-12-01T00:05:00Z was partial: postgres wal: skipped)"
    )
