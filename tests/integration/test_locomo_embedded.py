"""LoCoMo through the embedded ledger: ingest one real conversation, check every store has
it, and run the recall benchmark on it.

Needs the LoCoMo data file (CC BY-NC 4.0, Maharana et al., ACL 2024), read where it lies:
``MEMLEDGER_LOCOMO_PATH``, default ``../shared/data/locomo/locomo8.json`` from the repository
root. Skipped with the reason when the file is absent. Uses the hashing embedder (no model).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.bootstrap import Services, build
from workers.locomo import (
    AlreadyIngestedError,
    NotIngestedError,
    bench_recall,
    evaluated_questions,
    ingest,
    load_conversations,
)
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.locomo]

REPO = Path(__file__).resolve().parents[2]


def _data_path() -> Path:
    raw = os.environ.get("MEMLEDGER_LOCOMO_PATH")
    path = Path(raw) if raw else REPO.parent / "shared" / "data" / "locomo" / "locomo8.json"
    if not path.is_file():
        pytest.skip(f"LoCoMo data file not found at {path} (set MEMLEDGER_LOCOMO_PATH to locomo8.json)")
    return path


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    svc = build(Settings(data_dir=tmp_path / "d", embedder="hashing"))
    try:
        yield svc
    finally:
        svc.close()


def _count(svc: Services, sql: str, subject_id: str) -> int:
    with svc.pool.connection() as conn:
        row = conn.execute(sql, (subject_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_ingest_one_conversation_and_bench(services: Services) -> None:
    path = _data_path()
    (conv,) = load_conversations(path, limit=1)
    sid = conv.sample_id
    with pytest.raises(NotIngestedError, match=sid):
        bench_recall(services, path, limit=1)

    seen: list[tuple[str, int, int]] = []
    report = ingest(services, path, progress=lambda stage, done, total: seen.append((stage, done, total)), limit=1)

    turns = len(conv.turns)
    observations = len(conv.observations) - report.skipped_observations
    assert report.conversations == 1
    assert report.memories == {"fact": turns, "summary": len(conv.summaries), "inference": observations}
    assert report.events_appended == turns + len(conv.summaries) + observations
    assert report.skipped_summaries == 0
    assert report.catch_up_seconds is not None and report.catch_up_records is not None
    assert ("ingest", 1, 1) in seen

    assert _count(services, "SELECT count(*) FROM ledger_memories WHERE subject_id = %s", sid) == (
        report.events_appended
    )
    assert _count(services, "SELECT count(*) FROM facts_v1 WHERE subject_id = %s AND kind = 'fact'", sid) == turns
    assert (
        _count(
            services,
            "SELECT count(*) FROM facts_v1 WHERE subject_id = %s AND kind = 'inference'"
            " AND status = 'needs_confirmation'",
            sid,
        )
        == observations
    )
    assert _count(services, "SELECT count(*) FROM summaries_v1 WHERE subject_id = %s", sid) == len(conv.summaries)
    with services.pool.connection() as conn:
        row = conn.execute(
            "SELECT content, provenance->>'turn_id', provenance->>'source_ref' FROM facts_v1"
            " WHERE subject_id = %s AND provenance->>'turn_id' = %s",
            (sid, conv.turns[0].dia_id),
        ).fetchone()
    assert row == (conv.turns[0].document, conv.turns[0].dia_id, f"locomo:{sid}:session_{conv.sessions[0].number}")

    with pytest.raises(AlreadyIngestedError, match=sid):
        ingest(services, path, limit=1)

    bench = bench_recall(services, path, limit=1)
    assert bench.questions == len(evaluated_questions(conv))
    assert bench.conversations == 1
    ledger, bm25 = bench.rows
    for scores in bench.rows:
        assert scores.questions == bench.questions
        assert all(0.0 <= v <= 1.0 for v in scores.recall.values())
        assert list(scores.recall) == [1, 5, 10, 25]
        assert scores.recall[1] <= scores.recall[5] <= scores.recall[10] <= scores.recall[25]
    assert bm25.recall[25] > bm25.recall[1]
    assert ledger.recall[25] > 0.0
    assert bench.latency_ms_p50 <= bench.latency_ms_p99
    assert "CC BY-NC 4.0" in bench.render()
    assert bench.to_dict()["rows"][1]["name"].startswith("BM25")
