"""An erasure of a whole subject removes every row of the subject from every store,
whether or not the ledger's heads know the memory, and ``trace`` probes every memory the
log held for the subject before the erasure: it says ``failed`` while any copy remains."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import EraseMemories, utc_now
from projections.trace import trace
from tests.builders import memory_write
from tests.integration.conftest import one
from workers.bootstrap import Services

_COLUMNS = (
    "memory_id, subject_id, revision, status, kind, content, content_hmac, key, purpose, scope_type, scope_id,"
    " sensitivity, retention_basis, expires_at, confirmed, confidence, veracity, provenance, derived_from,"
    " superseded_by, written_at, updated_at"
)


def test_a_whole_subject_erasure_removes_rows_the_ledger_does_not_know_and_trace_probes_them(svc: Services) -> None:
    p = svc.principal()
    known = svc.ledger.write(p, memory_write("bob", "Bob likes sailing", key="hobby")).memory_id
    phantom = svc.ledger.write(p, memory_write("bob", "Bob's door code is 9911", key="door")).memory_id
    other = svc.ledger.write(p, memory_write("carol", "Carol likes chess", key="hobby")).memory_id
    svc.catch_up()
    with svc.pool.connection() as conn:  # the ledger forgets one memory its log and stores hold
        conn.execute("DELETE FROM ledger_memories WHERE memory_id = %s", (phantom,))
        conn.execute(f"CREATE TABLE saved_row AS SELECT {_COLUMNS} FROM facts_v1 WHERE memory_id = %s", (phantom,))

    r = svc.ledger.erase(p, EraseMemories(subject_id="bob", whole_subject=True, reason="asked"))
    assert r.request_id is not None and r.affected == (known,)  # the heads knew only this one
    svc.catch_up()
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE subject_id = 'bob'") == 0
    assert one(svc, "SELECT count(*) FROM facts_history_v1 WHERE subject_id = 'bob' AND content_hmac IS NOT NULL") == 0
    assert svc.index is not None
    assert svc.index.retrieve([known, phantom]) == {}
    assert list(svc.index.retrieve([other])) == [other]  # another subject keeps its memories
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    assert report.verdict == "complete", [(s.store, s.status, s.probe) for s in report.stores]
    assert one(svc, "SELECT count(*) FROM memory_keys WHERE subject_id = 'bob' AND wrapped_key IS NOT NULL") == 0

    with svc.pool.connection() as conn:  # a copy comes back (a restored backup of the facts table)
        conn.execute(f"INSERT INTO facts_v1 ({_COLUMNS}) SELECT {_COLUMNS} FROM saved_row")
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    facts: Any = next(s for s in report.stores if s.store == "facts")
    assert report.verdict == "failed" and facts.probe_found == 1


def test_trace_of_a_whole_subject_finds_rows_under_ids_the_log_never_held_and_spares_later_writes(
    svc: Services,
) -> None:
    p = svc.principal()
    kept = svc.ledger.write(p, memory_write("gus", "Gus likes rowing", key="hobby")).memory_id
    svc.ledger.write(p, memory_write("gus:b", "Gus B likes chess", key="hobby"))  # a subject that extends the name
    svc.catch_up()
    svc.recall.recall(p, "gus:b", "support", "chess", utc_now())  # a cached result of the other subject
    r = svc.ledger.erase(p, EraseMemories(subject_id="gus", whole_subject=True, reason="asked"))
    assert r.request_id is not None
    later = svc.ledger.write(p, memory_write("gus", "Gus now likes running", key="hobby")).memory_id
    svc.catch_up()
    svc.recall.recall(p, "gus", "support", "running", utc_now())  # a later recall caches the later write
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    assert report.verdict == "complete", [(s.store, s.status, s.probe) for s in report.stores]

    with svc.pool.connection() as conn:  # rows under an id no log record names (restored from elsewhere)
        conn.execute(
            f"INSERT INTO facts_v1 ({_COLUMNS}) SELECT 'restored-0000-gus', {_COLUMNS.split(', ', 1)[1]}"
            " FROM facts_v1 WHERE memory_id = %s",
            (later,),
        )
    assert svc.cache is not None
    svc.cache.client.set(svc.cache.entry_key("gus", {"restored": True}), json.dumps([{"memory_id": kept}]))
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    found = {s.store: s.probe_found for s in report.stores}
    assert report.verdict == "failed" and found["facts"] == 1 and found["cache"] == 1, found

    # the remedy: the subject erased again, though the ledger knows no memory of it left
    again = svc.ledger.erase(p, EraseMemories(subject_id="gus", whole_subject=True, reason="restored copies"))
    assert again.request_id is not None and again.affected == (later,)
    svc.catch_up()
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE subject_id = 'gus'") == 0
    report = trace(svc.pool, again.request_id, svc.trace_targets())
    assert report.verdict == "complete", [(s.store, s.status, s.probe) for s in report.stores]
    empty = svc.ledger.erase(p, EraseMemories(subject_id="gus", whole_subject=True, reason="once more"))
    assert empty.request_id is not None and empty.affected == ()


@pytest.mark.parametrize("entry", ['{"x": 1}', "not json", "[1, 2]", '[{"content": "no id"}]'])
def test_a_cache_entry_trace_cannot_read_is_a_copy_found_not_an_unreachable_store(svc: Services, entry: str) -> None:
    p = svc.principal()
    svc.ledger.write(p, memory_write("hal", "Hal likes sailing"))
    r = svc.ledger.erase(p, EraseMemories(subject_id="hal", whole_subject=True, reason="asked"))
    svc.catch_up()
    assert r.request_id is not None and svc.cache is not None
    svc.cache.client.set(svc.cache.entry_key("hal", {"left": entry}), entry)
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    cache = next(s for s in report.stores if s.store == "cache")
    assert cache.status == "failed" and cache.probe_found is not None and cache.probe_found >= 1, cache
    assert report.verdict == "failed"


def test_trace_of_an_erasure_by_id_finds_a_cache_entry_its_entry_set_does_not_list(svc: Services) -> None:
    """An entry put back under the subject's prefix (restored from a backup, say) without
    its entry set listing it still holds the erased memory: trace finds it by scanning."""
    p = svc.principal()
    gone = svc.ledger.write(p, memory_write("ivy", "Ivy's locker code is 5512"))
    svc.ledger.write(p, memory_write("ivy", "Ivy likes rowing"))
    r = svc.ledger.erase(p, EraseMemories(subject_id="ivy", memory_ids=[gone.memory_id], reason="asked"))
    svc.catch_up()
    assert r.request_id is not None and svc.cache is not None
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    assert report.verdict == "complete", [(s.store, s.status, s.probe) for s in report.stores]
    restored = [{"memory_id": gone.memory_id, "revision": 1, "content": "Ivy's locker code is 5512", "grouped": []}]
    svc.cache.client.set(svc.cache.entry_key("ivy", {"restored": True}), json.dumps(restored))  # no entry set
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    cache = next(s for s in report.stores if s.store == "cache")
    assert cache.status == "failed" and cache.probe_found == 1, cache
    assert report.verdict == "failed"
