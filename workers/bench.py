"""Benchmarks on the real services (Kafka, PostgreSQL, Redis), each number printed next
to the baseline measured in the same run:

- append: events/s through ``Ledger.write_many`` into Kafka, next to a raw kafka-python
  producer (same settings: idempotent, ``acks=all``) sending the same event bytes;
- lag: end-to-end projection lag at a steady write rate, from the command's
  acknowledgement to the moment both the facts and vectors projections have applied it
  (their stored positions cover its offset; sampled every 5 ms);
- erasure: erasure propagation latency p50/p99 under the same steady write load, from
  the erasure's acknowledgement to the moment ``trace`` finds it complete (every store
  has its receipt and every live probe by memory id finds nothing), next to the write
  load's own projection lag measured in the same run;
- recall: LoCoMo ingested through Kafka by the faust workers, then evidence-turn
  recall@k and recall latency p50/p99 next to BM25 (``workers.locomo.bench_recall``).

Every run uses a new database and new topics, so runs do not disturb each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
from kafka import KafkaProducer
from psycopg import sql

from contracts import EraseMemories, MemoryWrite, encode_event, utc_now
from ledger.crypto import new_master_key
from ledger.kafka_log import ensure_topics
from projections.trace import trace
from workers.bootstrap import Services, build
from workers.settings import Settings

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class BenchTargets:
    """Where the services are: Kafka bootstrap, an admin DSN (used to create the
    run's database) and a Redis URL."""

    kafka: str
    postgres_dsn: str
    redis_url: str

    @classmethod
    def from_env(cls) -> BenchTargets:
        """From ``MEMLEDGER_TEST_*`` (as ``deploy/services.sh env`` prints them).

        Raises:
            ValueError: a variable is missing, naming it.
        """
        names = ("MEMLEDGER_TEST_KAFKA_BOOTSTRAP", "MEMLEDGER_TEST_POSTGRES_DSN", "MEMLEDGER_TEST_REDIS_URL")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise ValueError(
                f'{", ".join(missing)}: not set; run `make services-up` and eval "$(bash deploy/services.sh env)"'
            )
        return cls(*(os.environ[n] for n in names))


@contextmanager
def bench_environment(targets: BenchTargets, data_dir: Path, embedder: str) -> Iterator[dict[str, str]]:
    """A fresh database and topic names; yields the ``MEMLEDGER_*`` environment for them.
    The database is dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    db = f"memledger_bench_{tag}"
    with psycopg.connect(targets.postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    env = {
        "MEMLEDGER_KAFKA_BOOTSTRAP": targets.kafka,
        "MEMLEDGER_POSTGRES_DSN": psycopg.conninfo.make_conninfo(targets.postgres_dsn, dbname=db),
        "MEMLEDGER_REDIS_URL": targets.redis_url,
        "MEMLEDGER_TOPIC": f"memory.events.bench-{tag}",
        "MEMLEDGER_DLQ_TOPIC": f"memory.dlq.bench-{tag}",
        "MEMLEDGER_TOMBSTONE_TOPIC": f"memory.tombstones.bench-{tag}",
        "MEMLEDGER_DATA_DIR": str(data_dir / tag),
        "MEMLEDGER_QDRANT_PATH": str(data_dir / tag / "qdrant"),
        "MEMLEDGER_MASTER_KEY": new_master_key(),
        "MEMLEDGER_EMBEDDER": embedder,
        "MEMLEDGER_VECTOR_QUERY_URL": "http://127.0.0.1:16399",
        "MEMLEDGER_CONSUMER_GROUP_PREFIX": f"memledger-bench-{tag}",
    }
    try:
        yield env
    finally:
        with psycopg.connect(targets.postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def services_for(env: dict[str, str], own_vectors: bool = False) -> Services:
    fields = {k.removeprefix("MEMLEDGER_").lower(): v for k, v in env.items()}
    return build(Settings.model_validate(fields), own_vectors=own_vectors)


def _fact(subject: str, content: str, turn_id: str) -> MemoryWrite:
    """A subject-scoped ``fact`` for purpose ``bench``, written by ``bench``."""
    return MemoryWrite.model_validate(
        {
            "subject_id": subject,
            "kind": "fact",
            "purpose": "bench",
            "scope": {"type": "subject", "id": subject},
            "content": content,
            "provenance": {"writer": "bench", "written_at": utc_now(), "turn_id": turn_id},
        }
    )


def _command(n: int) -> MemoryWrite:
    return _fact(
        f"bench-user-{n % 50}",
        f"Benchmark memory {n}: the user mentioned project {n % 97} and a deadline in week {n % 52}.",
        f"b-{n}",
    )


def paced(total: int, rate: float, start: float) -> Iterator[int]:
    """0, 1, ... ``total - 1``, each yielded no earlier than ``start + n / rate`` (seconds
    of ``time.perf_counter``): a steady ``rate`` per second, never a burst to catch up
    with faster than the schedule."""
    for n in range(total):
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield n


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def bench_append(env: dict[str, str], events: int, batch: int, progress: Progress) -> dict[str, Any]:
    """Ledger append throughput into Kafka vs a raw producer sending the same bytes."""
    svc = services_for(env)
    try:
        principal = svc.principal()
        payloads: list[bytes] = []
        started = time.perf_counter()
        for first in range(0, events, batch):
            results = svc.ledger.write_many(principal, [_command(n) for n in range(first, min(events, first + batch))])
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


def start_worker(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "workers", "worker"],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_caught_up(svc: Services, names: tuple[str, ...], timeout_s: float, progress: Progress | None = None) -> None:
    """Block until the named projections' positions reach the end of the log.

    Raises:
        TimeoutError: not caught up within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        ends = svc.log.end_offsets()
        total = sum(ends.values())
        with svc.pool.connection() as conn:
            rows = conn.execute('SELECT projection, partition, "offset" FROM projection_positions').fetchall()
        done = {(p, part): off for p, part, off in rows}
        serving = svc.stores.serving()
        applied = min(
            sum(min(end, done.get((serving[n].id, part), -1) + 1) for part, end in ends.items()) for n in names
        )
        if progress is not None:
            progress("projections catching up", applied, total)
        if applied >= total:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"projections {names} still {total - applied} events behind after {timeout_s}s")
        time.sleep(0.5)


