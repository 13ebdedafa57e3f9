"""The memory-lifecycle scenario suite (``memledger eval scenarios``) against real
services: the event log and every table in the test PostgreSQL server, the cache in the
test Redis, vectors in a local Qdrant engine. Every scenario must pass, with no stale
item returned and no undetected conflict."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ledger.crypto import new_master_key
from workers.bootstrap import Services, build
from workers.scenarios import SCENARIOS, SuiteReport, run_suite
from workers.settings import Settings
from workers.versioning import rebuild

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


def _asked_again(svc: Services, suite: SuiteReport) -> list[list[tuple[str, int, str, str]]]:
    """Every recall check of ``suite`` that asked about a past instant, asked again now."""
    out = []
    for scenario in suite.scenarios:
        for check in scenario.checks:
            if check.as_of is None:
                continue
            result = svc.recall.recall(
                svc.principal(),
                scenario.subject_id,
                check.purpose,
                check.query,
                datetime.fromisoformat(check.now),
                scope_keys=tuple(check.scopes),
                include_unconfirmed=check.include_unconfirmed,
                as_of=datetime.fromisoformat(check.as_of),
            )
            out.append([(i.memory_id, i.revision, i.status, i.content) for i in result.items])
    return out


def test_recall_as_of_a_past_instant_is_the_same_after_every_projection_is_replayed(services: Services) -> None:
    chosen = [s for s in SCENARIOS if s.name.startswith("as-of-")]
    suite = run_suite(services, chosen)
    assert _failures(suite) == "", _failures(suite)
    before = _asked_again(services, suite)
    assert len(before) >= 4 and sum(1 for items in before if items) >= 3  # not a comparison of empty lists
    for name in ("facts", "summaries", "vectors", "cache"):
        rebuild(services, name)
    serving = {n: v.version for n, v in services.stores.serving().items()}
    assert serving == {"facts": 2, "summaries": 2, "vectors": 2, "cache": 2}
    assert _asked_again(services, suite) == before  # the history and the rows, rebuilt from the log, agree
