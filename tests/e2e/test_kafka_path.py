"""The distributed path end to end: CLI write -> Kafka -> faust workers (one consumer
group per projection) -> all four stores -> recall; a worker killed with SIGKILL
mid-stream; an erasure followed by a replay; an erasure while the vectors worker is down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from projections.tombstones import STORES
from tests.e2e.conftest import Cli, Writer, wait_until
from workers.bootstrap import Services

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

PURPOSE = "technical_writing"


def count(dsn: str, sql: str, *params: Any) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(sql, params).fetchone()
    except psycopg.errors.UndefinedTable:
        return -1
    return int(row[0]) if row else 0


def lag_zero(cli: Cli) -> bool:
    data = cli.json("lag")
    return all(p["lag"] == 0 for p in data["projections"]) and sum(data["end_offsets"].values()) > 0


def write(cli: Cli, subject: str, content: str, *extra: str) -> str:
    out = cli.json("write", subject, content, "--purpose", PURPOSE, "--kind", "preference", *extra)
    return str(out["memory_id"])


def test_write_reaches_all_four_stores_and_recall(kafka_cli: Cli) -> None:
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    a = write(kafka_cli, "alice", "Alice prefers answers with Go code samples")
    b = write(kafka_cli, "alice", "Alice deploys on Kubernetes")
    kafka_cli.run(
        "write",
        "alice",
        "Alice: Go samples, Kubernetes",
        "--purpose",
        PURPOSE,
        "--kind",
        "summary",
        "--derived-from",
        a,
        "--derived-from",
        b,
    )
    kafka_cli.start_worker()
    wait_until(lambda: lag_zero(kafka_cli), what="every projection to catch up", logs=kafka_cli.worker_logs)
    assert count(dsn, "SELECT count(*) FROM facts_v1") == 2
    assert count(dsn, "SELECT count(*) FROM summaries_v1") == 1
    result = kafka_cli.json("recall", "alice", "Go code samples", "--purpose", PURPOSE)
    top = result["items"][0]
    # the summary and its recalled sources are one piece of evidence: the sources are grouped under it
    assert top["kind"] == "summary" and top["derived_from"] == [a, b], result
    (first,) = [g for g in top["grouped"] if g["memory_id"] == a]
    assert "vector" in first["matched_by"], result  # answered by the vectors worker
    assert first["provenance"]["writer"] == "cli"
    again = kafka_cli.json("recall", "alice", "Go code samples", "--purpose", PURPOSE)
    assert again["cached"] is True  # the cache store holds the result
    write(kafka_cli, "alice", "Alice moved to Nomad")
    wait_until(
        lambda: not kafka_cli.json("recall", "alice", "Go code samples", "--purpose", PURPOSE)["cached"],
        what="the cache projection to drop alice's entries",
        logs=kafka_cli.worker_logs,
    )


def test_sigkilled_worker_restarts_and_applies_each_event_exactly_once(kafka_cli: Cli, ledger_svc: Services) -> None:
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    write(kafka_cli, "warmup", "first")
    worker = kafka_cli.start_worker()
    wait_until(lambda: lag_zero(kafka_cli), what="the workers to start", logs=kafka_cli.worker_logs)
    total = 120
    with Writer(ledger_svc, limit=total) as writer:  # kill while they are flowing
        wait_until(lambda: count(dsn, "SELECT count(*) FROM facts_v1") >= 10, what="some events applied")
        kafka_cli.kill(worker)  # SIGKILL to the supervisor and every projection process
        writer.finish()
    kafka_cli.start_worker()
    wait_until(lambda: lag_zero(kafka_cli), timeout_s=180, what="catch-up after restart", logs=kafka_cli.worker_logs)
    assert count(dsn, "SELECT count(*) FROM facts_v1") == total + 1
    assert count(dsn, "SELECT count(*) FROM facts_history_v1") == total + 1
    assert count(dsn, "SELECT count(DISTINCT content) FROM facts_v1") == total + 1
    stats = kafka_cli.json("lag")
    assert all(p["lag"] == 0 for p in stats["projections"])


def test_erasure_then_replay_keeps_it_erased(kafka_cli: Cli) -> None:
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    keep = write(kafka_cli, "carol", "Carol likes espresso")
    gone = write(kafka_cli, "carol", "Carol lives at 12 Elm Street")
    worker = kafka_cli.start_worker()
    wait_until(lambda: lag_zero(kafka_cli), what="catch-up", logs=kafka_cli.worker_logs)
    request = kafka_cli.json("erase", "carol", gone, "--reason", "subject request")["request_id"]
    wait_until(
        lambda: kafka_cli.json("trace", request)["verdict"] == "complete",
        what="erasure complete",
        logs=kafka_cli.worker_logs,
    )
    kafka_cli.kill(worker)
    replayed = kafka_cli.json("replay", "facts", "vectors", "cache", "summaries")  # one pass for the four
    assert [r["projection"] for r in replayed] == ["facts", "vectors", "cache", "summaries"]
    assert all(r["events"] >= 3 for r in replayed)
    assert count(dsn, "SELECT count(*) FROM facts_v1 WHERE memory_id = %s OR content LIKE '%%Elm%%'", gone) == 0
    kafka_cli.start_worker()
    # the vectors store answers again once its owning worker is up: pending until then
    wait_until(
        lambda: kafka_cli.json("trace", request)["verdict"] == "complete",
        what="trace complete after replay",
        logs=kafka_cli.worker_logs,
    )
    report = kafka_cli.json("trace", request)
    assert all(s["probe"] == "absent" for s in report["stores"]), report["stores"]
    items = kafka_cli.json("recall", "carol", "Elm Street address", "--purpose", PURPOSE)["items"]
    assert gone not in [i["memory_id"] for i in items]
    assert keep in [
        i["memory_id"] for i in kafka_cli.json("recall", "carol", "espresso", "--purpose", PURPOSE)["items"]
    ]


def test_malformed_event_on_the_topic_goes_to_the_dlq(kafka_cli: Cli) -> None:
    from kafka import KafkaProducer

    write(kafka_cli, "dave", "Dave writes Haskell")  # creates the topics
    producer = KafkaProducer(bootstrap_servers=kafka_cli.env["MEMLEDGER_KAFKA_BOOTSTRAP"])
    producer.send(kafka_cli.env["MEMLEDGER_TOPIC"], key=b"dave", value=b'{"type": "MemoryExploded"}').get(30)
    nested = b"[" * 100_000 + b"]" * 100_000  # deeper than the JSON reader goes
    producer.send(kafka_cli.env["MEMLEDGER_TOPIC"], key=b"dave", value=nested).get(30)
    producer.close()
    after = write(kafka_cli, "dave", "Dave also writes OCaml")
    kafka_cli.start_worker()
    wait_until(lambda: lag_zero(kafka_cli), what="catch-up past the bad record", logs=kafka_cli.worker_logs)
    letters = kafka_cli.json("dlq")["dead_letters"]
    assert {d["projection"] for d in letters} == {"facts_v1", "vectors_v1", "cache_v1", "summaries_v1"}
    assert len(letters) == 8, letters  # two bad records, four projections
    assert all("type" in d["reason"] or "RecursionError" in d["reason"] for d in letters)
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    assert count(dsn, "SELECT count(*) FROM facts_v1 WHERE memory_id = %s", after) == 1


def test_replay_while_the_workers_run_swaps_without_a_gap(kafka_cli: Cli) -> None:
    """Rebuild facts and vectors (another embedder) to version 2 while `memledger worker`
    runs: the supervisor starts the new versions' workers, the swap happens, later writes
    reach the new versions through them, recall keeps its vectors; retire the old ones."""
    dsn = kafka_cli.env["MEMLEDGER_POSTGRES_DSN"]
    first = write(kafka_cli, "dave", "Dave plays the cello")
    kafka_cli.start_worker()
    wait_until(lambda: lag_zero(kafka_cli), what="catch-up", logs=kafka_cli.worker_logs)
    assert kafka_cli.json("replay", "facts")["serving"] == 2
    out = kafka_cli.json("replay", "vectors", "--embedder", "hashing-64")
    assert (out["serving"], out["embedder"]["dim"]) == (2, 64)
    later = write(kafka_cli, "dave", "Dave tunes the cello every morning")
    wait_until(lambda: lag_zero(kafka_cli), what="every version to catch up", logs=kafka_cli.worker_logs)
    for table in ("facts_v1", "facts_v2", "facts"):
        assert count(dsn, f"SELECT count(*) FROM {table} WHERE memory_id = ANY(%s)", [first, later]) == 2
    wait_until(
        lambda: not kafka_cli.json("recall", "dave", "cello", "--purpose", PURPOSE)["degraded"],
        what="the vectors_v2 worker to answer queries",
        logs=kafka_cli.worker_logs,
    )
    items = kafka_cli.json("recall", "dave", "cello morning", "--purpose", PURPOSE)["items"]
    assert later in [i["memory_id"] for i in items] and any("vector" in i["matched_by"] for i in items)
    kafka_cli.json("retire", "facts", "--version", "1")
    kafka_cli.json("retire", "vectors", "--version", "1")
    assert count(dsn, "SELECT count(*) FROM projection_versions WHERE state = 'retired'") == 2
    assert all(r["projection"] not in ("facts_v1", "vectors_v1") for r in kafka_cli.json("lag")["projections"])


def test_every_worker_runs_an_erasure_lane(kafka_cli: Cli) -> None:
    gone = write(kafka_cli, "erin", "Erin's locker code is 4711")
    kafka_cli.start_worker(verbose=True)
    wait_until(lambda: lag_zero(kafka_cli), what="catch-up", logs=kafka_cli.worker_logs)
    request = kafka_cli.json("erase", "erin", gone, "--reason", "subject request")["request_id"]

    def lanes_polled() -> bool:
        logs = "\n".join(
            p.read_text(errors="replace") for p in Path(kafka_cli.env["MEMLEDGER_DATA_DIR"]).glob("worker-*.log")
        )
        # each lane saw the erasure (whether it or the in-order event removed the copies first)
        return all(f"erasure lane ({name}): 1 tombstoned" in logs for name in STORES)

    wait_until(lanes_polled, what="every worker's lane to see the erasure", logs=kafka_cli.worker_logs)
    wait_until(lambda: kafka_cli.json("trace", request)["verdict"] == "complete", what="erasure complete")


def test_erasure_while_the_vectors_worker_is_down_is_pending_then_complete(kafka_cli: Cli) -> None:
    """The vectors worker owns the local Qdrant index and answers vector queries for
    other processes: stopped, nobody can reach the index, so an erasure issued meanwhile
    is applied by the other workers and reported pending (vectors unreachable) until the
    vectors worker runs again and catches up."""
    cli = kafka_cli
    keep = write(cli, "erin", "Erin drinks green tea")
    gone = write(cli, "erin", "Erin's door code is 2468")
    others = cli.start_worker("--projection", "facts", "--projection", "cache", "--projection", "summaries")
    vectors = cli.start_worker("--projection", "vectors")
    wait_until(lambda: lag_zero(cli), what="every projection to catch up", logs=cli.worker_logs)
    wait_until(
        lambda: not cli.json("recall", "erin", "door code", "--purpose", PURPOSE)["degraded"],
        what="the vectors worker to answer queries",
        logs=cli.worker_logs,
    )

    cli.kill(vectors)
    assert others.poll() is None
    assert "vectors" in cli.json("recall", "erin", "green tea", "--purpose", PURPOSE)["degraded"]
    request = cli.json("erase", "erin", gone, "--reason", "subject request")["request_id"]

    def others_applied() -> bool:
        stores = {s["store"]: s for s in cli.json("trace", request)["stores"]}
        return all(s["status"] == "applied" for name, s in stores.items() if name != "vectors")

    wait_until(others_applied, what="facts, cache and summaries to apply the erasure", logs=cli.worker_logs)
    report = cli.json("trace", request)
    stores = {s["store"]: s for s in report["stores"]}
    assert set(stores) == {"facts", "history", "vectors", "cache", "summaries", "log", "dlq"}, stores
    vec = stores["vectors"]
    assert (vec["status"], vec["probe"], vec["applied_at"], vec["probe_found"]) == (
        "pending",
        "unreachable",
        None,
        None,
    ), vec
    assert all(s["probe"] == "absent" for name, s in stores.items() if name != "vectors"), stores
    assert report["verdict"] == "pending"
    assert cli.json("trace", request)["verdict"] == "pending"  # still: nothing applies it while the worker is down

    cli.start_worker("--projection", "vectors")
    wait_until(
        lambda: cli.json("trace", request)["verdict"] == "complete",
        what="the erasure to complete once the vectors worker is back",
        logs=cli.worker_logs,
    )
    report = cli.json("trace", request)
    assert all(s["probe"] == "absent" for s in report["stores"]), report["stores"]
    vec = next(s for s in report["stores"] if s["store"] == "vectors")
    assert vec["status"] == "applied" and vec["applied_at"] is not None and vec["items_removed"] == 1, vec
    assert others.poll() is None
    found = cli.json("recall", "erin", "door code green tea", "--purpose", PURPOSE)
    assert not found["degraded"], found
    ids = [m["memory_id"] for i in found["items"] for m in [i, *i.get("grouped", [])]]
    assert gone not in ids and keep in ids, found
