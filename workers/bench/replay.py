"""Replay benchmark on the real services: how fast projections are rebuilt from a Kafka
topic, next to how fast a plain kafka-python consumer reads the same topic in the same run.

1. ``events`` or more events are produced through ``Ledger.write_many`` (batches of
   ``batch`` commands) into a new topic; one command in five states a value for a key the
   subject already has, so the ledger also appends ``MemorySuperseded`` events;
2. baseline: a group-less kafka-python ``KafkaConsumer`` assigned every partition reads
   the topic from the beginning to its end offsets (events/s, MB/s of record values);
3. the ledger's ``KafkaEventLog.read`` plus ``decode_event`` over the whole topic, with no
   store (what every replay pays before it applies anything);
4. replay of facts alone from offset 0 (``reset``, then the same pass as 5 with one projection);
5. replay of all four projections (facts, vectors, cache, summaries) from offset 0 in
   one pass over the log: each batch read, decoded and opened once, then applied by each
   projection; the time spent decoding, opening and in each projection's apply step, and
   the wall time of the pass (reads included).

Vectors are embedded with the embedder named (``hashing`` by default: the point is the
replay machinery, not MiniLM's ~125 texts/s on 2 cores); the local Qdrant engine
(qdrant-edge) holds them. No worker runs during the replays.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from contracts import MemoryWrite, UnknownEventError, decode_event, utc_now
from ledger.eventlog import EventLog
from projections import versions
from projections.embedding import Embedder
from projections.facts import STABLE
from workers.bench.env import BenchTargets, Progress, bench_environment, services_for
from workers.bench.figures import Figure
from workers.bench.targets import target
from workers.bootstrap import PROJECTION_NAMES, Services
from workers.progress import BatchProgress

READ_BATCH = 500
"""Records per ``EventLog.read`` call in the replays."""


def _command(n: int) -> MemoryWrite:
    subject = f"replay-user-{n % 200}"
    keyed = n % 5 == 0
    return MemoryWrite.model_validate(
        {
            "subject_id": subject,
            "kind": "preference" if keyed else "fact",
            "purpose": "bench",
            "scope": {"type": "subject", "id": subject},
            "key": f"setting-{(n // 200) % 2}" if keyed else None,
            "content": f"Replay memory {n}: the user mentioned project {n % 97} and a deadline in week {n % 52}.",
            "provenance": {"writer": "bench", "written_at": utc_now(), "turn_id": f"r-{n}"},
        }
    )


def produce(svc: Services, events: int, batch: int, progress: Progress) -> dict[str, Any]:
    """Append commands through the ledger until at least ``events`` events are in the log.

    Returns ``{"events", "commands", "seconds", "events_per_s"}``.
    """
    principal = svc.principal()
    appended = commands = 0
    started = time.perf_counter()
    while appended < events:
        results = svc.ledger.write_many(principal, [_command(commands + i) for i in range(batch)])
        commands += batch
        appended += sum(len(r.events) for r in results)
        progress("produce via ledger", min(appended, events), events)
    seconds = time.perf_counter() - started
    return {
        "events": appended,
        "commands": commands,
        "seconds": round(seconds, 2),
        "events_per_s": _rate(appended, seconds),
    }


def _rate(n: int, seconds: float) -> float | None:
    return round(n / seconds, 1) if seconds > 0 else None


def raw_read(bootstrap: str, topic: str, progress: Progress) -> dict[str, Any]:
    """Read ``topic`` from its beginning to its end offsets with a plain, group-less
    kafka-python consumer. Returns ``{"events", "bytes", "seconds", "events_per_s",
    "mb_per_s"}`` (MB = 10^6 bytes of record values)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = {tp: int(o) for tp, o in consumer.end_offsets(tps).items()}
        total = sum(ends.values())
        count = size = 0
        done = {tp for tp, end in ends.items() if end == 0}
        started = time.perf_counter()
        while len(done) < len(tps):
            for tp, messages in consumer.poll(timeout_ms=1000, max_records=5000).items():
                count += len(messages)
                size += sum(len(m.value or b"") for m in messages)
                if messages and messages[-1].offset + 1 >= ends[tp]:
                    done.add(tp)
            progress("raw kafka-python read", count, total)
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return {
        "events": count,
        "bytes": size,
        "seconds": round(seconds, 2),
        "events_per_s": _rate(count, seconds),
        "mb_per_s": round(size / seconds / 1e6, 2) if seconds > 0 else None,
    }


