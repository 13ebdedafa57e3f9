"""``memledger eval scenarios --json`` through Kafka: the log in a Kafka topic, tables in
PostgreSQL, the cache in Redis. Once with the projections run by the command itself over
the topic, once with them run by ``memledger worker`` (faust) processes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest

from tests.e2e.conftest import Cli, wait_until
from workers.bootstrap import Services, build
from workers.settings import Settings

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


_TABLES = ("facts", "facts_history", "facts_conflicts", "summaries")
"""The stable views: version 1 before the replays, version 2 after."""


def _tables(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in _TABLES}


@contextmanager
def _services_of(cli: Cli) -> Iterator[Services]:
    """The services ``memledger recall`` builds from ``cli``'s environment (the distributed
    mode: vectors asked of the vectors worker), built once in this process: one process
    per recall would spend seconds each starting Python and the embedding model."""
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in cli.env.items() if k.startswith("MEMLEDGER_")})
    svc = build(Settings(), own_vectors=False)
    try:
        yield svc
    finally:
        svc.close()
        os.environ.clear()
        os.environ.update(saved)


def _recalls(cli: Cli, data: dict[str, Any]) -> list[Any]:
    """Every recall check of the suite asked again (same subject, query, purpose, scopes,
    ``now``, ``as_of``) against the stores as they are now, as ``memledger recall`` asks."""
    out = []
    with _services_of(cli) as svc:
        for scenario in data["scenarios"]:
            for check in scenario["checks"]:
                result = svc.recall.recall(
                    svc.principal(),
                    scenario["subject_id"],
                    check["purpose"],
                    check["query"],
                    datetime.fromisoformat(check["now"]),
                    scope_keys=tuple(check["scopes"]),
                    include_unconfirmed=check["include_unconfirmed"],
                    as_of=datetime.fromisoformat(check["as_of"]) if check["as_of"] else None,  # what was current then
                ).to_dict()
                assert result["degraded"] == [], result  # full text and vectors both answered
                out.append([(i["memory_id"], i["revision"], i["status"], i["content"]) for i in result["items"]])
    return out


def _serve_vectors(cli: Cli, subject: str) -> None:
    """Start the vectors worker (it owns the local index and answers vector queries for
    the CLI) and wait until recall reaches it."""
    cli.start_worker("--projection", "vectors")
    wait_until(
        lambda: not cli.json("recall", subject, "x", "--purpose", "p")["degraded"],
        what="the vectors worker to answer queries",
        logs=cli.worker_logs,
    )


def test_scenarios_through_kafka_projected_in_process_and_after_replay(kafka_cli: Cli) -> None:
    data = _suite(kafka_cli)
    assert data["scenarios_passed"] == data["scenarios_total"] >= 10
    # every rule holds again after each projection is rebuilt from offset 0 into version 2
    # and swapped in: the same rows, row for row, and the same recall results
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    subject = data["scenarios"][0]["subject_id"]
    kafka_cli.run("replay", "cache", "--json")  # recall below computes afresh, not from cached results
    _serve_vectors(kafka_cli, subject)
    before, recalled = _tables(dsn), _recalls(kafka_cli, data)
    kafka_cli.stop_all()
    assert before["facts"] and before["facts_conflicts"] and before["summaries"]
    print(f"recalls with items: {sum(1 for r in recalled if r)} of {len(recalled)}")
    assert sum(1 for r in recalled if r) >= len(recalled) // 2  # not a comparison of empty lists
    kafka_cli.run("replay", "all", "--json", timeout_s=300)
    serving = {v["id"] for v in kafka_cli.json("versions") if v["state"] == "serving"}
    assert serving == {"facts_v2", "summaries_v2", "vectors_v2", "cache_v3"}  # cache was replayed above too
    assert _tables(dsn) == before  # version 2, rebuilt from offset 0, equals version 1 row for row
    _serve_vectors(kafka_cli, subject)
    after = _recalls(kafka_cli, data)
    changed = [(n, b, a) for n, (b, a) in enumerate(zip(recalled, after, strict=True)) if a != b]
    assert changed == [], "\n".join(f"recall {n}: before {b}\n          after {a}" for n, b, a in changed)


def test_scenarios_through_kafka_projected_by_workers(kafka_cli: Cli) -> None:
    kafka_cli.start_worker()
    data = _suite(kafka_cli, "--workers", "-s", "changed-preference", "-s", "conflicting-documents", "-s", "expired")
    assert [s["name"] for s in data["scenarios"]] == ["expired", "changed-preference", "conflicting-documents"]
