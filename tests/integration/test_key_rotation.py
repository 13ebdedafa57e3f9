"""Master key rotation against real Postgres and Redis: every live data key re-wrapped
under the new master key in one transaction, destroyed keys left destroyed, content
fingerprints unchanged; and the ``rotate-master-key`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, RedactMemory, utc_now
from ledger.crypto import Keyring, new_master_key, parse_master_key
from ledger.errors import KeyStoreError
from tests.builders import PURPOSE, memory_write
from tests.integration.conftest import local_settings
from workers.bootstrap import Services, build
from workers.settings import Settings

pytestmark = pytest.mark.integration


def settings(tmp_path: Path, dsn: str, redis_url: str, key: str) -> Settings:
    return local_settings(tmp_path / "data", dsn, redis_url, master_key=key)


def key_rows(svc: Services) -> dict[str, tuple[Any, Any]]:
    with svc.pool.connection() as conn:
        return {k: (w, d) for k, w, d in conn.execute("SELECT key_id, wrapped_key, destroyed_at FROM memory_keys")}


def sealed_heads(svc: Services) -> dict[str, Any]:
    from contracts.memory import SealedText

    with svc.pool.connection() as conn:
        rows = conn.execute("SELECT memory_id, sealed_content FROM ledger_memories WHERE sealed_content IS NOT NULL")
        return {m: SealedText.model_validate(s) for m, s in rows}


def recalled(svc: Services, query: str) -> list[str]:
    result = svc.recall.recall(svc.principal(), "alice", PURPOSE, query, utc_now())
    return [i.content for i in result.items]


def test_rotation_rewraps_live_keys_keeps_destroyed_ones_and_fingerprints(
    tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    old, new = new_master_key(), new_master_key()
    svc = build(settings(tmp_path, fresh_dsn, redis_url, old))
    try:
        p = svc.principal()
        kept = svc.ledger.write(p, memory_write(content="Alice prefers short answers", key="length")).memory_id
        redacted = svc.ledger.write(p, memory_write(content="Alice's phone is 555-0100", key="phone")).memory_id
        gone = svc.ledger.write(p, memory_write(content="Alice's PIN is 9911", key="pin")).memory_id
        assert kept and redacted and gone
        svc.ledger.redact(p, "alice", RedactMemory(memory_id=redacted, replacement="Alice's phone is [redacted]"))
        svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
        svc.catch_up()
        fingerprint = svc.keyring.fingerprint("Alice prefers short answers")
        before = key_rows(svc)
        destroyed = {k: v for k, v in before.items() if v[0] is None}
        live = {k for k, v in before.items() if v[0] is not None}
        assert set(destroyed) == {redacted, gone} and live == {kept, f"{redacted}/2"}

        with svc.pool.connection() as conn, conn.transaction():
            report = svc.keyring.rotate(conn, parse_master_key(new))
        assert (report.rewrapped, report.already_rotated, report.destroyed) == (2, 0, 2)
        assert report.old_master_key_id == svc.keyring.master_key_id != report.new_master_key_id

        after = key_rows(svc)
        assert {k: v for k, v in after.items() if v[0] is None} == destroyed  # still destroyed, same time
        assert all(after[k][0] != before[k][0] for k in live)
        sealed = sealed_heads(svc)
        with svc.pool.connection() as conn:
            with pytest.raises(KeyStoreError, match="master_key: does not open"):
                svc.keyring.open(conn, sealed[kept])  # the old master key opens nothing any more
            rotated = Keyring(parse_master_key(new))
            rotated.attach(conn)
            assert rotated.open(conn, sealed[kept]) == "Alice prefers short answers"
            assert rotated.open(conn, sealed[redacted]) == "Alice's phone is [redacted]"
            assert rotated.fingerprint("Alice prefers short answers") == fingerprint
            with conn.transaction():  # again, from the old key: everything is already rotated
                again = svc.keyring.rotate(conn, parse_master_key(new))
            assert (again.rewrapped, again.already_rotated) == (0, 2)
            with pytest.raises(KeyStoreError, match="already in use"), conn.transaction():
                rotated.rotate(conn, parse_master_key(new))
    finally:
        svc.close()

    svc = build(settings(tmp_path, fresh_dsn, redis_url, new))  # every process restarted with the new key
    try:
        assert svc.keyring.fingerprint("Alice prefers short answers") == fingerprint
        # the same statement again is recognised by its fingerprint: reinforced, not a new memory
        again_id = svc.ledger.write(svc.principal(), memory_write(content="Alice prefers short answers", key="length"))
        assert again_id.memory_id == kept
        for projection in svc.projections.values():  # a replay reads the log with the new key
            projection.reset()
        svc.catch_up()
        assert recalled(svc, "short answers")[0] == "Alice prefers short answers"
        assert "Alice's PIN is 9911" not in recalled(svc, "PIN 9911")
        with svc.pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM facts_v1 WHERE memory_id = %s", (gone,)).fetchone() == (0,)
    finally:
        svc.close()


def test_rotation_is_all_or_nothing(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> None:
    old = new_master_key()
    svc = build(settings(tmp_path, fresh_dsn, redis_url, old))
    try:
        p = svc.principal()
        for n in range(3):
            svc.ledger.write(p, memory_write(content=f"Alice fact number {n}", key=f"k{n}"))
        stranger = Keyring(os.urandom(32))
        with svc.pool.connection() as conn:  # a key wrapped under some third master key
            stranger.seal(conn, "alice", "foreign-key", "not ours")
        before = key_rows(svc)
        with pytest.raises(KeyStoreError, match="'foreign-key'"):
            with svc.pool.connection() as conn, conn.transaction():
                svc.keyring.rotate(conn, parse_master_key(new_master_key()))
        assert key_rows(svc) == before  # rolled back: every key still under the old master key
    finally:
        svc.close()


def test_rotate_master_key_command_replaces_the_data_dir_key_file(
    tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_") or k.startswith("MEMLEDGER_TEST_")}
    env.update(
        MEMLEDGER_DATA_DIR=str(tmp_path / "data"),
        MEMLEDGER_POSTGRES_DSN=fresh_dsn,
        MEMLEDGER_REDIS_URL=redis_url,
        MEMLEDGER_EMBEDDER="hashing",
        MEMLEDGER_VECTOR_ENGINE="client",
    )

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "workers", *args], env=env, capture_output=True, text=True, timeout=180
        )
        assert not check or proc.returncode == 0, proc.stderr
        return proc

    cli("write", "alice", "Alice deploys on Fridays", "--purpose", PURPOSE)
    key_file = tmp_path / "data" / "master.key"
    old = key_file.read_text()
    new_file = tmp_path / "new.key"
    new_file.write_text(new_master_key())
    bad = tmp_path / "bad.key"
    bad.write_text("not-a-key")
    refused = cli("rotate-master-key", "--new-key-file", str(bad), check=False)
    assert refused.returncode == 2 and "error: new_master_key:" in refused.stderr

    out = json.loads(cli("rotate-master-key", "--new-key-file", str(new_file), "--json").stdout)
    assert out["rewrapped"] == 1 and out["key_file_replaced"] == str(key_file)
    assert key_file.read_text() == new_file.read_text() != old
    items = json.loads(cli("recall", "alice", "deploys Fridays", "--purpose", PURPOSE, "--json").stdout)["items"]
    assert [i["content"] for i in items] == ["Alice deploys on Fridays"]

    key_file.write_text(old)  # a process still on the old key
    stale = cli("write", "alice", "Alice deploys on Mondays", "--purpose", PURPOSE, check=False)
    assert stale.returncode == 2 and "master_key: does not open" in stale.stderr
