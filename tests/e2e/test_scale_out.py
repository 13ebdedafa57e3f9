"""Scale-out of one projection on Kafka: several workers share its partitions through
joins and a worker killed under load, each event applied exactly once; a worker killed
with SIGKILL takes its old place in its consumer group when its supervisor restarts it
(static membership), with no wait for the dead member's session to expire."""

from __future__ import annotations

import signal

import psutil
import psycopg
import pytest

from tests.e2e.conftest import Cli, Writer, wait_until
from workers.bench.load import command
from workers.bootstrap import Services
from workers.live.membership import Member, members

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

PARTITIONS = 3


def _group(cli: Cli) -> tuple[str, list[Member]]:
    env = cli.env
    return members(
        env["MEMLEDGER_KAFKA_BOOTSTRAP"], f"{env['MEMLEDGER_CONSUMER_GROUP_PREFIX']}.facts_v1", env["MEMLEDGER_TOPIC"]
    )


def _shared_by(cli: Cli, n: int) -> bool:
    """The facts group is stable with ``n`` members whose partitions are disjoint and cover the topic."""
    state, group = _group(cli)
    owned = [p for m in group for p in m.partitions]
    return state == "Stable" and len(group) == n and sorted(owned) == list(range(PARTITIONS))


def _applied(svc: Services) -> int:
    """Records of the log the facts projection has applied."""
    ends = svc.log.end_offsets()
    done = svc.stores.projection(svc.stores.serving()["facts"]).positions()
    return sum(min(end, done.get(p, -1) + 1) for p, end in ends.items())


def _count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def test_three_workers_share_the_partitions_and_a_kill_under_load_applies_each_event_once(
    kafka_cli: Cli, ledger_svc: Services
) -> None:
    kafka_cli.env["MEMLEDGER_CONSUMER_SESSION_TIMEOUT_S"] = "6"  # the killed worker's partitions move on sooner
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    ledger_svc.ledger.write(ledger_svc.principal(), command(-1))  # the topic exists before the workers start
    first = kafka_cli.start_worker("--projection", "facts")
    logs = kafka_cli.worker_logs
    wait_until(lambda: _shared_by(kafka_cli, 1), timeout_s=180, what="one worker owning every partition", logs=logs)
    with Writer(ledger_svc, limit=5000, interval_s=0.2) as writer:  # bounded; stopped after the kill
        kafka_cli.start_worker("--projection", "facts")
        wait_until(lambda: _shared_by(kafka_cli, 2), timeout_s=180, what="two workers sharing them", logs=logs)
        kafka_cli.start_worker("--projection", "facts")
        wait_until(lambda: _shared_by(kafka_cli, 3), timeout_s=180, what="three workers, one each", logs=logs)
        before_kill = writer.written
        kafka_cli.kill(first)  # SIGKILL to its supervisor too: it does not come back
        wait_until(lambda: writer.written >= before_kill + 20, timeout_s=120, what="writes after the kill")
    wait_until(lambda: _shared_by(kafka_cli, 2), timeout_s=120, what="the two others taking its partition", logs=logs)
    total = sum(ledger_svc.log.end_offsets().values())
    wait_until(lambda: _applied(ledger_svc) == total, timeout_s=180, what="every event applied", logs=logs)

    memories = writer.written + 1
    assert _count(dsn, "SELECT count(*) FROM facts_v1") == memories
    assert _count(dsn, "SELECT count(DISTINCT memory_id) FROM facts_history_v1") == memories
    assert _count(dsn, "SELECT count(*) FROM facts_history_v1") == memories  # one MemoryWritten each, applied once
    verified = kafka_cli.run("verify", "facts", check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_sigkilled_worker_restarted_by_its_supervisor_takes_its_old_place_in_the_group(
    kafka_cli: Cli, ledger_svc: Services
) -> None:
    # long enough that a dead dynamic member would still be listed, and its partitions held, while the test runs
    kafka_cli.env["MEMLEDGER_CONSUMER_SESSION_TIMEOUT_S"] = "120"
    ledger_svc.ledger.write(ledger_svc.principal(), command(-1))
    supervisor = kafka_cli.start_worker("--projection", "facts")
    logs = kafka_cli.worker_logs
    wait_until(lambda: _shared_by(kafka_cli, 1), timeout_s=180, what="the worker owning every partition", logs=logs)
    [before] = _group(kafka_cli)[1]
    assert before.instance_id is not None and before.instance_id.endswith("facts_v1#0")
    [child] = psutil.Process(supervisor.pid).children()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)

    def replaced() -> bool:
        state, group = _group(kafka_cli)
        return state == "Stable" and len(group) == 1 and group[0].member_id != before.member_id

    wait_until(replaced, timeout_s=90, what="the restarted worker in the group", logs=logs)
    [after] = _group(kafka_cli)[1]
    assert after.instance_id == before.instance_id and after.partitions == before.partitions
    for n in range(5):  # consumed by the restarted member, not by its start-up catch-up
        ledger_svc.ledger.write(ledger_svc.principal(), command(n))
    total = sum(ledger_svc.log.end_offsets().values())
    wait_until(lambda: _applied(ledger_svc) == total, timeout_s=90, what="the new writes applied", logs=logs)
    assert "restarting in 0.2s" in logs()
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    assert _count(dsn, "SELECT count(*) FROM facts_history_v1") == 6
