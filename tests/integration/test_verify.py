"""``verify`` against the real stores (Postgres, Redis, Qdrant local engine): after a
history of every kind of change the live projections equal a fresh fold of the log;
after tampering with one row, point or payload field, verify reports exactly that
difference (memory text only as a fingerprint); a projection that is behind is folded
only up to its own position; and the CLI exits 1 on a difference."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, MemoryWritten, decode_event, encode_event, touched_memories
from ledger.eventlog import read_all
from projections import base, marks
from projections.errors import UnreadableErasureError
from projections.facts import FactsProjection
from projections.verify import Difference, VerifyReport, render_value, verify_postgres, verify_vectors
from tests.builders import memory_write
from tests.integration.ledger_history import History, make_history
from workers.bootstrap import Services, build
from workers.settings import Settings

pytestmark = pytest.mark.integration


def settings(tmp_path: Path, dsn: str, redis_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data", postgres_dsn=dsn, redis_url=redis_url, vector_engine="client", embedder="hashing"
    )


@pytest.fixture
def svc(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    services = build(settings(tmp_path, fresh_dsn, redis_url))
    yield services
    services.close()


@pytest.fixture
def history(svc: Services) -> History:
    h = make_history(svc)
    svc.catch_up()
    return h


def check(svc: Services, name: str) -> VerifyReport:
    if name == "vectors":
        assert svc.index is not None
        return verify_vectors(svc.pool, svc.keyring, svc.log, svc.index, svc.embedder)
    return verify_postgres(svc.pool, svc.keyring, svc.log, "facts" if name == "facts" else "summaries")


def execute(svc: Services, query: str, *params: Any) -> int:
    with svc.pool.connection() as conn:
        return conn.execute(query, params).rowcount


def fingerprint(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]} ({len(text)} chars)"


@pytest.mark.parametrize("name", ["facts", "summaries", "vectors"])
def test_after_normal_operation_the_live_projection_equals_the_fold(svc: Services, history: History, name: str) -> None:
    # the history holds a memory reinstated through a chain (its direct successor erased before)
    with svc.pool.connection() as conn:
        row = conn.execute("SELECT status FROM facts_v1 WHERE memory_id = %s", (history.reinstated_through_chain,))
        assert row.fetchone() == ("needs_confirmation",)
    report = check(svc, name)
    assert report.differences == [] and report.pending == [] and report.warnings == []
    assert report.reference_differences == [] and report.reference_pending == []  # the specification agrees too
    assert report.ok and report.subjects_differing == 0
    if name == "vectors":  # every point's vector is compared, live and fold
        assert svc.index is not None and report.rows_compared == 2 * svc.index.count() > 0
    else:  # no subject's checksum differs, so no row is compared
        assert report.rows_compared == 0
    total = sum(svc.log.end_offsets().values())
    assert report.events_folded == total and report.records_skipped == 0
    assert report.positions == {p: e - 1 for p, e in svc.log.end_offsets().items()}
    assert report.subjects == 1
    with svc.pool.connection() as conn:  # the scratch schema is gone
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'memledger_verify_%'").fetchone() == (
            0,
        )


def test_a_tampered_content_is_reported_as_that_column_with_fingerprints_only(svc: Services, history: History) -> None:
    assert execute(svc, "UPDATE facts_v1 SET content = 'Alice prefers tea' WHERE memory_id = %s", history.active) == 1
    report = check(svc, "facts")
    assert report.differences == [
        Difference(
            "facts_v1",
            "alice",
            history.active,
            history.active,
            "content",
            fingerprint("Alice prefers tea"),
            fingerprint("Alice deploys with Kubernetes"),
        )
    ]
    assert report.subjects_differing == 1 and not report.ok
    assert report.reference_differences == [replace(report.differences[0], against="reference")]
    text = report.render() + json.dumps(report.to_dict())
    assert "tea" not in text and "Kubernetes" not in text
    assert f"{history.active} content: live {fingerprint('Alice prefers tea')} | reference" in report.render()


def test_a_deleted_row_and_a_changed_history_row_are_reported_exactly(svc: Services, history: History) -> None:
    assert execute(svc, "DELETE FROM facts_v1 WHERE memory_id = %s", history.successor) == 1
    assert (
        execute(
            svc,
            "UPDATE facts_history_v1 SET producer = 'mallory' WHERE memory_id = %s AND revision = 1",
            history.superseded,
        )
        == 1
    )
    report = check(svc, "facts")
    assert report.differences == [
        Difference("facts_v1", "alice", history.successor, history.successor, "(row)", None, "present"),
        Difference(
            "facts_history_v1",
            "alice",
            f"{history.superseded}@1",
            history.superseded,
            "producer",
            "mallory",
            "memledger",
        ),
    ]


def test_a_deleted_summary_is_reported(svc: Services, history: History) -> None:
    with svc.pool.connection() as conn:
        [(summary,)] = conn.execute("SELECT memory_id FROM summaries_v1").fetchall()
    assert execute(svc, "DELETE FROM summaries_v1 WHERE memory_id = %s", summary) == 1
    assert check(svc, "summaries").differences == [
        Difference("summaries_v1", "alice", summary, summary, "(row)", None, "present")
    ]


def test_a_changed_vector_payload_a_missing_point_and_a_changed_vector_are_reported(
    svc: Services, history: History
) -> None:
    index = svc.index
    assert index is not None
    index.set_payload(history.active, {"status": "needs_confirmation"})
    index.delete([history.successor])
    [point] = index.retrieve([history.redacted]).values()
    from projections.vector_index import VectorPoint

    index.upsert([VectorPoint(history.redacted, tuple(reversed(point.vector)), point.payload)])
    report = check(svc, "vectors")
    collection = index.collection
    vector = [d for d in report.differences if d.column == "vector"]
    assert [d for d in report.differences if d.column != "vector"] == [
        Difference(collection, "alice", history.active, history.active, "status", "needs_confirmation", "active"),
        Difference(collection, "alice", history.successor, history.successor, "(row)", None, "present"),
    ]
    assert [(d.memory_id, d.fold) for d in vector] == [(history.redacted, "reference")]
    assert vector[0].live is not None and vector[0].live.startswith("cosine ")


def test_a_projection_that_is_behind_is_folded_up_to_its_own_position(svc: Services, history: History) -> None:
    before = check(svc, "facts").positions
    p = svc.principal()
    svc.ledger.write(p, memory_write(content="Alice likes Rust"))  # appended, not applied
    svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(history.active,), reason="asked"))
    report = check(svc, "facts")
    assert report.positions == before
    assert report.differences == []  # the new write is beyond the position: not folded, not missing
    # the erasure destroyed the key after the position: the fold cannot read the text the
    # live projection still holds; listed as pending, not as a difference
    assert {(d.table, d.memory_id) for d in report.pending} >= {("facts_v1", history.active)}
    assert all(d.memory_id == history.active for d in report.pending)
    svc.catch_up()
    caught_up = check(svc, "facts")
    assert caught_up.ok and caught_up.pending == []


def test_an_erasure_this_reader_cannot_read_stops_verify_rather_than_being_skipped(
    svc: Services, history: History
) -> None:
    newer = b'{"type": "ErasureRequested", "schema_version": 99, "subject_id": "alice", "request_id": "er-x"}'
    at = svc.log.append("alice", newer)
    # a newer reader applied it (its upcaster knows v99): the live position is past it
    with svc.pool.connection() as conn:
        base.save_position(conn, "facts_v1", at)
    with pytest.raises(UnreadableErasureError) as stopped:
        check(svc, "facts")
    assert (stopped.value.partition, stopped.value.offset) == (at.partition, at.offset)
    assert "ErasureRequested v99" in str(stopped.value)


def test_a_bug_in_the_shared_apply_code_is_found_by_the_reference_only(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a facts projection that forgets reinforcements, live and in verify's own fold alike
    monkeypatch.setattr(FactsProjection, "_reinforced", lambda self, conn, e: None)
    h = make_history(svc)
    svc.catch_up()
    report = check(svc, "facts")
    assert report.differences == []  # the fold repeats the bug
    assert {(d.table, d.key, d.column) for d in report.reference_differences} == {
        ("facts_v1", h.active, "revision"),  # (its confidence was 1.0 already)
        ("facts_v1", h.active, "updated_at"),
    }
    assert not report.ok and all(d.against == "reference" for d in report.reference_differences)
    assert f"DIFF facts_v1 subject alice {h.active} revision: live 1 | reference 2" in report.render()


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
def test_a_duplicate_write_in_the_log_after_its_supersession(
    svc: Services, history: History, monkeypatch: pytest.MonkeyPatch, guarded: bool
) -> None:
    """Issue 11, case 2: a ``MemoryWritten`` appended again after the memory's
    supersession. With the revision guards it changes nothing and verify agrees on both
    sides; without them (the vectors projection as it was) the point comes back, live and
    in verify's own fold, and only the reference says so."""
    if not guarded:
        monkeypatch.setattr(marks.MarkBook, "fresh", lambda self, event: touched_memories(event))
    [written] = [
        r
        for r in read_all(svc.log)
        if (e := decode_event(r.value)).type == "MemoryWritten" and e.memory_id == history.superseded
    ]
    assert isinstance(decode_event(written.value), MemoryWritten)
    svc.log.append(written.key, encode_event(decode_event(written.value)))
    svc.catch_up()
    report = check(svc, "vectors")
    # (unguarded, the marks go back and forth: only the points matter here)
    assert [d for d in report.differences if not d.table.startswith("revision_marks")] == []
    collection = svc.index.collection if svc.index is not None else ""
    if guarded:
        assert report.ok and report.reference_differences == []
        assert svc.index is not None and svc.index.retrieve([history.superseded]) == {}
    else:
        assert (
            Difference(
                collection, "alice", history.superseded, history.superseded, "(row)", "present", None, "reference"
            )
            in report.reference_differences
        )
        assert not report.ok


