"""The embedded default appends a command's events inside its own transaction: a
connection terminated before the commit leaves neither the events nor the state, one
terminated after it leaves both (the positions were known before the commit)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from contracts import EraseMemories
from ledger.errors import NotWrittenError
from ledger.eventlog import read_all
from tests.builders import memory_write
from workers.bootstrap import Services

pytestmark = pytest.mark.integration


def _terminate_at(svc: Services, dsn: str, step: str) -> None:
    def fault(command: str, at: str, conn: Any) -> None:
        if at == step:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))

    svc.ledger._fault = fault  # type: ignore[method-assign]


@pytest.mark.parametrize("step", ["decided", "staged", "committed"])
def test_write_and_erase_are_all_or_nothing_in_the_embedded_log(svc: Services, fresh_dsn: str, step: str) -> None:
    p = svc.principal()
    kept = svc.ledger.write(p, memory_write(content="Alice likes plums", key="fruit")).memory_id
    records = len(read_all(svc.log))
    _terminate_at(svc, fresh_dsn, step)
    if step == "committed":
        written = svc.ledger.write(p, memory_write(content="Alice likes figs", key="snack"))
        erased = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(kept,), reason="asked"))
        log = read_all(svc.log)
        assert [(r.partition, r.offset) for r in log[records:]] == [
            (q.partition, q.offset) for q in (*written.positions, *erased.positions)
        ]
        with svc.pool.connection() as conn:
            row = conn.execute(
                "SELECT log_offset FROM erasure_requests WHERE request_id = %s", (erased.request_id,)
            ).fetchone()
        assert row == (erased.positions[0].offset,)
        return
    with pytest.raises(NotWrittenError):
        svc.ledger.write(p, memory_write(content="Alice likes figs", key="snack"))
    with pytest.raises(NotWrittenError):
        svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(kept,), reason="asked"))
    assert len(read_all(svc.log)) == records
    with svc.pool.connection() as conn:
        heads = conn.execute("SELECT memory_id, status FROM ledger_memories").fetchall()
        requests = conn.execute("SELECT count(*) FROM erasure_requests").fetchone()
        live = conn.execute("SELECT count(*) FROM memory_keys WHERE wrapped_key IS NOT NULL").fetchone()
    assert heads == [(kept, "active")] and requests == (0,) and live == (1,)
