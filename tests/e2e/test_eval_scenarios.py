"""``memledger eval scenarios --json`` through Kafka: the log in a Kafka topic, tables in
PostgreSQL, the cache in Redis. Once with the projections run by the command itself over
the topic, once with them run by ``memledger worker`` (faust) processes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import Cli

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _suite(cli: Cli, *args: str) -> dict[str, Any]:
    proc = cli.run("eval", "scenarios", "--json", *args, check=False, timeout_s=600)
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None
    failures = [f"{s['name']}: {f}" for s in data["scenarios"] for f in s["failures"]]
    assert proc.returncode == (0 if data["passed"] else 1), proc.stderr
    assert data["passed"], "\n".join(failures)
    assert data["mode"] == "distributed"
    assert data["total"]["stale"] == 0
    assert data["total"]["undetected_conflicts"] == 0
    assert data["total"]["tokens_per_query"] > 0
    assert "WordPiece" in data["tokenizer"]
    degraded = [(s["name"], c["what"], c["degraded"]) for s in data["scenarios"] for c in s["checks"] if c["degraded"]]
    assert degraded == []  # every recall used full text and vectors
    return data


def test_scenarios_through_kafka_projected_in_process(kafka_cli: Cli) -> None:
    data = _suite(kafka_cli)
    assert data["scenarios_passed"] == data["scenarios_total"] >= 10


def test_scenarios_through_kafka_projected_by_workers(kafka_cli: Cli) -> None:
    kafka_cli.start_worker()
    data = _suite(kafka_cli, "--workers", "-s", "changed-preference", "-s", "conflicting-documents", "-s", "expired")
    assert [s["name"] for s in data["scenarios"]] == ["expired", "changed-preference", "conflicting-documents"]