def read_and_decode(log: EventLog, progress: Progress) -> dict[str, Any]:
    """Read the whole log through the ``EventLog`` port and decode every record."""
    total = sum(log.end_offsets().values())
    count = 0
    started = time.perf_counter()
    for partition, end in log.end_offsets().items():
        offset = 0
        while offset < end:
            records = log.read(partition, offset, min(READ_BATCH, end - offset))
            if not records:
                break
            for r in records:
                try:
                    decode_event(r.value)
                except UnknownEventError:
                    pass
            count += len(records)
            offset = records[-1].offset + 1
            progress("EventLog.read + decode", count, total)
    seconds = time.perf_counter() - started
    return {"events": count, "seconds": round(seconds, 2), "events_per_s": _rate(count, seconds)}


def replay(svc: Services, names: tuple[str, ...], progress: Progress) -> dict[str, Any]:
    """Reset the named projections, then replay them from offset 0 in one pass over the
    log (``Services.fan_out``: each batch read, decoded and opened once, then applied by
    each projection).

    Returns ``{"events", "wall_s", "events_per_s", "read_s", "decode_s", "open_s",
    "projections": {name: {"seconds", "events_per_s"}}}``; a projection's seconds are
    the time spent in its apply step, ``read_s`` the time spent reading the log,
    ``decode_s`` and ``open_s`` the shared decode and content opening.
    """
    for name in names:
        svc.projections[name].reset()
    fan = svc.fan_out([svc.projections[name] for name in names])
    step = BatchProgress(progress, f"replay {'+'.join(names)}", sum(svc.log.end_offsets().values()))
    started = time.perf_counter()
    fan.catch_up(svc.log, READ_BATCH, progress=step)
    wall = time.perf_counter() - started
    times = fan.times
    by_name = {name: times.apply_s[svc.projections[name].id] for name in names}
    inside = times.decode_s + times.open_s + sum(by_name.values())
    return {
        "events": step.done,
        "wall_s": round(wall, 2),
        "events_per_s": _rate(step.done, wall),
        "read_s": round(max(0.0, wall - inside), 2),
        "decode_s": round(times.decode_s, 2),
        "open_s": round(times.open_s, 2),
        "projections": {n: {"seconds": round(s, 2), "events_per_s": _rate(step.done, s)} for n, s in by_name.items()},
    }


def replay_vectors_again(svc: Services, progress: Progress) -> dict[str, Any]:
    """Replay vectors alone into a new version (2) with the serving version's embedder,
    from offset 0: its writes take the vectors of version 1 (same model, same
    fingerprint) instead of embedding again. Returns ``{"events", "wall_s",
    "events_per_s", "embedded"}`` (``embedded``: texts the embedder was given)."""
    serving = svc.stores.serving()["vectors"]
    with svc.pool.connection() as conn:
        info = versions.begin_build(conn, "vectors", None, serving.embedder)
    embedder = svc.stores.embedder(info.embedder.name if info.embedder else svc.settings.embedder)
    counted = _Counting(embedder)
    svc.stores.add_embedder(info.embedder.name if info.embedder else svc.settings.embedder, counted)
    fan = svc.fan_out([svc.stores.projection(info)])
    step = BatchProgress(progress, "replay vectors again (same embedder)", sum(svc.log.end_offsets().values()))
    started = time.perf_counter()
    fan.catch_up(svc.log, READ_BATCH, progress=step)
    wall = time.perf_counter() - started
    done = step.done
    return {"events": done, "wall_s": round(wall, 2), "events_per_s": _rate(done, wall), "embedded": counted.count}