def bench_lag(env: dict[str, str], rate: float, seconds: float, progress: Progress) -> dict[str, Any]:
    """Projection lag p50/p99 at a steady ``rate`` of single-command writes (events/s)."""
    svc = services_for(env)
    worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-lag.log")
    acked: dict[tuple[int, int], float] = {}
    visible: dict[tuple[int, int], float] = {}
    stop = threading.Event()
    try:
        svc.ledger.write(svc.principal(), _command(-1))
        wait_caught_up(svc, ("facts", "vectors"), 120)

        serving = svc.stores.serving()
        facts_id, vectors_id = serving["facts"].id, serving["vectors"].id

        def poll() -> None:
            with svc.pool.connection() as conn:
                while not stop.is_set():
                    rows = conn.execute(
                        'SELECT projection, partition, "offset" FROM projection_positions WHERE projection IN (%s, %s)',
                        (facts_id, vectors_id),
                    ).fetchall()
                    now = time.perf_counter()
                    pos = {(p, part): off for p, part, off in rows}
                    for key in [k for k in list(acked) if k not in visible]:
                        part, off = key
                        if pos.get((facts_id, part), -1) >= off and pos.get((vectors_id, part), -1) >= off:
                            visible[key] = now
                    time.sleep(0.005)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        total = int(rate * seconds)
        principal = svc.principal()
        start = time.perf_counter()

        def one(n: int) -> None:
            result = svc.ledger.write(principal, _command(n))
            p = result.positions[0]
            acked[(p.partition, p.offset)] = time.perf_counter()

        with ThreadPoolExecutor(max_workers=8) as pool:
            for n in paced(total, rate, start):
                pool.submit(one, n)
                if n % 100 == 0:
                    progress("lag: writing", n, total)
        achieved = total / (time.perf_counter() - start)
        deadline = time.monotonic() + 120
        while len(visible) < len(acked) and time.monotonic() < deadline:
            time.sleep(0.1)
        progress("lag: writing", total, total)
    finally:
        stop.set()
        stop_worker(worker)
        svc.close()
    lags_ms = [(visible[k] - acked[k]) * 1000 for k in acked if k in visible]
    return {
        "target_rate": rate,
        "achieved_rate": round(achieved, 1),
        "events": len(acked),
        "not_visible_within_120s": len(acked) - len(lags_ms),
        "lag_p50_ms": round(percentile(lags_ms, 50), 1) if lags_ms else None,
        "lag_p99_ms": round(percentile(lags_ms, 99), 1) if lags_ms else None,
    }


