"""The memory-lifecycle scenario suite (``memledger eval scenarios``) against real
services: the event log and every table in the test PostgreSQL server, the cache in the
test Redis, vectors in a local Qdrant engine. Every scenario must pass, with no stale
item returned and no undetected conflict."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.crypto import new_master_key
from workers.bootstrap import Services, build
from workers.scenarios import SCENARIOS, SuiteReport, run_suite
from workers.settings import Settings

pytestmark = [pytest.mark.integration]


@pytest.fixture
def services(tmp_path: Path, fresh_dsn: str, redis_url: str, redis_client: Any) -> Iterator[Services]:
    svc = build(
        Settings(
            data_dir=tmp_path / "d",
            postgres_dsn=fresh_dsn,
            redis_url=redis_url,
            embedder="hashing",
            master_key=new_master_key(),
        )
    )
    try:
        yield svc
    finally:
        svc.close()


def _failures(suite: SuiteReport) -> str:
    return "\n".join(f"{r.name}: {f}" for r in suite.scenarios for f in r.all_failures())


def test_every_scenario_passes(services: Services) -> None:
    suite = run_suite(services)
    failures = _failures(suite)
    assert failures == "", failures
    assert suite.passed
    total = suite.total
    assert total.stale == 0
    assert total.undetected_conflicts == 0
    assert total.out_of_scope == 0
    assert total.duplicates == 0
    assert total.recall == 1.0
    assert total.queries == sum(1 for s in SCENARIOS for step in s.steps if type(step).__name__ == "RecallCheck")
    assert total.tokens_per_query is not None and total.tokens_per_query > 0
    assert "WordPiece" in suite.tokenizer


def test_a_rerun_on_the_same_stores_uses_fresh_subjects(services: Services) -> None:
    chosen = [s for s in SCENARIOS if s.name in ("changed-preference", "restatement")]
    first = run_suite(services, chosen)
    second = run_suite(services, chosen)
    failures = _failures(first) + _failures(second)
    assert failures == "", failures
    assert {r.subject_id for r in first.scenarios}.isdisjoint(r.subject_id for r in second.scenarios)
    data = second.to_dict()
    assert data["scenarios_total"] == 2 and data["total"]["stale"] == 0
    assert all(c["passed"] for s in data["scenarios"] for c in s["checks"])
