"""A write racing an erasure of its whole subject: the erasure reads the subject's heads
to decide, and the projections remove every row of the subject, so a write that
committed after that read and reached the log before the erasure was erased from every
store while the ledger kept it active with a live key (``state.lock_subjects_against_erasure``)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from contracts import EraseMemories, ErasureRequested, MemoryWritten, decode_event
from ledger import state
from ledger.eventlog import read_all
from ledger.service import CommandResult
from tests.builders import memory_write
from workers.bootstrap import Services

pytestmark = pytest.mark.integration


def test_a_write_racing_a_whole_subject_erasure_is_erased_with_it_or_follows_it(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = svc.principal()
    svc.ledger.write(p, memory_write("uma", "Uma likes jazz", key="music"))
    decided, go = threading.Event(), threading.Event()

    def pause_erase(command: str, step: str, conn: Any) -> None:
        if (command, step) == ("erase", "decided"):
            decided.set()
            go.wait(20)

    monkeypatch.setattr(svc.ledger, "_fault", pause_erase)
    results: dict[str, CommandResult] = {}

    def erase() -> None:
        results["erase"] = svc.ledger.erase(p, EraseMemories(subject_id="uma", whole_subject=True, reason="asked"))

    def write() -> None:
        results["write"] = svc.ledger.write(p, memory_write("uma", "Uma owns a red bicycle", key="bike"))

    eraser = threading.Thread(target=erase)
    eraser.start()
    assert decided.wait(20), "the erasure never reached its decision"
    writer = threading.Thread(target=write)
    writer.start()
    writer.join(0.5)  # give the write the time to commit, were nothing to stop it
    go.set()
    eraser.join(30)
    writer.join(30)
    assert set(results) == {"erase", "write"}
    written = results["write"].memory_id
    assert written is not None

    order = [decode_event(r.value) for r in read_all(svc.log) if r.key == "uma"]
    erasure_at = next(i for i, e in enumerate(order) if isinstance(e, ErasureRequested))
    written_at = next(i for i, e in enumerate(order) if isinstance(e, MemoryWritten) and e.memory_id == written)
    with svc.pool.connection() as conn:
        head = state.read_heads(conn, [written])[written]
    # the ledger and the log agree: either the write was erased with its subject, or it
    # was recorded after the erasure (and so survives it in every store)
    assert head.status == "erased" or written_at > erasure_at, (head.status, written_at, erasure_at)
    svc.catch_up()
    with svc.pool.connection() as conn:
        row = conn.execute("SELECT status FROM facts_v1 WHERE memory_id = %s", (written,)).fetchone()
    assert (row is not None and row[0] == "active") == (head.status == "active"), (row, head.status)
