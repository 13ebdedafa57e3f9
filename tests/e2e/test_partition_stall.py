"""An erasure the workers cannot read, staged on Kafka: each projection stops on that
partition only, goes on with the others, says where and why in ``lag`` and ``dlq``, and
does not exit (no restart loop), and stops on SIGTERM without waiting for the records it
holds back. That a reader which can read it goes on from there is
shown on the same code in-process (``tests/unit/test_live_worker.py``)."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
from kafka import KafkaProducer

from tests.e2e.conftest import Cli, wait_until
from workers.bench.load import fact
from workers.bootstrap import Services

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_an_unreadable_erasure_stops_its_partition_only_and_lag_and_dlq_say_where(
    kafka_cli: Cli, ledger_svc: Services
) -> None:
    principal = ledger_svc.principal()
    env = kafka_cli.env

    def write(subject: str, n: int) -> tuple[int, int]:
        p = ledger_svc.ledger.write(principal, fact(subject, f"memory {n} of {subject}", f"t-{n}")).positions[0]
        return p.partition, p.offset

    stalled_partition, _ = write("stalled-subject", 0)
    producer = KafkaProducer(bootstrap_servers=env["MEMLEDGER_KAFKA_BOOTSTRAP"])
    newer = {"type": "ErasureRequested", "schema_version": 2, "subject_id": "stalled-subject", "request_id": "r"}
    sent = producer.send(env["MEMLEDGER_TOPIC"], key=b"stalled-subject", value=json.dumps(newer).encode()).get(30)
    producer.close()
    assert sent.partition == stalled_partition
    behind = write("stalled-subject", 1)  # after the erasure in its partition: must wait for it
    others = [write(f"other-{n}", n) for n in range(12)]
    others = [p for p in others if p[0] != stalled_partition]
    assert others, "the other subjects all landed in the stalled partition"

    kafka_cli.start_worker("--projection", "facts", "--projection", "cache")
    logs = kafka_cli.worker_logs

    def lag_rows() -> dict[str, Any]:
        return {r["projection"]: r for r in kafka_cli.json("lag")["projections"]}

    def others_applied_and_stalled() -> bool:
        rows = lag_rows()
        return all(
            rows[p]["stalled"]
            and all(v == 0 for k, v in rows[p]["per_partition"].items() if int(k) != stalled_partition)
            for p in ("facts_v1", "cache_v1")
        )

    wait_until(others_applied_and_stalled, timeout_s=180, what="the other partitions applied, one stalled", logs=logs)
    lag = kafka_cli.json("lag")
    rows = {r["projection"]: r for r in lag["projections"]}
    waiting = lag["end_offsets"][str(stalled_partition)] - sent.offset  # the erasure and what came after it
    for projection in ("facts_v1", "cache_v1"):
        [stall] = rows[projection]["stalled"]
        assert stall["partition"] == stalled_partition and stall["offset"] == sent.offset
        assert "newer than this reader" in stall["reason"]
        assert rows[projection]["per_partition"][str(stalled_partition)] == waiting >= 2
    assert sorted(s["projection"] for s in kafka_cli.json("dlq")["stalled"]) == ["cache_v1", "facts_v1"]
    assert kafka_cli.json("dlq")["dead_letters"] == []  # never dead-lettered
    text = kafka_cli.run("lag").stdout
    assert f"stalled: facts_v1 partition {stalled_partition} offset {sent.offset}" in text
    assert "exited with" not in logs()  # stopped on one partition, not crashing in a loop
    assert behind[1] == sent.offset + 1

    # SIGTERM stops it without waiting for the stalled partition's records, which are
    # never acked (faust waited for them, 'wait_empty: Waiting for tasks', until SIGKILL)
    [worker] = kafka_cli.workers
    kafka_cli.kill(worker, signal.SIGTERM)
    assert "wait_empty" not in logs()
