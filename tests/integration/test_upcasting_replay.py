"""Schema evolution on the real stores (issue 5): events appended through the ledger to
the Postgres event log at this code's versions are read, after the contract evolved
(``MemoryWritten`` two versions further, ``tests.evolution``), through the chained
upcasters into a new projection that equals the one built live; an event newer than
the reader, or one whose chain lacks a step, is dead-lettered with the reason and the
projection goes on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import decode_event, encode_event, evolved
from contracts.upcasting import RawEvent
from ledger.eventlog import read_all
from projections.base import ContentAccess, load_positions
from projections.facts import FactsProjection
from projections.runner import ProjectionRunner
from projections.summaries import SummariesProjection
from tests.builders import memory_write
from tests.evolution import CURRENT, EVOLVED, MODELS_EVOLVED, UPCASTERS_EVOLVED, MemoryWrittenEvolved
from tests.integration.ledger_history import make_history
from workers.bootstrap import Services, build
from workers.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def svc(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    settings = Settings(
        data_dir=tmp_path / "data",
        postgres_dsn=fresh_dsn,
        redis_url=redis_url,
        vector_engine="client",
        embedder="hashing",
    )
    services = build(settings, projections=("facts", "summaries"))
    yield services
    services.close()


def rows(svc: Services, table: str, order: str = "memory_id") -> list[tuple[Any, ...]]:
    """Every row of ``table`` (without the generated ``tsv``), in a stable order."""
    with svc.pool.connection() as conn:
        cols = [
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND column_name <> 'tsv'"
                " ORDER BY ordinal_position",
                (table,),
            )
        ]
        return conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}").fetchall()  # type: ignore[arg-type]


def raw_records(svc: Services) -> list[RawEvent]:
    return [json.loads(r.value) for r in read_all(svc.log)]


def test_current_events_replay_through_the_upcasters_into_a_new_projection_equal_to_the_live_one(svc: Services) -> None:
    make_history(svc)
    svc.catch_up()
    written = [r for r in raw_records(svc) if r["type"] == "MemoryWritten"]
    assert len(written) >= 8 and {r["schema_version"] for r in written} == {CURRENT}
    assert all("producer" in r and "emitted_by" not in r for r in written)
    content = ContentAccess(svc.pool, svc.keyring)
    with evolved(MODELS_EVOLVED, UPCASTERS_EVOLVED):
        decoded = [decode_event(r.value) for r in read_all(svc.log)]
        facts = FactsProjection(svc.pool, content, version=2)
        summaries = SummariesProjection(svc.pool, content, version=2)
        total = sum(svc.log.end_offsets().values())
        assert ProjectionRunner(facts, svc.dlq).catch_up(svc.log) == total
        assert ProjectionRunner(summaries, svc.dlq).catch_up(svc.log) == total
    assert sum(type(e) is MemoryWrittenEvolved and e.schema_version == EVOLVED for e in decoded) == len(written)
    assert svc.dlq.list() == []
    for live, new in [
        ("facts_v1", "facts_v2"),
        ("facts_conflicts_v1", "facts_conflicts_v2"),
        ("summaries_v1", "summaries_v2"),
    ]:
        order = "conflict_id" if "conflicts" in live else "memory_id"
        assert rows(svc, new, order) == rows(svc, live, order), new
        assert rows(svc, live, order), f"{live} is empty: the comparison would prove nothing"
    history = "memory_id, revision"
    assert rows(svc, "facts_history_v2", history) == rows(svc, "facts_history_v1", history)
    with svc.pool.connection() as conn:
        ends = {p: e - 1 for p, e in svc.log.end_offsets().items()}
        assert load_positions(conn, "facts_v2") == load_positions(conn, "facts_v1") == ends


def test_a_newer_version_or_a_missing_step_is_dead_lettered_with_the_reason(svc: Services) -> None:
    p = svc.principal()
    first = svc.ledger.write(p, memory_write(content="Alice uses vim"))
    future: RawEvent = json.loads(encode_event(first.events[0]))
    future |= {"schema_version": EVOLVED + 1, "memory_id": "0190a5a0-0000-7000-8000-00000000f00d", "event_id": "future"}
    [newer_at] = svc.log.append_batch([("alice", json.dumps(future).encode())])
    last = svc.ledger.write(p, memory_write(content="Alice uses tmux"))
    content = ContentAccess(svc.pool, svc.keyring)

    with evolved(MODELS_EVOLVED, UPCASTERS_EVOLVED):
        facts = FactsProjection(svc.pool, content, version=2)
        ProjectionRunner(facts, svc.dlq).catch_up(svc.log)
    assert [r[0] for r in rows(svc, "facts_v2")] == sorted([first.memory_id, last.memory_id])
    [letter] = svc.dlq.list()
    assert (letter.projection, letter.partition, letter.offset) == ("facts_v2", newer_at.partition, newer_at.offset)
    assert letter.reason == (
        f"schema_version: MemoryWritten v{EVOLVED + 1} is newer than this reader's v{EVOLVED}"
        " (deploy a reader that knows it)"
    )

    step = ("MemoryWritten", CURRENT)
    gap = {step: UPCASTERS_EVOLVED[step]}  # the last step is missing
    with evolved(MODELS_EVOLVED, gap):
        facts3 = FactsProjection(svc.pool, content, version=3)
        ProjectionRunner(facts3, svc.dlq).catch_up(svc.log)
    letters = [d for d in svc.dlq.list() if d.projection == "facts_v3"]
    assert [d.offset for d in letters] == [first.positions[0].offset, newer_at.offset, last.positions[0].offset]
    assert letters[0].reason == (
        f"schema_version: no upcaster for MemoryWritten v{EVOLVED - 1} -> v{EVOLVED} (this reader is at v{EVOLVED})"
    )
    assert rows(svc, "facts_v3") == []
    with svc.pool.connection() as conn:  # the projection went on to the end of the log
        assert load_positions(conn, "facts_v3") == {p: e - 1 for p, e in svc.log.end_offsets().items()}
