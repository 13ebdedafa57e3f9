"""The erasure propagation benchmark, small: a few erasures under a light write load on
Kafka with the faust workers (a smoke test of the measure, not of its numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.bench import BenchTargets, bench_environment, bench_erasure

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_bench_erasure_measures_every_erasure_to_a_complete_trace(
    tmp_path: Path, kafka_bootstrap: str, pg_dsn: str, redis_url: str, redis_client: Any
) -> None:
    seen: list[str] = []
    targets = BenchTargets(kafka_bootstrap, pg_dsn, redis_url)
    with bench_environment(targets, tmp_path, "hashing") as env:
        out = bench_erasure(env, rate=20, seconds=3, progress=lambda stage, done, total: seen.append(stage))
    assert out["embedder"] == "hashing"
    assert out["write_events"] == 60 and out["erasures"] == 3
    assert out["not_complete_within_120s"] == 0
    assert 0 < out["erasure_p50_ms"] <= out["erasure_p99_ms"] <= out["erasure_max_ms"]
    assert 0 < out["erasure_absent_p50_ms"] <= out["erasure_absent_p99_ms"] <= out["erasure_max_ms"]
    assert out["write_lag_p50_ms"] is not None and out["write_lag_p50_ms"] <= out["write_lag_p99_ms"]
    assert "erasure: writing" in seen
