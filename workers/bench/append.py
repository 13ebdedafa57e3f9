"""Append throughput: events/s through ``Ledger.write_many`` into Kafka, next to a raw
kafka-python producer (same settings: idempotent, ``acks=all``, ``linger_ms=2``) sending
the same event bytes with the same keys, in batches of the same size."""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaProducer

from contracts import encode_event
from ledger.kafka_log import ensure_topics
from workers.bench.env import Progress, services_for
from workers.bench.figures import Figure
from workers.bench.load import command
from workers.bench.targets import target


def bench_append(env: dict[str, str], events: int, batch: int, progress: Progress) -> dict[str, Any]:
    """Append ``events`` commands through the ledger in batches of ``batch``, then send the
    bytes of the events it appended with a raw producer.

    Returns ``{"events", "batch", "bytes", "ledger_events_per_s", "raw_events_per_s",
    "ledger_mb_per_s", "raw_mb_per_s"}`` (MB = 10^6 bytes of record values).
    """
    svc = services_for(env)
    try:
        principal = svc.principal()
        payloads: list[bytes] = []
        started = time.perf_counter()
        for first in range(0, events, batch):
            results = svc.ledger.write_many(principal, [command(n) for n in range(first, min(events, first + batch))])
            payloads += [encode_event(r.events[0]) for r in results]
            progress("append: ledger", len(payloads), events)
        ledger_s = time.perf_counter() - started
    finally:
        svc.close()
    raw_topic = env["MEMLEDGER_TOPIC"] + "-raw"
    ensure_topics(env["MEMLEDGER_KAFKA_BOOTSTRAP"], 6, (raw_topic,))
    producer = KafkaProducer(
        bootstrap_servers=env["MEMLEDGER_KAFKA_BOOTSTRAP"], acks="all", enable_idempotence=True, linger_ms=2
    )
    try:
        started = time.perf_counter()
        for first in range(0, events, batch):
            futures = [
                producer.send(raw_topic, key=f"bench-user-{n % 50}".encode(), value=payloads[n])
                for n in range(first, min(events, first + batch))
            ]
            producer.flush()
            for f in futures:
                f.get(timeout=30)
            progress("append: raw producer", min(events, first + batch), events)
        raw_s = time.perf_counter() - started
    finally:
        producer.close()
    size = sum(len(p) for p in payloads)
    return {
        "events": events,
        "batch": batch,
        "bytes": size,
        "ledger_events_per_s": round(events / ledger_s, 1),
        "raw_events_per_s": round(events / raw_s, 1),
        "ledger_mb_per_s": round(size / ledger_s / 1e6, 2),
        "raw_mb_per_s": round(size / raw_s / 1e6, 2),
    }


def append_figures(out: dict[str, Any]) -> list[Figure]:
    """The append figure of ``bench_append``'s result."""
    size_kb = out["bytes"] / max(1, out["events"]) / 1000
    return [
        Figure(
            "append.ledger",
            f"append through the ledger, {out['events']:,} events of ~{size_kb:.1f} KB, batches of {out['batch']}",
            out["ledger_events_per_s"],
            "events/s",
            baseline=out["raw_events_per_s"],
            baseline_label="raw kafka-python producer",
            target=target("append.ledger"),
        )
    ]
