"""Recall's full-text search and the reading of its items, against the real PostgreSQL:
the SQL's Okapi BM25 equals the formula computed here over PostgreSQL's own lexemes,
equal texts get equal scores (ties go by memory id), and the items read ahead of MMR
give the same result as items read after it."""

from __future__ import annotations

import math
import threading
from collections import Counter
from concurrent.futures import Future
from datetime import datetime
from typing import Any

import pytest

from contracts import utc_now
from projections.base import ContentAccess
from projections.facts import FactsProjection
from projections.ranking.config import RankingConfig
from tests.builders import PURPOSE, memory_write
from workers.bootstrap import Services

pytestmark = pytest.mark.integration

TEXTS = [
    "Caroline went to the LGBTQ support group on Sunday",
    "Melanie painted a sunrise over the lake",
    "The support group met again and Caroline spoke about the group",
    "Melanie and Caroline talked about painting and support",
    "A quiet week at home with a book",
]
QUERY = "When did Caroline go to the support group?"


def _params(query: str, **over: Any) -> dict[str, Any]:
    """The parameters of recall's SQL for alice's ``PURPOSE`` now, BM25's k1 1.2 and b 0.75."""
    base = {
        "subject": "alice",
        "purpose": PURPOSE,
        "statuses": ["active"],
        "scopes": ["subject:alice"],
        "at": utc_now(),
        "as_of": None,
        "query": query,
        "k1": 1.2,
        "b": 0.75,
    }
    return {**base, **over}


def _lexical(svc: Services, query: str) -> Any:
    params = _params(query)
    with svc.pool.connection() as conn:
        return svc.recall._queries.lexical(conn, params, "bm25", depth=50, seeds=50, summaries=3)


def _bm25_here(svc: Services, ids: list[str], query: str) -> dict[str, float]:
    """Okapi BM25 (k1 1.2, b 0.75, Lucene's idf) over the lexemes PostgreSQL stores, in Python."""
    with svc.pool.connection() as conn:
        docs = {
            mid: dict(zip(lexemes, counts, strict=True))
            for mid, lexemes, counts in conn.execute(
                "SELECT f.memory_id, array_agg(u.lexeme), array_agg(cardinality(u.positions))"
                " FROM facts f, unnest(f.tsv) u WHERE f.memory_id = ANY(%s) GROUP BY f.memory_id",
                (ids,),
            ).fetchall()
        }
        terms = {
            r[0] for r in conn.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", (query,)).fetchall()
        }
    n, avgdl = len(ids), sum(len(d) for d in docs.values()) / len(ids)
    df = Counter(t for d in docs.values() for t in terms if t in d)
    out: dict[str, float] = {}
    for mid, d in docs.items():
        hit = [t for t in sorted(terms) if t in d]
        if hit:
            out[mid] = sum(
                math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                * d[t]
                * 2.2
                / (d[t] + 1.2 * (1 - 0.75 + 0.75 * len(d) / avgdl))
                for t in hit
            )
    return out


def test_the_full_text_score_is_okapi_bm25_over_the_stored_lexemes(svc: Services) -> None:
    p = svc.principal()
    ids = [svc.ledger.write(p, memory_write(content=text)).memory_id for text in TEXTS]
    svc.catch_up()
    found = _lexical(svc, QUERY)
    expected = _bm25_here(svc, ids, QUERY)
    assert [c.memory_id for c in found.hits] == sorted(expected, key=lambda m: (-expected[m], m))
    scores = {c.memory_id: c for c in found.hits}
    assert ids[4] not in scores  # it holds no query term
    rows = _scores(svc, QUERY)
    for mid, value in expected.items():
        assert rows[mid] == pytest.approx(value, rel=1e-12)
    assert scores[ids[0]].status == "active" and scores[ids[0]].source_ref is None  # read back from the row


def _scores(svc: Services, query: str) -> dict[str, float]:
    """memory id -> the SQL's score, read from the query's own result rows."""
    captured: dict[str, float] = {}
    params = _params(query, statuses=["active", "needs_confirmation"], returned=["active"], depth=50, seeds=50)
    queries = svc.recall._queries
    sql = queries._lexical_sql("bm25", queries._rules, queries._from, "st.status") + queries._best_rows(
        "SELECT 'hit' AS role, memory_id, status, score FROM scored", svc.recall._facts.facts, "f.memory_id"
    )
    with svc.pool.connection() as conn:
        for _role, mid, score in conn.execute(sql, params).fetchall():
            captured[mid] = score
    return captured


