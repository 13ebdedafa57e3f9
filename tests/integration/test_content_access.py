"""Projections read sealed text through ``ContentAccess``: a data key that is not yet
committed is waited for, a destroyed one is never waited for."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from contracts import EraseMemories, ErasureRequested, MemoryWritten, decode_event, utc_now
from ledger import state
from ledger.crypto import Keyring
from ledger.eventlog import read_all
from projections.base import ContentAccess
from projections.opening import Opened
from tests.builders import memory_write
from workers.bootstrap import Services

pytestmark = pytest.mark.integration

MID = "01a22800-0000-7000-8000-000000000001"


def test_a_key_committed_after_the_event_is_read_is_waited_for(pool: ConnectionPool, keyring: Keyring) -> None:
    with pool.connection() as conn:
        Keyring.install(conn)
        state.install(conn)
    content = ContentAccess(pool, keyring, missing_key_wait_s=10.0)
    committed = threading.Event()
    result: list[str | None] = []
    with pool.connection() as writer, writer.transaction():  # the ledger's transaction, still open
        sealed = keyring.seal(writer, "alice", MID, "Alice prefers tea")
        reader = threading.Thread(target=lambda: result.append(content.open(MID, sealed)))
        reader.start()
        reader.join(timeout=0.3)
        assert reader.is_alive()  # waiting for the key, not giving up on the content
        committed.set()
    reader.join(timeout=10)
    assert committed.is_set() and result == ["Alice prefers tea"]


def test_a_destroyed_key_is_not_waited_for_and_a_missing_one_gives_up(
    pool: ConnectionPool, keyring: Keyring, caplog: pytest.LogCaptureFixture
) -> None:
    with pool.connection() as conn:
        Keyring.install(conn)
        state.install(conn)
        sealed = keyring.seal(conn, "alice", MID, "Alice's phone is 555-0100")
        keyring.destroy(conn, [MID])
        other = keyring.seal(conn, "alice", "01a22800-0000-7000-8000-000000000002", "x")
    content = ContentAccess(pool, keyring, missing_key_wait_s=0.2)
    with caplog.at_level(logging.INFO, logger="projections.base"):
        assert content.open(MID, sealed) is None
    assert f"memory {MID}: content skipped: data key {MID} was destroyed" in caplog.text  # says why
    never = other.model_copy(update={"key_id": "01a22800-0000-7000-8000-00000000dead"})
    assert content.open("01a22800-0000-7000-8000-00000000dead", never) is None


def test_a_missing_key_of_an_old_event_is_not_waited_for(
    pool: ConnectionPool, keyring: Keyring, caplog: pytest.LogCaptureFixture
) -> None:
    with pool.connection() as conn:
        Keyring.install(conn)
        state.install(conn)
        other = keyring.seal(conn, "alice", "01a22800-0000-7000-8000-000000000003", "x")
    lost = other.model_copy(update={"key_id": "01a22800-0000-7000-8000-00000000beef"})
    content = ContentAccess(pool, keyring, missing_key_wait_s=30.0)
    an_hour_ago = utc_now() - timedelta(hours=1)  # a key store restored from a backup older than the event
    with caplog.at_level(logging.INFO, logger="projections.base"):
        assert content.open("01a22800-0000-7000-8000-00000000beef", lost, occurred_at=an_hour_ago) is None
    assert "does not exist (the key store was restored" in caplog.text and "never appeared" not in caplog.text


def test_a_batch_is_opened_with_one_tombstone_query_and_one_key_query(svc: Services) -> None:
    principal = svc.principal()
    kept = svc.ledger.write(principal, memory_write(content="Alice prefers tea", key="drink"))
    erased = svc.ledger.write(principal, memory_write(content="Alice's locker code is 4471"))
    svc.ledger.erase(principal, EraseMemories(subject_id="alice", memory_ids=(erased.memory_id,), reason="asked"))
    events = [e for r in read_all(svc.log) if not isinstance(e := decode_event(r.value), ErasureRequested)]
    content = ContentAccess(svc.pool, svc.keyring, missing_key_wait_s=0.2)
    with svc.pool.connection() as conn:
        queries: list[str] = []
        original = conn.execute

        def counting(query: Any, *args: Any, **kwargs: Any) -> Any:
            queries.append(str(query))
            return original(query, *args, **kwargs)

        conn.execute = counting  # type: ignore[method-assign]
        opened = content.open_events(events, conn)
    assert len(queries) == 2, queries  # the tombstones of the batch, then its data keys
    by_memory = {e.memory_id: opened.of(e) for e in events if isinstance(e, MemoryWritten)}
    text = by_memory[kept.memory_id]
    assert text.text == "Alice prefers tea" and text.personal is not None and text.personal.key == "drink"
    assert by_memory[erased.memory_id] == Opened(None)
    assert opened.erased == {erased.memory_id}
    assert [opened.of(e).text for e in events if isinstance(e, MemoryWritten)] == [
        content.open(e.memory_id, e.memory.content) for e in events if isinstance(e, MemoryWritten)
    ]
