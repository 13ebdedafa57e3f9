"""Erasure propagation latency under a steady write load, with the faust workers:
from the erasure's acknowledgement to the first ``trace`` that finds no copy by any
probe, and to the first ``trace`` whose verdict is ``complete`` (every receipt too)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from contracts import EraseMemories, MemoryWrite, utc_now
from projections.trace import trace
from workers.bench.env import Progress, services_for, start_worker, stop_worker, wait_caught_up
from workers.bench.figures import Figure
from workers.bench.lag import VisibilityProbe, pct
from workers.bench.load import command, fact, paced
from workers.bench.targets import target


def erasure_target(n: int) -> MemoryWrite:
    return fact(
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

    Returns milliseconds; ``not_complete_within_120s`` counts erasures that never completed;
    ``receipt_p99_ms`` is, per store, the p99 of request -> receipt (``trace``'s latency).
    """
    svc = services_for(env)  # not the vectors owner: probes go to the worker's query endpoint
    worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-erasure.log")
    planned = max(1, int(seconds / erase_every_s))
    probe: VisibilityProbe | None = None
    erased_at: dict[str, float] = {}
    complete_at: dict[str, float] = {}
    absent_at: dict[str, float] = {}
    probe_periods: list[float] = []
    receipts: dict[str, list[float]] = {}
    stop = threading.Event()
    try:
        principal = svc.principal()
        targets = [r.memory_id for r in svc.ledger.write_many(principal, [erasure_target(n) for n in range(planned)])]
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
                        for store in report.stores:  # request -> that store's receipt, as trace reports it
                            if store.latency_s is not None:
                                receipts.setdefault(store.store, []).append(store.latency_s * 1000)
                if pending:
                    probe_periods.append(time.perf_counter() - started)
                time.sleep(0.01)

        probe = VisibilityProbe(svc, ("facts", "vectors"))
        probe.start()
        threads = [threading.Thread(target=probe_erasures)]
        for t in threads:
            t.start()
        total = int(rate * seconds)

        def one(n: int) -> None:
            assert probe is not None
            p = svc.ledger.write(principal, command(n)).positions[0]
            probe.ack((p.partition, p.offset))

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
        while (len(complete_at) < len(erased_at) or not probe.all_visible()) and time.monotonic() < deadline:
            progress("erasure: draining", len(complete_at), len(erased_at))
            time.sleep(0.2)
    finally:
        stop.set()
        if probe is not None:
            probe.stop()
        stop_worker(worker)
        svc.close()
    latencies = [(complete_at[r] - erased_at[r]) * 1000 for r in erased_at if r in complete_at]
    absences = [(absent_at[r] - erased_at[r]) * 1000 for r in erased_at if r in absent_at]
    assert probe is not None
    lags = probe.lags_ms(("facts", "vectors"))
    return {
        "embedder": env["MEMLEDGER_EMBEDDER"],
        "target_rate": rate,
        "achieved_rate": round(achieved, 1),
        "write_events": len(probe.acked),
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
        "receipt_p99_ms": {store: pct(ms, 99) for store, ms in sorted(receipts.items())},
    }


def erasure_figures(out: dict[str, Any]) -> list[Figure]:
    """The erasure figures of one ``bench_erasure`` result."""
    embedder = "minilm" if out["embedder"].startswith("minilm") else "hashing"
    under = f"{out['embedder']}, under {out['achieved_rate']} writes/s"
    return [
        Figure(
            f"erasure.{embedder}.absent.p99",
            f"erasure p99, ack -> absent by every probe ({under})",
            out["erasure_absent_p99_ms"],
            "ms",
            target=target(f"erasure.{embedder}.absent.p99"),
        ),
        Figure(
            f"erasure.{embedder}.complete.p99",
            f"erasure p99, ack -> trace complete, every receipt ({under})",
            out["erasure_p99_ms"],
            "ms",
            target=target(f"erasure.{embedder}.complete.p99"),
            note=f"{out['not_complete_within_120s']} not complete" if out["not_complete_within_120s"] else None,
        ),
    ]