class _Counting:
    """An embedder that counts the texts it is given (and embeds them with ``inner``)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.model_name, self.dim, self.count = inner, inner.model_name, inner.dim, 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.count += len(texts)
        return self.inner.embed(texts)


def embedder_alone(svc: Services, progress: Progress) -> dict[str, Any]:
    """The serving vectors embedder alone on the texts the replay embedded (the stored
    facts' texts), in one call: ``{"texts", "seconds", "texts_per_s"}``."""
    with svc.pool.connection() as conn:
        texts = [str(r[0]) for r in conn.execute(f"SELECT content FROM {STABLE.facts} WHERE content IS NOT NULL")]
    progress("embedder alone", 0, len(texts))
    started = time.perf_counter()
    svc.embedder.embed(texts)
    seconds = time.perf_counter() - started
    progress("embedder alone", len(texts), len(texts))
    return {"texts": len(texts), "seconds": round(seconds, 2), "texts_per_s": _rate(len(texts), seconds)}


def bench_replay(
    targets: BenchTargets, data_dir: Path, events: int, batch: int, embedder: str, progress: Progress
) -> dict[str, Any]:
    """The whole replay benchmark in a fresh database and topic (dropped afterwards).

    Raises:
        EventLogError, psycopg.Error, VectorIndexError: a service failed.
    """
    with bench_environment(targets, data_dir, embedder) as env:
        svc = services_for(env, own_vectors=True)
        try:
            out: dict[str, Any] = {"embedder": svc.embedder.model_name, "partitions": svc.log.partitions}
            out["produce"] = produce(svc, events, batch, progress)
            out["raw_read"] = raw_read(env["MEMLEDGER_KAFKA_BOOTSTRAP"], env["MEMLEDGER_TOPIC"], progress)
            out["eventlog_read_decode"] = read_and_decode(svc.log, progress)
            out["replay_facts"] = replay(svc, ("facts",), progress)
            out["replay_all"] = replay(svc, PROJECTION_NAMES, progress)
            out["embedder_alone"] = embedder_alone(svc, progress)
            out["replay_vectors_again"] = replay_vectors_again(svc, progress)
        finally:
            svc.close()
    return out


def render(out: dict[str, Any]) -> str:
    """The numbers as text, each replay next to the raw read baseline of the same run."""
    raw, prod = out["raw_read"], out["produce"]
    facts, both = out["replay_facts"], out["replay_all"]
    lines = [
        f"replay ({prod['events']} events from {prod['commands']} commands on {out['partitions']} partitions,"
        f" {raw['bytes']} bytes; embedder {out['embedder']}):",
        f"  produce via ledger            {prod['events_per_s']:>10} events/s",
        f"  raw kafka-python read         {raw['events_per_s']:>10} events/s  {raw['mb_per_s']} MB/s  (baseline)",
        f"  EventLog.read + decode        {out['eventlog_read_decode']['events_per_s']:>10} events/s",
        f"  replay facts alone            {facts['events_per_s']:>10} events/s  ({facts['wall_s']} s)",
        f"  replay all four, one pass     {both['events_per_s']:>10} events/s  ({both['wall_s']} s wall,"
        f" {both['read_s']} s reading, {both['decode_s']} s decoding, {both['open_s']} s opening)",
    ]
    for name, p in both["projections"].items():
        lines.append(f"    {name:<27} {p['events_per_s']:>10} events/s  ({p['seconds']} s in its apply step)")
    alone, again = out["embedder_alone"], out["replay_vectors_again"]
    lines += [
        f"  embedder alone, same texts    {alone['texts_per_s']:>10} texts/s   ({alone['texts']} texts)",
        f"  vectors again, same embedder  {again['events_per_s']:>10} events/s  ({again['embedded']} texts embedded)",
    ]
    return "\n".join(lines)


def replay_figures(out: dict[str, Any]) -> list[Figure]:
    """The replay figures of ``bench_replay``'s result, each next to its baseline: the
    raw read, or for the vectors projection's own figures the embedder alone and the
    vectors replay that embedded."""
    raw = out["raw_read"]["events_per_s"]
    events = out["produce"]["events"]
    vectors_s = out["replay_all"]["projections"]["vectors"]["seconds"]
    texts = out["embedder_alone"]["texts"]
    vectors = [
        Figure(
            "replay.vectors.embedder",
            f"vectors in the four-projection pass, {texts:,} texts embedded",
            round(texts / vectors_s, 1) if vectors_s else None,
            "texts/s",
            baseline=out["embedder_alone"]["texts_per_s"],
            baseline_label=f"{out['embedder']} alone on the same texts",
        ),
        Figure(
            "replay.vectors.reuse",
            f"vectors again into a new version, same embedder ({out['replay_vectors_again']['embedded']} embedded)",
            out["replay_vectors_again"]["events_per_s"],
            "events/s",
            baseline=round(events / vectors_s, 1) if vectors_s else None,
            baseline_label="vectors embedding every text, in the pass",
        ),
    ]
    main = [
        Figure(
            "replay.facts",
            f"replay facts alone, {events:,} events",
            out["replay_facts"]["events_per_s"],
            "events/s",
            baseline=raw,
            baseline_label="raw kafka-python read",
            target=target("replay.facts"),
        ),
        Figure(
            "replay.all",
            f"replay all four in one pass ({out['embedder']}), {events:,} events",
            out["replay_all"]["events_per_s"],
            "events/s",
            baseline=raw,
            baseline_label="raw kafka-python read",
            target=target("replay.all"),
        ),
    ]
    return [*main, *vectors]
