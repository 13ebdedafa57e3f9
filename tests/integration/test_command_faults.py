"""Faults at every step of every command (write, supersede, redact, revoke-consent,
erase) in the distributed mode, on the real Kafka and PostgreSQL: the connection
terminated (``pg_terminate_backend``), the process killed with SIGKILL, and the broker
refusing the records. After recovery the log, the ledger's heads, the keys and every
store agree (``command_faults.assert_agree``); a command that failed before its commit
left nothing anywhere, one that committed is in the log, and a duplicate a crash leaves
in the log changes no store.

One database and one set of topics serve the whole module; every case has a subject of
its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from psycopg import sql

from ledger import topics
from ledger.errors import AcknowledgementLostError, EventLogError, NotWrittenError
from projections.trace import NOT_IN_LOG_YET, render_text, trace
from tests.integration import command_faults as cf
from tests.integration.distributed import distributed_settings
from tests.integration.test_erasure_crash import settings_env
from tests.integration.test_metrics_state import scrape
from workers.bootstrap import Services, build
from workers.gateway.positions import lag
from workers.settings import Settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def module_dsn(pg_dsn: str) -> Iterator[str]:
    name = f"t_faults_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def settings(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, module_dsn: str, redis_url: str
) -> Settings:
    return distributed_settings(tmp_path_factory.mktemp("faults"), kafka_bootstrap, module_dsn, redis_url)


@pytest.fixture
def svc(settings: Settings, redis_client: Any) -> Iterator[Services]:
    services = build(settings)
    services.ledger._sink.relay.close()  # type: ignore[attr-defined]  # no background passes: the test drains
    yield services
    services.close()


def subject_for(command: str, fault: str, step: str) -> str:
    return f"s-{command}-{fault}-{step}-{uuid.uuid4().hex[:6]}"


def terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.parametrize("step", ["decided", "staged"])
@pytest.mark.parametrize("command", cf.COMMANDS)
def test_a_connection_terminated_before_the_commit_writes_nothing_anywhere(
    svc: Services, module_dsn: str, command: str, step: str
) -> None:
    subject = subject_for(command, "terminate", step)
    prepared = cf.prepare(svc, command, subject)
    before = cf.assert_agree(svc, subject)
    heads = cf.ledger_state(svc, subject)

    def fault(cmd: str, at: str, conn: Any) -> None:
        if at == step:
            terminate(module_dsn, conn.info.backend_pid)

    svc.ledger._fault = fault  # type: ignore[method-assign]
    with pytest.raises(NotWrittenError) as raised:
        cf.run(svc, command, subject, prepared)
    assert "not written" in str(raised.value)
    svc.ledger._fault = lambda *a: None  # type: ignore[method-assign]
    assert cf.assert_agree(svc, subject) == before  # nothing new in the log
    assert cf.ledger_state(svc, subject) == heads
    # nothing was recorded, so running it again is safe and does it once
    result = cf.run(svc, command, subject, prepared)
    after = cf.assert_agree(svc, subject)
    assert all(after[e.event_id] == 1 for e in result.events)


@pytest.mark.parametrize("step", ["committed", "sent"])
@pytest.mark.parametrize("command", cf.COMMANDS)
def test_a_connection_terminated_after_the_commit_loses_nothing_and_applies_nothing_twice(
    svc: Services, module_dsn: str, command: str, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    subject = subject_for(command, "terminate", step)
    prepared = cf.prepare(svc, command, subject)
    cf.assert_agree(svc, subject)
    pids: list[int] = []

    def fault(cmd: str, at: str, conn: Any) -> None:
        if at == "committed":
            pids.append(conn.info.backend_pid)
            if step == "committed":
                terminate(module_dsn, conn.info.backend_pid)

    send = svc.log.append_batch

    def sent_then_terminate(items: Any) -> Any:
        positions = send(items)
        if step == "sent" and pids:
            terminate(module_dsn, pids.pop())  # the publisher's connection, before it deletes the rows
        return positions

    svc.ledger._fault = fault  # type: ignore[method-assign]
    monkeypatch.setattr(svc.log, "append_batch", sent_then_terminate)
    result = cf.run(svc, command, subject, prepared)  # committed: published on a new connection
    assert len(result.positions) == len(result.events)
    counts = cf.assert_agree(svc, subject)
    assert all(counts[e.event_id] >= 1 for e in result.events)  # acknowledged: in the log
    if step == "committed":
        assert all(counts[e.event_id] == 1 for e in result.events)
    if command == "erase":
        assert result.request_id is not None
        assert trace(svc.pool, result.request_id, svc.trace_targets()).verdict == "complete"


@pytest.mark.parametrize("step", ["staged", "committed", "sent"])
@pytest.mark.parametrize("command", cf.COMMANDS)
def test_a_process_killed_at_any_step_leaves_all_or_nothing_once_a_ledger_starts_again(
    settings: Settings, redis_client: Any, command: str, step: str
) -> None:
    subject = subject_for(command, "kill", step)
    svc = build(settings)
    try:
        prepared = cf.prepare(svc, command, subject)
        before = cf.assert_agree(svc, subject)
        heads = cf.ledger_state(svc, subject)
    finally:
        svc.close()  # the local vector index has one owner: the child opens it next
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.command_faults", command, step, subject, json.dumps(prepared)],
        env=settings_env(settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -9, child.stderr[-3000:]
    svc = build(settings)  # a new ledger process: its relay publishes what the crash left
    try:
        counts = cf.assert_agree(svc, subject)
        new = set(counts) - set(before)
        if step == "staged":
            assert not new and cf.ledger_state(svc, subject) == heads
        else:
            assert new, "the committed command's events are in the log"
            assert cf.ledger_state(svc, subject) != heads
            if step == "committed":
                assert all(counts[e] == 1 for e in new)
    finally:
        svc.close()


def _topic_config(bootstrap: str, topic: str, value: str) -> None:
    """Set the topic's ``max.message.bytes`` (incrementally: its other settings stay) and
    wait until the broker describes the topic with it: the controller takes the change at
    once, the broker applies it from its next metadata update (a record sent in between
    was still accepted under the old limit)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        configs = {"max.message.bytes": value}
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], incremental=True)
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    while (topics.describe(bootstrap, [topic])[topic].configs or {}).get("max.message.bytes") != value:
        assert time.monotonic() < deadline, f"the broker never described {topic} with max.message.bytes={value}"
        time.sleep(0.1)