def test_equal_texts_score_the_same_and_are_ordered_by_memory_id(svc: Services) -> None:
    p = svc.principal()
    same = [
        svc.ledger.write(p, memory_write(content="Caroline joined the support group", key=f"group-{n}")).memory_id
        for n in range(4)
    ]
    svc.ledger.write(p, memory_write(content="Melanie painted the lake at sunrise"))
    svc.catch_up()
    scores = _scores(svc, QUERY)
    assert len({scores[m] for m in same}) == 1  # bit-equal, whatever order the rows came in
    hits = [c.memory_id for c in _lexical(svc, QUERY).hits]
    assert hits[:4] == sorted(same)


def _recall(svc: Services, now: datetime, **kw: Any) -> list[tuple[str, float, int, list[str]]]:
    result = svc.recall.recall(svc.principal(), "alice", PURPOSE, QUERY, now, use_cache=False, **kw)
    return [(m.memory_id, m.score, m.tokens, m.matched_by) for i in result.items for m in i.members()]


@pytest.mark.parametrize("kw", [{"k": 10}, {"k": 3, "max_tokens": 20}, {"k": 5, "include_summaries": True}])
def test_items_read_ahead_of_mmr_or_after_it_are_the_same(
    svc: Services, kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    p = svc.principal()
    ids = [svc.ledger.write(p, memory_write(content=text)).memory_id for text in TEXTS]
    svc.ledger.write(  # a summary of two sources, which groups them when summaries are returned
        p,
        memory_write(
            kind="summary",
            content="Caroline and the support group",
            provenance={"writer": "s", "written_at": utc_now(), "derived_from": [ids[0], ids[2]]},
        ),
    )
    svc.catch_up()
    recall = svc.recall
    recall.ranking = RankingConfig(mmr_pool=2)  # MMR's pool is smaller than what is returned
    read_in: list[str] = []
    reading = threading.Event()
    rows, mmr_vectors = recall._rows, recall._mmr_vectors

    def recorded(*args: Any) -> Any:
        read_in.append(threading.current_thread().name)
        reading.set()
        return rows(*args)

    def after_the_read_began(*args: Any) -> Any:  # the worker gets to the read-ahead first
        reading.wait(10.0)
        return mmr_vectors(*args)

    monkeypatch.setattr(recall, "_rows", recorded)
    monkeypatch.setattr(recall, "_mmr_vectors", after_the_read_began)
    now = utc_now()
    ahead = _recall(svc, now, **kw)
    assert ahead, "the query matches memories"
    assert read_in[0].startswith("recall-io")  # read in the worker while MMR ran here
    # the worker busy with another recall: the read-ahead has not started when the items
    # are needed, so it is cancelled and the items are read in the calling thread
    submit = recall._submit

    def not_started(fn: Any, *args: Any) -> Any:
        return Future() if fn == recall._rows else submit(fn, *args)

    monkeypatch.setattr(recall, "_submit", not_started)
    monkeypatch.setattr(recall, "_mmr_vectors", mmr_vectors)
    read_in.clear()
    inline = _recall(svc, now, **kw)
    assert read_in == [threading.current_thread().name]
    assert inline == ahead


def test_the_source_index_is_added_to_an_older_facts_schema_and_the_neighbours_query_uses_it(svc: Services) -> None:
    """A facts table made before the source index gets it when a projection opens it; the
    neighbours of recall's anchors are then read through it, not from every row of the subject."""
    with svc.pool.connection() as conn:
        conn.execute("DROP INDEX facts_v1_source")
    FactsProjection(svc.pool, ContentAccess(svc.pool, svc.keyring))
    with svc.pool.connection() as conn:
        assert conn.execute("SELECT to_regclass('facts_v1_source')").fetchone() == ("facts_v1_source",)
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT memory_id FROM facts_v1 WHERE subject_id = 'alice'"
            " AND provenance->>'source_ref' = ANY(ARRAY['session-1'])"
        ).fetchall()
    assert any("facts_v1_source" in line for (line,) in plan)


def test_the_full_text_query_is_planned_once_per_connection_not_per_call(svc: Services) -> None:
    """Once psycopg prepares it (from its sixth run), PostgreSQL keeps one generic plan
    for recall's full-text query instead of planning it again for each call's values."""
    for text in TEXTS:
        svc.ledger.write(svc.principal(), memory_write(content=text))
    svc.catch_up()
    queries = [QUERY, "Melanie painting", "support group", "a quiet book", "lake sunrise"] * 2
    with svc.pool.connection() as conn:
        for query in queries:
            svc.recall._queries.lexical(conn, _params(query), "bm25", depth=50, seeds=50, summaries=3)
        conn.commit()
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%''hit'' AS role%'"
        ).fetchall()
    assert plans and all(custom == 0 and generic > 0 for generic, custom in plans)