def bench_locomo(env: dict[str, str], path: Path, progress: Progress) -> dict[str, Any]:
    """Ingest LoCoMo through Kafka, let the faust workers project it, then bench recall."""
    from workers.locomo import bench_recall, ingest

    worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-locomo.log")
    svc = services_for(env)
    try:
        started = time.perf_counter()
        ingested = ingest(svc, path, progress=progress)
        wait_caught_up(svc, ("facts", "vectors", "cache", "summaries"), 1800, progress)
        projected_s = time.perf_counter() - started
        time.sleep(1.0)  # the vectors worker's query endpoint is up once it has projected
        report = bench_recall(svc, path, progress=progress)
    finally:
        stop_worker(worker)
        svc.close()
    return {
        "ingest": ingested.to_dict(),
        "ingest_and_projection_s": round(projected_s, 1),
        "recall": report.to_dict(),
        "recall_text": report.render(),
    }


def _erasure_target(n: int) -> MemoryWrite:
    return _fact(
        f"bench-erase-{n}",
        f"Erasure target {n}: the user's locker code is {1000 + n} and their badge is B-{n:05d}.",
        f"e-{n}",
    )


def bench_erasure(
    env: dict[str, str], rate: float, seconds: float, progress: Progress, erase_every_s: float = 1.0
) -> dict[str, Any]:
    """Erasure propagation latency under a steady write load, with the faust workers.

    Before the load: one memory per planned erasure (subjects ``bench-erase-N``), projected
    everywhere and recalled once, so that facts, vectors, the cache and history all hold
    it. During ``seconds`` of single-command writes at ``rate`` events/s (as ``bench_lag``),
    one of them is erased every ``erase_every_s`` seconds. A prober runs ``trace`` on every
    erasure not yet complete, in a loop (the median time of a round that had erasures to
    probe is reported as ``probe_period_ms``, the resolution of the measure):
    two latencies of an erasure are measured from the ledger's acknowledgement
    (``Ledger.erase`` returned: keys destroyed, tombstones and event durable): to the first
    trace whose probes find no copy in any store, by memory id or by fingerprint
    (``erasure_absent_*``: what the erasure lane shortens), and to the first trace whose
    verdict is ``complete`` (``erasure_*``: also every store's receipt, written when its
    projection reaches the erasure in log order). The write load's own projection lag
    (ack -> facts and vectors positions cover it) is measured in the same run.

    Returns milliseconds; ``not_complete_within_120s`` counts erasures that never completed.
    """
    svc = services_for(env)  # not the vectors owner: probes go to the worker's query endpoint
    worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-erasure.log")
    planned = max(1, int(seconds / erase_every_s))
    acked: dict[tuple[int, int], float] = {}
    visible: dict[tuple[int, int], float] = {}
    erased_at: dict[str, float] = {}
    complete_at: dict[str, float] = {}
    absent_at: dict[str, float] = {}
    probe_periods: list[float] = []
    stop = threading.Event()
    try:
        principal = svc.principal()
        targets = [r.memory_id for r in svc.ledger.write_many(principal, [_erasure_target(n) for n in range(planned)])]
        wait_caught_up(svc, ("facts", "vectors", "cache", "summaries"), 300)
        deadline = time.monotonic() + 60
        while True:  # the vectors worker answers queries once it is up; recall fills the cache
            try:
                for n in range(planned):
                    svc.recall.recall(principal, f"bench-erase-{n}", "bench", "locker code", utc_now())
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # the DLQ is not on the propagation path; probing it scans a Kafka topic per trace
        probe_targets = replace(svc.trace_targets(), dead_letters=None)

        def poll_positions() -> None:
            with svc.pool.connection() as conn:
                while not stop.is_set():
                    rows = conn.execute(
                        'SELECT projection, partition, "offset" FROM projection_positions'
                        " WHERE projection IN ('facts_v1', 'vectors_v1')"
                    ).fetchall()
                    now = time.perf_counter()
                    pos = {(p, part): off for p, part, off in rows}
                    for key in [k for k in list(acked) if k not in visible]:
                        part, off = key
                        if pos.get(("facts_v1", part), -1) >= off and pos.get(("vectors_v1", part), -1) >= off:
                            visible[key] = now
                    time.sleep(0.005)

        def probe_erasures() -> None:
            while not stop.is_set():
                started = time.perf_counter()
                pending = [r for r in list(erased_at) if r not in complete_at]
                for request_id in pending:
                    try:
                        report = trace(svc.pool, request_id, probe_targets)
                    except Exception:  # a probe that cannot answer now answers on the next round
                        continue
                    now = time.perf_counter()
                    if request_id not in absent_at and all(
                        s.probe_found == 0 and not s.fingerprint_found for s in report.stores
                    ):
                        absent_at[request_id] = now
                    if report.verdict == "complete":
                        complete_at[request_id] = now
                        absent_at.setdefault(request_id, now)
                if pending:
                    probe_periods.append(time.perf_counter() - started)
                time.sleep(0.01)

        threads = [threading.Thread(target=poll_positions, daemon=True), threading.Thread(target=probe_erasures)]
        for t in threads:
            t.start()
        total = int(rate * seconds)

        def one(n: int) -> None:
            result = svc.ledger.write(principal, _command(n))
            p = result.positions[0]
            acked[(p.partition, p.offset)] = time.perf_counter()

        def erase(n: int) -> None:
            cmd = EraseMemories(
                subject_id=f"bench-erase-{n}", memory_ids=(targets[n] or "",), reason="erasure benchmark"
            )
            result = svc.ledger.erase(principal, cmd)
            assert result.request_id is not None
            erased_at[result.request_id] = time.perf_counter()

        start = time.perf_counter()
        next_erasure = 0
        with ThreadPoolExecutor(max_workers=8) as pool:
            for n in paced(total, rate, start):
                pool.submit(one, n)
                if next_erasure < planned and time.perf_counter() - start >= next_erasure * erase_every_s:
                    pool.submit(erase, next_erasure)
                    next_erasure += 1
                if n % 100 == 0:
                    progress("erasure: writing", n, total)
        achieved = total / (time.perf_counter() - start)
        progress("erasure: writing", total, total)
        deadline = time.monotonic() + 120
        while (len(complete_at) < len(erased_at) or len(visible) < len(acked)) and time.monotonic() < deadline:
            progress("erasure: draining", len(complete_at), len(erased_at))
            time.sleep(0.2)
    finally:
        stop.set()
        stop_worker(worker)
        svc.close()
    latencies = [(complete_at[r] - erased_at[r]) * 1000 for r in erased_at if r in complete_at]
    absences = [(absent_at[r] - erased_at[r]) * 1000 for r in erased_at if r in absent_at]
    lags = [(visible[k] - acked[k]) * 1000 for k in acked if k in visible]

    def pct(values: list[float], q: float) -> float | None:
        return round(percentile(values, q), 1) if values else None

    return {
        "embedder": env["MEMLEDGER_EMBEDDER"],
        "target_rate": rate,
        "achieved_rate": round(achieved, 1),
        "write_events": len(acked),
        "write_lag_p50_ms": pct(lags, 50),
        "write_lag_p99_ms": pct(lags, 99),
        "erasures": len(erased_at),
        "not_complete_within_120s": len(erased_at) - len(latencies),
        "erasure_absent_p50_ms": pct(absences, 50),
        "erasure_absent_p99_ms": pct(absences, 99),
        "erasure_p50_ms": pct(latencies, 50),
        "erasure_p99_ms": pct(latencies, 99),
        "erasure_max_ms": pct(latencies, 100),
        "probe_period_ms": pct([t * 1000 for t in probe_periods], 50),
    }
