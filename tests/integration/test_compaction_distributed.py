"""Nothing left on disk in the distributed mode: after an erasure with its history, a
replay of every projection and a compaction, no file of the test database's own directory on the PostgreSQL server, of
the Redis server's directory or of the event topic's Kafka partitions holds the erased
text or its turn ids. (The server's WAL is shared with every other database on it and
recycled by default: what a client cannot check there, the README says.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from contracts import EraseMemories, utc_now
from projections.compaction import compact
from projections.trace import trace
from tests.builders import memory_write
from tests.e2e.test_compact_cli import files_holding
from tests.integration.conftest import recall_ids
from tests.integration.distributed import distributed_settings
from workers.bootstrap import build
from workers.compaction import compact_targets
from workers.versioning import rebuild

pytestmark = pytest.mark.integration

NEEDLES = (b"quetzalvine", b"marmorkatze", b"turn-erased-4711", b"turn-erased-4712")


def readable(path: Path, what: str) -> Path:
    """``path`` if this machine can read it; else the test cannot look (a failure under CI)."""
    if path.is_dir() and os.access(path, os.R_OK | os.X_OK):
        return path
    message = f"{what} {path} is not readable from this machine: the files cannot be searched"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def kafka_log_dirs(bootstrap: str) -> list[Path]:
    """The log directories of every broker (``log.dirs``, else ``log.dir``)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        brokers = [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]
        wanted = {"log.dirs": None, "log.dir": None}
        resources = [ConfigResource(ConfigResourceType.BROKER, b, configs=wanted) for b in brokers]
        found = admin.describe_configs(resources, config_filter="all")["broker"]
    finally:
        admin.close()
    dirs: list[Path] = []
    for entries in found.values():
        value = (entries.get("log.dirs") or entries.get("log.dir") or {}).get("value") or ""
        dirs += [Path(d) for d in str(value).split(",") if d]
    return dirs


@pytest.mark.parametrize("engine", ["client", "edge"])
def test_after_compact_the_servers_files_of_this_deployment_hold_no_erased_text(
    tmp_path: Path, kafka_bootstrap: str, fresh_dsn: str, redis_url: str, redis_client: Any, engine: str
) -> None:
    settings = distributed_settings(tmp_path, kafka_bootstrap, fresh_dsn, redis_url)
    settings = settings.model_copy(update={"vector_engine": engine})
    svc = build(settings)
    try:
        p = svc.principal()
        ids = []
        for i, word in enumerate(("quetzalvine", "marmorkatze")):
            prov = {"writer": "test-agent", "written_at": utc_now(), "turn_id": f"turn-erased-{4711 + i}"}
            cmd = memory_write(content=f"Alice's passport word is {word}", key="passport", provenance=prov)
            ids.append(svc.ledger.write(p, cmd).memory_id or "")
        svc.catch_up()
        assert recall_ids(svc, "passport word") == [ids[1]]  # the cache holds it too
        r = svc.ledger.erase(
            p, EraseMemories(subject_id="alice", memory_ids=(ids[1],), reason="subject asked", with_history=True)
        )
        assert set(r.affected) == set(ids)
        svc.catch_up()
        with svc.pool.connection() as conn:
            conn.autocommit = True
            conn.execute("CHECKPOINT")  # what the erasure left goes to the table files
            data_dir, oid = conn.execute(
                "SELECT current_setting('data_directory'), oid FROM pg_database WHERE datname = current_database()"
            ).fetchone() or ("", 0)
        database = readable(Path(data_dir) / "base" / str(oid), "the test database's directory")
        assert files_holding(database, NEEDLES), "no residue before compact: the search would prove nothing"

        for name in ("facts", "vectors", "cache", "summaries"):  # version 2 serves; version 1 stays, previous
            rebuild(svc, name)
        svc.close()
        svc = build(settings)  # as `memledger compact` does: a process that opens version 1's index first here
        report = compact(svc.pool, compact_targets(svc, 5.0), "cp-test")
        steps = {(s.store, s.target): s.status for s in report.steps}
        for table in ("ledger_memories", "facts_v1", "facts_v2", "summaries_v1", "summaries_v2"):
            assert steps[("postgres", table)] == "done", table
        assert steps[("vectors", "memories_v1")] == steps[("vectors", "memories_v2")] == "done"

        assert files_holding(database, NEEDLES) == {}
        redis_dir = readable(Path(redis_client.config_get("dir")["dir"]), "the Redis server's directory")  # type: ignore[attr-defined]
        assert files_holding(redis_dir, NEEDLES) == {}
        partitions = [
            p
            for d in kafka_log_dirs(kafka_bootstrap)
            for p in readable(d, "a Kafka log directory").glob(f"{settings.topic}-*")
        ]
        assert len(partitions) == settings.partitions
        for partition in partitions:
            assert files_holding(partition, NEEDLES) == {}, partition  # sealed: never in clear there
        disk = trace(svc.pool, r.request_id or "", svc.trace_targets()).disk
        assert disk is not None
        if report.complete:
            assert disk.status == "applied"
        else:  # a shared server recycles its WAL (wal_recycle = on): the disk row says what is left
            assert disk.status == "reported" and "was partial" in disk.probe, disk
    finally:
        svc.close()
