"""The replay benchmark end to end on Kafka, Postgres and Redis, with a small log: every
stage reads every event the ledger produced (the numbers themselves are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.bench import BenchTargets
from workers.bench.replay import bench_replay, render
from workers.bootstrap import PROJECTION_NAMES

pytestmark = pytest.mark.integration


def test_bench_replay_reads_and_replays_every_produced_event(
    tmp_path: Path, kafka_bootstrap: str, pg_dsn: str, redis_url: str
) -> None:
    stages: set[str] = set()
    out = bench_replay(
        BenchTargets(kafka_bootstrap, pg_dsn, redis_url),
        tmp_path,
        events=600,
        batch=100,
        embedder="hashing",
        progress=lambda stage, done, total: stages.add(stage),
    )
    produced = out["produce"]["events"]
    assert produced >= 600 and produced > out["produce"]["commands"]  # supersessions too
    assert out["raw_read"]["events"] == produced and out["raw_read"]["bytes"] > 0
    assert out["eventlog_read_decode"]["events"] == produced
    assert out["replay_facts"]["events"] == produced and list(out["replay_facts"]["projections"]) == ["facts"]
    assert out["replay_all"]["events"] == produced
    assert list(out["replay_all"]["projections"]) == list(PROJECTION_NAMES)
    assert out["embedder"].startswith("hashing")
    assert out["embedder_alone"]["texts"] > 0
    # the vectors projection replayed again with the same embedder reuses every vector
    assert out["replay_vectors_again"]["events"] == produced and out["replay_vectors_again"]["embedded"] == 0
    assert {"produce via ledger", "raw kafka-python read", "replay facts"} <= stages
    text = render(out)
    assert "(baseline)" in text and "replay facts alone" in text and "summaries" in text
