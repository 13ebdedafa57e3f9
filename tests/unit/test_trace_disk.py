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


def test_the_text_of_a_trace_escapes_what_would_draw_another_line() -> None:
    """Identifiers and reasons recorded before the write refused format characters (and a
    reason, free text) are shown on one line each, escaped."""
    report = trace.TraceReport(
        request_id="er-1",
        subject_id="al\u202eice",
        request_kind="source",
        memory_ids=["m1"],
        requested_at="2026-12-01T00:00:00Z",
        requested_by="ops\u200b",
        reason="asked\nverdict: complete",
        legal_basis="gdpr-art-17",
        log_partition=0,
        log_offset=3,
        source_ref="turn\r7",
    )
    lines = trace.render_text(report).splitlines()
    assert lines[0].startswith("erasure er-1  subject al\\u202eice  (source, 1 memory)")
    assert lines[1] == "requested 2026-12-01T00:00:00Z by ops\\u200b: asked\\nverdict: complete [gdpr-art-17]"
    assert lines[2] == "source: turn\\r7"
    assert lines[-1] == "verdict: pending"
