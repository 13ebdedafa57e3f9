"""Erasure against the real stores (Postgres, Redis, Qdrant local engine): erasure by
source, the HTML trace, the erasure report, and re-applying tombstones to a restored
store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, utc_now
from ledger.errors import InvalidCommandError
from projections.trace import trace
from tests.builders import PURPOSE, memory_write
from workers.bootstrap import Services, build
from workers.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def svc(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    services = build(
        Settings(
            data_dir=tmp_path / "data",
            postgres_dsn=fresh_dsn,
            redis_url=redis_url,
            vector_engine="client",
            embedder="hashing",
        )
    )
    yield services
    services.close()


def one(svc: Services, sql: str, *params: Any) -> Any:
    with svc.pool.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0] if len(row) == 1 else row


def recall_ids(svc: Services, query: str, subject: str = "alice") -> list[str]:
    result = svc.recall.recall(svc.principal(), subject, PURPOSE, query, utc_now())
    return [i.memory_id for i in result.items]


def provenance(**fields: Any) -> dict[str, Any]:
    return {"writer": "test-agent", "written_at": utc_now(), **fields}


def write(svc: Services, content: str, subject: str = "alice", **prov: Any) -> str:
    mid = svc.ledger.write(svc.principal(), memory_write(subject, content, provenance=provenance(**prov))).memory_id
    assert mid
    return mid


@pytest.mark.parametrize(
    ("source", "field"), [("turn-9", "turn_id"), ("call-4", "tool_call_id"), ("doc:handbook", "source_ref")]
)
def test_erasure_by_source_reaches_every_store_and_cascades_to_derived(svc: Services, source: str, field: str) -> None:
    p = svc.principal()
    gone = write(svc, "Alice's badge number is 90210", **{field: source})
    also = write(svc, "Alice's desk is 4F-17", **{field: source})
    keep = write(svc, "Alice prefers dark mode", turn_id="turn-1")
    bobs = write(svc, "Bob's badge number is 31337", subject="bob", **{field: source})
    summary = svc.ledger.write(
        p,
        memory_write(
            kind="summary",
            content="Alice: badge 90210, dark mode",
            provenance=provenance(derived_from=[gone, keep]),
        ),
    ).memory_id
    svc.catch_up()
    assert gone in recall_ids(svc, "badge number 90210")
    assert svc.cache is not None and svc.cache.entries("alice")

    r = svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref=source, reason="subject asked"))
    svc.catch_up()

    assert r.request_id and set(r.affected) == {gone, also, summary}
    assert r.events[0].request_kind == "source"  # type: ignore[union-attr]
    assert one(svc, "SELECT source_ref FROM erasure_request_sources WHERE request_id = %s", r.request_id) == source
    report = trace(svc.pool, r.request_id, svc.trace_targets())
    assert report.verdict == "complete", report
    assert report.request_kind == "source" and report.source_ref == source
    assert one(svc, "SELECT count(*) FROM facts_v1 WHERE content LIKE '%%90210%%' OR content LIKE '%%4F-17%%'") == 0
    assert one(svc, "SELECT count(*) FROM summaries_v1") == 0
    assert svc.index is not None and svc.index.retrieve([gone, also, summary or ""]) == {}
    assert gone not in recall_ids(svc, "badge number 90210")
    assert keep in recall_ids(svc, "dark mode")
    assert bobs in recall_ids(svc, "badge number", subject="bob")  # another subject's memory of the same source


def test_erasure_by_source_that_names_nothing_is_refused_naming_the_field(svc: Services) -> None:
    p = svc.principal()
    write(svc, "Alice likes tea", turn_id="turn-2")
    with pytest.raises(InvalidCommandError) as info:
        svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref="turn-404", reason="asked"))
    assert info.value.field == "source_ref" and "turn-404" in info.value.rule
    svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref="turn-2", reason="asked"))
    with pytest.raises(InvalidCommandError, match="already erased") as again:
        svc.ledger.erase(p, EraseMemories(subject_id="alice", source_ref="turn-2", reason="asked again"))
    assert again.value.field == "source_ref"
    with svc.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM erasure_requests").fetchone() == (1,)
