"""A projection process killed between applying an erasure to its store and committing
its position applies the erasure correctly when it restarts (Kafka, Postgres, Redis and a
local Qdrant index; the crash is a real process exit at the injected point, see
``tests/integration/crash_worker.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from contracts import EraseMemories, utc_now
from projections.trace import trace
from tests.builders import PURPOSE, memory_write
from tests.integration.crash_worker import CRASHED
from tests.integration.distributed import distributed_settings
from workers.bootstrap import Services, build
from workers.settings import Settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``MEMLEDGER_*`` environment that gives a child process the same settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLEDGER_") or k.startswith("MEMLEDGER_TEST_")}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if name == "master_key":
            value = settings.master_key.get_secret_value() if settings.master_key else None
        # complex values (recall_weights) are read back as JSON by pydantic-settings
        env[f"MEMLEDGER_{name.upper()}"] = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return env


def receipt(svc: Services, request_id: str, store: str) -> Any:
    with svc.pool.connection() as conn:
        return conn.execute(
            "SELECT projection, log_partition, log_offset FROM erasure_receipts WHERE request_id = %s AND store = %s",
            (request_id, store),
        ).fetchone()


def position(svc: Services, projection: str, partition: int) -> int:
    with svc.pool.connection() as conn:
        row = conn.execute(
            'SELECT "offset" FROM projection_positions WHERE projection = %s AND partition = %s',
            (f"{projection}_v1", partition),
        ).fetchone()
    return -1 if row is None else int(row[0])


def in_store(svc: Services, projection: str, ids: list[str]) -> int:
    """Items of the erased memories ``projection`` holds."""
    if projection == "vectors":
        assert svc.index is not None
        return len(svc.index.retrieve(ids))
    if projection == "cache":
        assert svc.cache is not None
        return sum(
            1 for key in svc.cache.entries("alice") for item in svc.cache.get(key) or [] if item["memory_id"] in ids
        )
    sql = (
        "SELECT count(*) FROM facts_v1 WHERE memory_id = ANY(%s)"
        if projection == "facts"
        else "SELECT count(*) FROM summaries_v1 WHERE memory_id = ANY(%s) OR derived_from && %s"
    )
    with svc.pool.connection() as conn:
        row = conn.execute(sql, (ids,) if projection == "facts" else (ids, ids)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("projection", ["facts", "summaries", "vectors", "cache"])
def test_worker_killed_after_the_store_write_before_the_position_commit_applies_the_erasure_on_restart(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any, projection: str
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    svc = build(settings)
    try:
        p = svc.principal()
        gone = svc.ledger.write(p, memory_write(content="Alice's door code is 2468")).memory_id
        keep = svc.ledger.write(p, memory_write(content="Alice prefers dark mode", key="theme")).memory_id
        summary = svc.ledger.write(
            p,
            memory_write(
                kind="summary",
                content="Alice: door 2468, dark mode",
                provenance={"writer": "test-agent", "written_at": utc_now(), "derived_from": [gone, keep]},
            ),
        ).memory_id
        assert gone and keep and summary
        svc.catch_up()
        recalled = svc.recall.recall(p, "alice", PURPOSE, "door code 2468", utc_now())
        assert gone in [i.memory_id for i in recalled.items] + [g.memory_id for i in recalled.items for g in i.grouped]
        ids = [gone, summary]
        assert in_store(svc, projection, ids) >= 1
        r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
        assert r.request_id
        erasure_at = r.positions[0]
        before = position(svc, projection, erasure_at.partition)
        assert before < erasure_at.offset
    finally:
        svc.close()  # the local vector index has one owner: the child process opens it next

    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.crash_worker", projection],
        env=settings_env(settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == CRASHED, child.stderr[-3000:]

    svc = build(settings)
    try:
        store = projection
        # the crash left the erasure unrecorded: no receipt, position behind it
        assert receipt(svc, r.request_id, store) is None
        assert position(svc, projection, erasure_at.partition) < erasure_at.offset
        if projection in ("facts", "summaries"):  # one transaction: the rows are back as they were
            assert in_store(svc, projection, ids) >= 1
        else:  # the idempotent store write happened before the crash
            assert in_store(svc, projection, ids) == 0

        # restart: the projection re-reads from its stored position and applies the erasure again
        svc.runner(projection).catch_up(svc.log)
        assert receipt(svc, r.request_id, store) == (f"{projection}_v1", erasure_at.partition, erasure_at.offset)
        assert position(svc, projection, erasure_at.partition) >= erasure_at.offset
        assert in_store(svc, projection, ids) == 0
        if projection == "facts":
            assert receipt(svc, r.request_id, "history") is not None
            with svc.pool.connection() as conn:
                assert conn.execute(
                    "SELECT count(*) FROM facts_history_v1 WHERE memory_id = ANY(%s) AND content_hmac IS NOT NULL",
                    (ids,),
                ).fetchone() == (0,)
        with svc.pool.connection() as conn:  # applied exactly once: one receipt per store
            assert conn.execute(
                "SELECT count(*) FROM erasure_receipts WHERE request_id = %s AND store = %s", (r.request_id, store)
            ).fetchone() == (1,)

        svc.catch_up()  # the other projections
        report = trace(svc.pool, r.request_id, svc.trace_targets())
        assert report.verdict == "complete", report
        assert all(s.probe == "absent" for s in report.stores), report.stores
        kept = svc.recall.recall(svc.principal(), "alice", PURPOSE, "dark mode", utc_now())
        assert keep in [i.memory_id for i in kept.items] + [g.memory_id for i in kept.items for g in i.grouped]
    finally:
        svc.close()


def test_after_the_crash_the_faust_workers_apply_the_erasure_and_trace_completes(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any
) -> None:
    """The same crash (vectors: points deleted, position and receipt not stored), then the
    real restart: ``memledger worker`` (faust, one consumer group per projection)."""
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    svc = build(settings)
    try:
        p = svc.principal()
        gone = svc.ledger.write(p, memory_write(content="Alice's alarm code is 1357")).memory_id
        assert gone
        svc.catch_up()
        r = svc.ledger.erase(p, EraseMemories(subject_id="alice", memory_ids=(gone,), reason="asked"))
        assert r.request_id
    finally:
        svc.close()
    env = settings_env(settings)
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.crash_worker", "vectors"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == CRASHED, child.stderr[-3000:]

    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers", "worker"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    reader = build(settings, own_vectors=False, projections=())  # probes vectors through the worker
    try:
        deadline = time.monotonic() + 180
        report = None
        while time.monotonic() < deadline:
            report = trace(reader.pool, r.request_id, reader.trace_targets())
            if report.verdict == "complete":
                break
            time.sleep(0.5)
        assert report is not None and report.verdict == "complete", (report, log_path.read_text()[-3000:])
        at = r.positions[0]
        assert receipt(reader, r.request_id, "vectors") == ("vectors_v1", at.partition, at.offset)
        assert all(s.probe == "absent" for s in report.stores), report.stores
    finally:
        reader.close()
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
