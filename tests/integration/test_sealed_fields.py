"""Personal fields besides the text (key, scope id, turn, tool call, source and consent
references) are sealed in the log, readable by the projections while the memory's key
lives, and gone from the log, the ledger's head table and every projection once it is
erased, including after a replay."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import (
    ConflictDetected,
    ConsentRevoked,
    EraseMemories,
    MemoryRedacted,
    MemoryReinforced,
    MemoryWritten,
    RedactMemory,
    RevokeConsent,
    decode_event,
    utc_now,
)
from projections.conflicts import list_conflicts
from projections.facts import FactsTables
from tests.builders import PURPOSE, memory_write
from tests.integration.conftest import one
from workers.bootstrap import Services

pytestmark = pytest.mark.integration

MARK = "zq7"
"""A marker in every personal value below, found nowhere else."""

DOC = f"doc-{MARK}"


def claim(svc: Services, content: str, key: str, **prov: Any) -> Any:
    provenance = {"writer": "importer", "written_at": utc_now(), **prov}
    cmd = memory_write(
        content=content,
        key=key,
        scope={"type": "document", "id": DOC},
        veracity="imported",
        provenance=provenance,
    )
    return svc.ledger.write(svc.principal(), cmd)


def raw_log(svc: Services) -> str:
    with svc.pool.connection() as conn:
        rows = conn.execute('SELECT value FROM memory_events ORDER BY partition, "offset"').fetchall()
    return "\n".join(bytes(r[0]).decode("utf-8") for r in rows)


def test_the_log_holds_key_scope_and_references_only_sealed(svc: Services) -> None:
    p = svc.principal()
    first = claim(
        svc,
        "Alice works at Acme",
        f"employer-{MARK}",
        turn_id=f"turn-{MARK}",
        tool_call_id=f"call-{MARK}",
        source_ref=f"cv-{MARK}.pdf",
        consent_ref=f"consent-{MARK}",
    )
    again = claim(
        svc, "Alice works at Acme", f"employer-{MARK}", turn_id=f"turn-2-{MARK}", consent_ref=f"consent-{MARK}"
    )
    rival = claim(svc, "Alice works at Globex", f"employer-{MARK}", source_ref=f"profile-{MARK}.json")
    assert [e.type for e in again.events] == ["MemoryReinforced"]
    assert [e.type for e in rival.events] == ["MemoryWritten", "ConflictDetected"]
    svc.ledger.redact(p, "alice", RedactMemory(memory_id=rival.memory_id, replacement="Alice works at [employer]"))
    svc.ledger.revoke_consent(p, RevokeConsent(subject_id="alice", consent_ref=f"consent-{MARK}"))

    log = raw_log(svc)
    assert MARK not in log  # no personal value in clear, in any event
    events = [decode_event(line.encode()) for line in log.splitlines()]
    types = {type(e) for e in events}
    assert {MemoryWritten, MemoryReinforced, ConflictDetected, MemoryRedacted, ConsentRevoked} <= types
    revoked = next(e for e in events if isinstance(e, ConsentRevoked))
    assert revoked.consent_ref is not None
    with svc.pool.connection() as conn:
        assert svc.keyring.open(conn, revoked.consent_ref) == f"consent-{MARK}"  # sealed under the subject key

    # the projections read them while the keys live
    svc.catch_up()
    row = one(svc, "SELECT key, scope_id, provenance FROM facts_v1 WHERE memory_id = %s", rival.memory_id)
    assert row[0] == f"employer-{MARK}" and row[1] == DOC
    assert row[2]["source_ref"] == f"profile-{MARK}.json" and row[2]["writer"] == "importer"
    (conflict,) = list_conflicts(svc.pool, FactsTables(1), "alice", include_resolved=True)
    assert (conflict.key, conflict.scope) == (f"employer-{MARK}", {"type": "document", "id": DOC})
    # the revoked memory's key was destroyed with its text: facts keep no personal field of it
    gone = one(
        svc, "SELECT status, content, key, scope_id, provenance FROM facts_v1 WHERE memory_id = %s", first.memory_id
    )
    assert gone[:4] == ("revoked", None, None, None)
    assert MARK not in str(gone[4]) and gone[4]["writer"] == "importer"
    # and so does the ledger's head table, once the memory's keys are gone
    head = one(
        svc,
        "SELECT key, scope_id, turn_id, tool_call_id, source_ref, consent_ref, status FROM ledger_memories"
        " WHERE memory_id = %s",
        first.memory_id,
    )
    assert head == (None, None, None, None, None, None, "revoked")


def test_erasure_leaves_no_personal_field_in_the_head_table_the_log_or_a_replay(svc: Services) -> None:
    p = svc.principal()
    kept = claim(svc, "Alice reads maps", f"hobby-{MARK}", turn_id=f"turn-{MARK}")
    # a consent withdrawn before anything was written under it: sealed under the subject key
    withdrawal = RevokeConsent(subject_id="alice", consent_ref=f"consent-{MARK}", allow_unmatched=True)
    svc.ledger.revoke_consent(p, withdrawal)
    svc.catch_up()
    assert one(svc, "SELECT key FROM facts_v1 WHERE memory_id = %s", kept.memory_id) == f"hobby-{MARK}"

    svc.ledger.erase(p, EraseMemories(subject_id="alice", whole_subject=True, reason="asked"))
    svc.catch_up()
    head = one(
        svc,
        "SELECT key, scope_id, turn_id, tool_call_id, source_ref, consent_ref, sealed_content, status"
        " FROM ledger_memories WHERE memory_id = %s",
        kept.memory_id,
    )
    assert head == (None, None, None, None, None, None, None, "erased")
    assert one(svc, "SELECT count(*) FROM memory_keys WHERE subject_id = 'alice' AND wrapped_key IS NOT NULL") == 0

    events = [decode_event(line.encode()) for line in raw_log(svc).splitlines()]
    with svc.pool.connection() as conn:
        for e in events:  # nothing sealed in the log opens any more
            for sealed in _sealed_parts(e):
                assert svc.keyring.open(conn, sealed) is None

    for name in ("facts", "summaries", "vectors"):
        svc.projections[name].reset()
    svc.catch_up()
    assert one(svc, "SELECT count(*) FROM facts_v1") == 0
    with svc.pool.connection() as conn:
        history = conn.execute("SELECT * FROM facts_history_v1").fetchall()
    assert history and MARK not in repr(history)


def test_a_redacted_memory_keeps_its_key_and_scope_through_a_replay(svc: Services) -> None:
    written = claim(svc, "Alice's phone is 555-0100", f"phone-{MARK}", source_ref=f"card-{MARK}")
    p = svc.principal()
    svc.ledger.redact(p, "alice", RedactMemory(memory_id=written.memory_id, replacement="Alice's phone is [redacted]"))
    svc.catch_up()
    live = one(svc, "SELECT key, scope_id, provenance, content FROM facts_v1 WHERE memory_id = %s", written.memory_id)
    svc.projections["facts"].reset()
    svc.catch_up()
    replayed = one(
        svc, "SELECT key, scope_id, provenance, content FROM facts_v1 WHERE memory_id = %s", written.memory_id
    )
    assert replayed == live  # the redaction carries the fields the destroyed key sealed
    assert replayed[:2] == (f"phone-{MARK}", DOC) and replayed[2]["source_ref"] == f"card-{MARK}"
    result = svc.recall.recall(p, "alice", PURPOSE, "phone", utc_now(), scope_keys=(f"document:{DOC}",))
    assert written.memory_id in [i.memory_id for i in result.items]


def _sealed_parts(event: Any) -> list[Any]:
    if isinstance(event, MemoryWritten):
        return [event.memory.content, event.memory.personal]
    if isinstance(event, MemoryRedacted):
        return [event.content, *([event.personal] if event.personal else [])]
    if isinstance(event, MemoryReinforced | ConsentRevoked):
        sealed = event.personal if isinstance(event, MemoryReinforced) else event.consent_ref
        return [sealed] if sealed is not None else []
    return []


def test_a_restored_key_store_and_head_table_are_shredded_again(svc: Services) -> None:
    from ledger.erasure import restore_tombstones

    p = svc.principal()
    gone = claim(svc, "Alice's locker code is 4711", f"locker-{MARK}", turn_id=f"turn-{MARK}")
    key_row = one(svc, "SELECT wrapped_key FROM memory_keys WHERE key_id = %s", gone.memory_id)
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone.memory_id,), reason="asked"))
    with svc.pool.connection() as conn:  # a backup taken before the erasure is restored over both tables
        conn.execute("UPDATE memory_keys SET wrapped_key = %s WHERE key_id = %s", (key_row, gone.memory_id))
        conn.execute(
            "UPDATE ledger_memories SET status = 'active', key = %s, scope_id = %s, turn_id = %s WHERE memory_id = %s",
            (f"locker-{MARK}", DOC, f"turn-{MARK}", gone.memory_id),
        )
    with svc.pool.connection() as conn, conn.transaction():
        restored, destroyed = restore_tombstones(conn, svc.keyring, {}, utc_now())  # the embedded mode: no topic
    assert (restored, destroyed) == (0, 1)
    head = one(svc, "SELECT status, key, scope_id, turn_id FROM ledger_memories WHERE memory_id = %s", gone.memory_id)
    assert head == ("erased", None, None, None)


def test_an_erased_memorys_data_key_leaves_the_key_store_files(svc: Services) -> None:
    from pathlib import Path

    p = svc.principal()
    gone = claim(svc, f"Alice's vault code is 90210-{MARK}", f"vault-{MARK}")
    svc.catch_up()
    wrapped = bytes(one(svc, "SELECT wrapped_key FROM memory_keys WHERE key_id = %s", gone.memory_id))

    def on_disk(table: str) -> bytes:
        with svc.pool.connection() as conn:
            conn.execute("CHECKPOINT")  # the table files as the server wrote them
            root = one(svc, "SHOW data_directory")
            path = one(svc, "SELECT pg_relation_filepath(%s)", table)
        return (Path(root) / path).read_bytes()

    assert wrapped in on_disk("memory_keys")
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone.memory_id,), reason="asked"))
    svc.catch_up()
    assert wrapped not in on_disk("memory_keys")  # not even as an old row version: the file was rewritten


def test_erasure_requests_a_restore_lost_are_recorded_again_from_the_log(svc: Services) -> None:
    from ledger.erasure import restore_requests
    from projections.trace import trace

    p = svc.principal()
    gone = claim(svc, "Alice's locker code is 4711", f"locker-{MARK}")
    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone.memory_id,), reason="asked"))
    svc.catch_up()
    before = trace(svc.pool, r.request_id or "", svc.trace_targets())
    with svc.pool.connection() as conn:  # a backup older than the request was restored over the ledger's tables
        conn.execute("DELETE FROM erasure_requests")
    with svc.pool.connection() as conn, conn.transaction():
        assert restore_requests(conn, svc.log) == 1
        assert restore_requests(conn, svc.log) == 0  # idempotent
    after = trace(svc.pool, r.request_id or "", svc.trace_targets())
    assert after.verdict == before.verdict == "complete"
    assert (after.requested_by, after.reason, after.memory_ids) == (before.requested_by, "asked", [gone.memory_id])
    assert (after.log_partition, after.log_offset) == (before.log_partition, before.log_offset)


def test_the_data_key_leaves_the_files_when_an_older_snapshot_ends_after_the_erase(svc: Services) -> None:
    """``VACUUM FULL`` copies a row version that an open snapshot may still see (recently
    dead): a transaction of any session of the database that began before the erasure
    committed (autovacuum's own ANALYZE, a long read) kept the destroyed key in the new
    file. The rewrite waits for such snapshots to end first."""
    import threading
    import time
    from pathlib import Path

    import psycopg

    p = svc.principal()
    gone = claim(svc, f"Alice's safe code is 31337-{MARK}", f"safe-{MARK}")
    svc.catch_up()
    wrapped = bytes(one(svc, "SELECT wrapped_key FROM memory_keys WHERE key_id = %s", gone.memory_id))
    dsn = svc.settings.postgres_dsn
    held = threading.Event()

    def older_snapshot() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT count(*) FROM pg_class").fetchone()  # takes the snapshot
            held.set()
            time.sleep(1.5)
            conn.rollback()

    reader = threading.Thread(target=older_snapshot)
    reader.start()
    held.wait(10)
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone.memory_id,), reason="asked"))
    reader.join()
    with svc.pool.connection() as conn:
        conn.execute("CHECKPOINT")
    root, path = one(svc, "SELECT current_setting('data_directory'), pg_relation_filepath('memory_keys')")
    assert wrapped not in (Path(root) / path).read_bytes()
