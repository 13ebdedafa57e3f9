"""The lag and erasure propagation benchmarks, small: a light write load (and a few
erasures) on Kafka with the faust workers (smoke tests of the measures, not of their
numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.bench import BenchTargets, bench_environment
from workers.bench.erasure import bench_erasure
from workers.bench.lag import bench_lag, lag_figures

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


def test_bench_lag_measures_every_projection_with_two_workers_each_and_their_memory(
    tmp_path: Path, kafka_bootstrap: str, pg_dsn: str, redis_url: str, redis_client: Any
) -> None:
    targets = BenchTargets(kafka_bootstrap, pg_dsn, redis_url)
    with bench_environment(targets, tmp_path, "hashing") as env:
        out = bench_lag(env, rate=20, seconds=2, progress=lambda stage, done, total: None, workers_per_projection=2)
    assert out["events"] == 40 and out["not_visible_within_120s"] == 0
    for name in ("facts_cache_summaries", "vectors"):
        assert 0 < out[f"{name}_p50_ms"] <= out[f"{name}_p99_ms"]
    # two supervisors; every projection twice but vectors (a local index has one owner)
    assert set(out["worker_peak_rss_mb"]) == {"supervisor", "facts_v1", "cache_v1", "summaries_v1", "vectors_v1"}
    assert out["processes"] == 9, out["processes_at_peak"]
    assert out["processes_started"] >= 9  # more if a worker restarted under load
    assert out["deployment_peak_rss_mb"] >= sum(out["worker_peak_rss_mb"].values())
    figures = {f.key: f for f in lag_figures(out)}
    assert {k for k in figures if not k.startswith("lag.rss.")} == {
        "lag.facts_cache_summaries.p50.x2",
        "lag.facts_cache_summaries.p99.x2",
        "lag.vectors.hashing.p50.x2",
        "lag.vectors.hashing.p99.x2",
    }
    assert figures["lag.vectors.hashing.p99.x2"].verdict in ("met", "missed")
    assert figures["lag.vectors.hashing.p50.x2"].verdict == "no target"
    assert figures["lag.rss.deployment.x2"].value == out["deployment_peak_rss_mb"]