def test_render_value_never_shows_content_and_cuts_long_values() -> None:
    assert render_value("content", "secret text") == fingerprint("secret text")
    long = render_value("provenance", {"k": "x" * 500})
    assert long is not None and len(long) == 80 and long.endswith("…")
    assert render_value("status", None) is None


def test_the_cli_exits_0_when_equal_and_1_with_the_difference(
    tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    services = build(settings(tmp_path, fresh_dsn, redis_url))
    try:
        h = make_history(services)
        services.catch_up()
    finally:
        services.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_") or k.startswith("MEMLEDGER_TEST_")}
    env.update(
        MEMLEDGER_DATA_DIR=str(tmp_path / "data"),
        MEMLEDGER_POSTGRES_DSN=fresh_dsn,
        MEMLEDGER_REDIS_URL=redis_url,
        MEMLEDGER_VECTOR_ENGINE="client",
        MEMLEDGER_EMBEDDER="hashing",
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "workers", "verify", *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)

    ok = run("all", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["ok"] is True
    assert [p["projection"] for p in out["projections"]] == ["facts_v1", "summaries_v1", "vectors_v1"]
    import psycopg

    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute("UPDATE facts_v1 SET confidence = 0.01 WHERE memory_id = %s", (h.active,))
    bad = run("facts")
    assert bad.returncode == 1, bad.stderr
    assert f"DIFF facts_v1 subject alice {h.active} confidence: live 0.01 | fold" in bad.stdout
    usage = run("cache")
    assert usage.returncode == 2 and "projection: must be one of facts, summaries, vectors or all" in usage.stderr
