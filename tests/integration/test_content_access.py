"""Projections read sealed text through ``ContentAccess``: a data key that is not yet
committed is waited for, a destroyed one is never waited for."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from psycopg_pool import ConnectionPool

from contracts import utc_now
from ledger import state
from ledger.crypto import Keyring
from projections.base import ContentAccess

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