@pytest.mark.parametrize("command", cf.COMMANDS)
def test_a_broker_that_refuses_the_records_gets_them_once_it_accepts_them(
    svc: Services, settings: Settings, command: str
) -> None:
    subject = subject_for(command, "refuse", "send")
    prepared = cf.prepare(svc, command, subject)
    cf.assert_agree(svc, subject)
    assert settings.kafka_bootstrap is not None
    topic = settings.tombstone_topic if command == "erase" else settings.topic
    _topic_config(settings.kafka_bootstrap, topic, "64")  # every record is larger: refused
    try:
        with pytest.raises(AcknowledgementLostError) as raised:
            cf.run(svc, command, subject, prepared)
        assert "written, acknowledgement lost" in str(raised.value)
        lost = raised.value.event_ids
        assert lost
        with svc.pool.connection() as conn:
            waiting = conn.execute("SELECT count(*) FROM ledger_outbox WHERE subject_id = %s", (subject,)).fetchone()
        assert waiting is not None and waiting[0] >= len(lost)
        backlog = lag(svc)["outbox"]  # the operator sees what waits, and for how long
        assert backlog["records"] >= len(lost) and backlog["subjects"] >= 1 and backlog["oldest_age_s"] >= 0
        samples = scrape(svc)
        assert samples[("memledger_outbox_records", ())] >= len(lost)
        assert samples[("memledger_outbox_subjects", ())] >= 1
        if command in ("write", "erase"):  # lag and dlq run though the events or tombstone topic is wrong
            for shows in ("lag", "dlq"):
                shown = subprocess.run(
                    [sys.executable, "-m", "workers", shows, "--json"],
                    env=settings_env(settings),
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert shown.returncode == 0, (shows, shown.stderr)
                assert f"topic {topic}: max.message.bytes: must be at least" in shown.stderr, shows
                if shows == "lag":
                    assert json.loads(shown.stdout)["outbox"]["records"] >= len(lost)
        if command == "erase":  # the trace says where the request is, not "partition None"
            assert raised.value.request_id is not None
            waiting_trace = trace(svc.pool, raised.value.request_id, svc.trace_targets())
            assert waiting_trace.verdict == "pending"
            assert f"log position: {NOT_IN_LOG_YET}" in render_text(waiting_trace)
    finally:
        _topic_config(settings.kafka_bootstrap, topic, "1048588")  # the broker's default
    deadline = time.monotonic() + 30
    while True:  # the broker applies the restored setting a moment later
        try:
            svc.ledger.relay_pending()  # the relay publishes them now
            break
        except EventLogError:
            assert time.monotonic() < deadline, "the broker kept refusing after the setting was restored"
            time.sleep(0.5)
    counts = cf.assert_agree(svc, subject)
    assert all(counts[e] == 1 for e in lost)
    assert lag(svc)["outbox"]["records"] == 0 and scrape(svc)[("memledger_outbox_oldest_seconds", ())] == 0.0
    if command == "erase":
        assert raised.value.request_id is not None
        assert trace(svc.pool, raised.value.request_id, svc.trace_targets()).verdict == "complete"


def test_the_errors_and_the_log_say_which_outcome(
    svc: Services, module_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    subject = subject_for("write", "log", "staged")

    def fault(cmd: str, at: str, conn: Any) -> None:
        if at == "staged":
            terminate(module_dsn, conn.info.backend_pid)

    svc.ledger._fault = fault  # type: ignore[method-assign]
    with caplog.at_level("WARNING", logger="ledger.service"), pytest.raises(NotWrittenError):
        cf.run(svc, "write", subject, [])
    assert any("write: not written" in r.getMessage() for r in caplog.records)
