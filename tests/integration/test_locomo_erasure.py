"""Erasure on one real LoCoMo conversation (real Postgres and Redis, a local Qdrant index,
the hashing embedder): erase one memory, then one session by its ``source_ref``, then the
whole subject. After each: the erased content is absent from facts, full-text search,
history fingerprints, vectors, the cache, summaries and recall; its copies in the log
cannot be decrypted; and replaying every projection from offset 0 brings nothing back.

Text checks use only erased text that no surviving memory also holds (LoCoMo repeats
short turns such as greetings); checks by memory id cover every erased memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contracts import (
    PERSONAL_CONTEXT,
    EraseMemories,
    MemoryRedacted,
    MemoryWritten,
    SummaryDerived,
    decode_event,
    utc_now,
)
from ledger.eventlog import read_all
from projections.trace import trace
from workers.bootstrap import Services
from workers.locomo import ingest, load_conversations
from workers.locomo.mapping import PURPOSE

pytestmark = [pytest.mark.integration, pytest.mark.locomo]

SAMPLE_QUERIES = 8
"""Recall queries per check (each is one erased text, asked verbatim)."""


@dataclass
class Erased:
    """What an erasure removed: memory ids, and {content_hmac: text} of erased text that no
    surviving memory holds."""

    request_id: str
    ids: list[str]
    texts: dict[str, str]


def rows(svc: Services, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with svc.pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def contents(svc: Services, subject: str) -> dict[str, tuple[str, str]]:
    """memory_id -> (content_hmac, text) of every memory of the subject that holds text."""
    found = rows(svc, "SELECT memory_id, content_hmac, content FROM facts_v1 WHERE subject_id = %s", subject)
    found += rows(svc, "SELECT memory_id, content_hmac, content FROM summaries_v1 WHERE subject_id = %s", subject)
    return {m: (h, t) for m, h, t in found if t is not None}


def erase(svc: Services, subject: str, before: dict[str, tuple[str, str]], **target: Any) -> Erased:
    r = svc.ledger.erase(svc.principal(), EraseMemories(subject_id=subject, reason="LoCoMo erasure test", **target))
    svc.catch_up()
    assert r.request_id
    surviving = {h for (h,) in rows(svc, "SELECT content_hmac FROM ledger_memories WHERE status <> 'erased'")}
    texts = {before[m][0]: before[m][1] for m in r.affected if m in before and before[m][0] not in surviving}
    return Erased(r.request_id, list(r.affected), texts)


def assert_gone(svc: Services, subject: str, e: Erased) -> None:
    ids, hmacs, texts = e.ids, list(e.texts), list(e.texts.values())
    # facts rows and full-text search
    assert rows(svc, "SELECT memory_id FROM facts_v1 WHERE memory_id = ANY(%s)", ids) == []
    assert (
        rows(svc, "SELECT memory_id FROM facts_v1 WHERE content = ANY(%s) OR content_hmac = ANY(%s)", texts, hmacs)
        == []
    )
    for text in texts[:SAMPLE_QUERIES]:
        hits = rows(
            svc,
            "SELECT memory_id, content FROM facts_v1 WHERE tsv @@ plainto_tsquery('english', %s)"
            " UNION ALL SELECT memory_id, content FROM summaries_v1 WHERE tsv @@ plainto_tsquery('english', %s)",
            text,
            text,
        )
        assert all(m not in ids and c != text for m, c in hits), text
    # history keeps no fingerprint of erased text
    assert (
        rows(svc, "SELECT memory_id FROM facts_history_v1 WHERE memory_id = ANY(%s) AND content_hmac IS NOT NULL", ids)
        == []
    )
    assert rows(svc, "SELECT memory_id FROM facts_history_v1 WHERE content_hmac = ANY(%s)", hmacs) == []
    # summaries
    assert (
        rows(svc, "SELECT memory_id FROM summaries_v1 WHERE memory_id = ANY(%s) OR derived_from && %s", ids, ids) == []
    )
    # vectors: points and payloads
    assert svc.index is not None
    assert svc.index.retrieve(ids) == {}
    points = svc.index.retrieve(svc.index.scroll_ids(subject))
    assert not [m for m, p in points.items() if p.payload.get("content_hmac") in e.texts]
    # cache
    assert svc.cache is not None
    for key in svc.cache.entries(subject):
        for item in svc.cache.get(key) or []:
            assert item["memory_id"] not in ids and item.get("content") not in texts
    # recall, asked with the erased text itself (this also refills the cache for the next check)
    for text in texts[:SAMPLE_QUERIES]:
        result = svc.recall.recall(svc.principal(), subject, PURPOSE, text, utc_now(), include_unconfirmed=True)
        got = [(i.memory_id, i.content) for i in result.items] + [
            (g.memory_id, g.content) for i in result.items for g in i.grouped
        ]
        assert all(m not in ids and c != text for m, c in got), text
    # the log: every sealed copy of an erased memory fails to decrypt, its keys are gone
    assert (
        rows(
            svc,
            "SELECT key_id FROM memory_keys WHERE (key_id = ANY(%s) OR split_part(key_id, '/', 1) = ANY(%s))"
            " AND wrapped_key IS NOT NULL",
            ids,
            ids,
        )
        == []
    )
    copies = 0
    with svc.pool.connection() as conn:
        for record in read_all(svc.log):
            event = decode_event(record.value)
            if isinstance(event, MemoryWritten | SummaryDerived) and event.memory_id in ids:
                assert svc.keyring.open(conn, event.memory.content) is None
                # the turn id, key and scope id were sealed with it: unreadable too
                assert svc.keyring.open(conn, event.memory.personal, PERSONAL_CONTEXT) is None
                copies += 1
            elif isinstance(event, MemoryRedacted) and event.memory_id in ids:
                assert svc.keyring.open(conn, event.content) is None
    assert copies == len(ids)


def replay_everything(svc: Services) -> None:
    for projection in svc.projections.values():
        projection.reset()
    svc.catch_up()


def warm_cache(svc: Services, subject: str, texts: list[str]) -> None:
    for text in texts[:SAMPLE_QUERIES]:
        svc.recall.recall(svc.principal(), subject, PURPOSE, text, utc_now(), include_unconfirmed=True)


def test_locomo_erase_a_memory_a_session_and_the_subject(svc: Services, locomo_path: Path) -> None:
    (conv,) = load_conversations(locomo_path, limit=1)
    sid = conv.sample_id
    ingest(svc, locomo_path, limit=1)
    before = contents(svc, sid)
    total = len(before)
    assert total > 400

    # 1. one memory: the longest turn of the first session, and what was derived from it
    turn = max(conv.sessions[0].turns, key=lambda t: len(t.document))
    ((one,),) = rows(
        svc, "SELECT memory_id FROM ledger_memories WHERE subject_id = %s AND turn_id = %s", sid, turn.dia_id
    )
    warm_cache(svc, sid, [turn.document])
    assert svc.cache is not None and svc.cache.entries(sid)
    first = erase(svc, sid, before, memory_ids=(one,))
    assert first.ids[0] == one and turn.document in first.texts.values()
    assert first.texts
    assert len(first.ids) > 1  # the session summary and the observations that cite it went with it
    assert_gone(svc, sid, first)
    assert trace(svc.pool, first.request_id, svc.trace_targets()).verdict == "complete"
    replay_everything(svc)
    assert_gone(svc, sid, first)

    # 2. a session, by its source_ref
    session = conv.sessions[1]
    source = f"locomo:{sid}:session_{session.number}"
    warm_cache(svc, sid, [t.document for t in session.turns])
    second = erase(svc, sid, before, source_ref=source)
    assert len(second.ids) >= len(session.turns) and len(second.texts) > len(session.turns) // 2
    assert_gone(svc, sid, second)
    assert trace(svc.pool, second.request_id, svc.trace_targets()).verdict == "complete"
    replay_everything(svc)
    assert_gone(svc, sid, second)
    assert_gone(svc, sid, first)
    left = rows(svc, "SELECT count(*) FROM facts_v1 WHERE subject_id = %s", sid)[0][0]
    assert 0 < left < total

    # 3. the whole subject
    warm_cache(svc, sid, [t.document for t in conv.sessions[-1].turns])
    third = erase(svc, sid, before, whole_subject=True)
    assert len(third.texts) > total // 2
    assert_gone(svc, sid, third)
    assert trace(svc.pool, third.request_id, svc.trace_targets()).verdict == "complete"
    replay_everything(svc)
    for e in (first, second, third):
        assert_gone(svc, sid, e)
        assert trace(svc.pool, e.request_id, svc.trace_targets()).verdict == "complete"
    for table in ("facts_v1", "summaries_v1"):
        assert rows(svc, f"SELECT count(*) FROM {table} WHERE subject_id = %s", sid) == [(0,)]
    assert svc.index is not None and svc.index.scroll_ids(sid) == []
    assert rows(
        svc, "SELECT count(*) FROM facts_history_v1 WHERE subject_id = %s AND content_hmac IS NOT NULL", sid
    ) == [(0,)]
