"""Projection lag at a steady write rate: from a command's acknowledgement (the ledger
returned its log position) to the moment each projection's stored position covers it,
sampled every 5 ms, with the faust workers of every projection running (one or several
per projection), and the workers' peak resident memory meanwhile; and the highest
steady rate at which the vectors lag keeps its p99 within a bound."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projections import embedding_queue
from workers.bench.env import Progress, services_for, start_worker, stop_worker, wait_caught_up
from workers.bench.figures import Figure
from workers.bench.load import command, paced, percentile
from workers.bench.rss import RssSampler
from workers.bench.targets import target
from workers.bootstrap import PROJECTION_NAMES, Services

Position = tuple[int, int]
"""(partition, offset) of an acknowledged event."""


class VisibilityProbe:
    """Polls ``projection_positions`` every 5 ms and records, per projection name, when
    each acknowledged position was first covered by that projection's serving version
    (for vectors: when every write up to it has its point, none still queued for
    embedding).

    ``acked`` maps a position to its acknowledgement time, ``visible[name]`` to the time
    it was seen applied (``time.perf_counter`` seconds)."""

    def __init__(self, svc: Services, names: tuple[str, ...] = PROJECTION_NAMES) -> None:
        serving = svc.stores.serving()
        self._svc = svc
        self._ids = {name: serving[name].id for name in names}
        # a write is visible in vectors once its point is there, not once it is queued for embedding
        self._vectors = serving["vectors"].version if "vectors" in names else None
        self.acked: dict[Position, float] = {}
        self.visible: dict[str, dict[Position, float]] = {name: {} for name in names}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def ack(self, position: Position) -> None:
        self.acked[position] = time.perf_counter()

    def all_visible(self) -> bool:
        return all(len(seen) >= len(self.acked) for seen in self.visible.values())

    def _poll(self) -> None:
        ids = list(self._ids.values())
        with self._svc.pool.connection() as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    'SELECT projection, partition, "offset" FROM projection_positions WHERE projection = ANY(%s)',
                    (ids,),
                ).fetchall()
                now = time.perf_counter()
                pos = {(p, part): off for p, part, off in rows}
                if self._vectors is not None:
                    vid = self._ids["vectors"]
                    for part, first in embedding_queue.first_pending(conn, self._vectors).items():
                        pos[(vid, part)] = min(pos.get((vid, part), -1), first - 1)
                for name, pid in self._ids.items():
                    seen = self.visible[name]
                    for key in [k for k in list(self.acked) if k not in seen]:
                        if pos.get((pid, key[0]), -1) >= key[1]:
                            seen[key] = now
                time.sleep(0.005)

    def lags_ms(self, names: tuple[str, ...]) -> list[float]:
        """Per acknowledged event visible in every one of ``names``: milliseconds from its
        acknowledgement to the moment the last of them applied it."""
        out = []
        for key, acked_at in self.acked.items():
            times = [self.visible[n].get(key) for n in names]
            if all(t is not None for t in times):
                out.append((max(t for t in times if t is not None) - acked_at) * 1000)
        return out


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile rounded to 0.1, ``None`` for no values."""
    return round(percentile(values, q), 1) if values else None


@dataclass
class Deployment:
    """The services of a run and its ``memledger worker`` supervisors (``workers[0]``
    runs every projection; each further one every projection but vectors, unless a
    Qdrant server is configured: a local index has one owner)."""

    svc: Services
    workers: list[subprocess.Popen[bytes]]
    rss: RssSampler
    next_command: int = 0


@contextmanager
def deployment(env: dict[str, str], workers_per_projection: int = 1) -> Iterator[Deployment]:
    """Start ``workers_per_projection`` supervisors for the run's environment, wait until
    every projection has applied a first write, and sample their memory until the end.

    Raises:
        ValueError: ``workers_per_projection`` is below 1 (names the field).
        TimeoutError: the projections did not apply the first write within 120 s.
    """
    if workers_per_projection < 1:
        raise ValueError(f"workers_per_projection: must be at least 1, got {workers_per_projection}")
    svc = services_for(env)
    data_dir = Path(env["MEMLEDGER_DATA_DIR"])
    others = (
        []
        if env.get("MEMLEDGER_QDRANT_URL")
        else [a for n in PROJECTION_NAMES if n != "vectors" for a in ("--projection", n)]
    )
    procs = [start_worker(env, data_dir / "worker-lag-0.log")]
    procs += [start_worker(env, data_dir / f"worker-lag-{i}.log", *others) for i in range(1, workers_per_projection)]
    rss = RssSampler([p.pid for p in procs])
    rss.start()
    try:
        svc.ledger.write(svc.principal(), command(-1))
        wait_caught_up(svc, PROJECTION_NAMES, 120)
        yield Deployment(svc, procs, rss)
    finally:
        rss.stop()
        for proc in procs:
            stop_worker(proc)
        svc.close()


def steady_load(run: Deployment, rate: float, seconds: float, progress: Progress, stage: str) -> dict[str, Any]:
    """``seconds`` of single-command writes at ``rate`` events/s (8 writer threads), then
    up to 120 s for every projection to apply them; the lag of each event per projection.

    Returns milliseconds: ``{"target_rate", "achieved_rate", "events",
    "not_visible_within_120s", "lag_p50_ms", "lag_p99_ms" (facts and vectors),
    "facts_cache_summaries_p50_ms", ..._p99_ms, "vectors_p50_ms", "vectors_p99_ms"}``.
    """
    probe = VisibilityProbe(run.svc)
    probe.start()
    try:
        total = int(rate * seconds)
        principal = run.svc.principal()
        first = run.next_command
        run.next_command += total
        start = time.perf_counter()

        def one(n: int) -> None:
            p = run.svc.ledger.write(principal, command(first + n)).positions[0]
            probe.ack((p.partition, p.offset))

        with ThreadPoolExecutor(max_workers=8) as pool:
            for n in paced(total, rate, start):
                pool.submit(one, n)
                if n % 100 == 0:
                    progress(stage, n, total)
        achieved = total / (time.perf_counter() - start)
        deadline = time.monotonic() + 120
        while not probe.all_visible() and time.monotonic() < deadline:
            time.sleep(0.1)
        progress(stage, total, total)
    finally:
        probe.stop()
    both = probe.lags_ms(("facts", "vectors"))
    fcs = probe.lags_ms(("facts", "cache", "summaries"))
    vectors = probe.lags_ms(("vectors",))
    everywhere = probe.lags_ms(PROJECTION_NAMES)
    return {
        "target_rate": rate,
        "achieved_rate": round(achieved, 1),
        "events": len(probe.acked),
        "not_visible_within_120s": len(probe.acked) - len(everywhere),
        "lag_p50_ms": pct(both, 50),
        "lag_p99_ms": pct(both, 99),
        "facts_cache_summaries_p50_ms": pct(fcs, 50),
        "facts_cache_summaries_p99_ms": pct(fcs, 99),
        "vectors_p50_ms": pct(vectors, 50),
        "vectors_p99_ms": pct(vectors, 99),
    }


def bench_lag(
    env: dict[str, str], rate: float, seconds: float, progress: Progress, workers_per_projection: int = 1
) -> dict[str, Any]:
    """Projection lag p50/p99 at a steady ``rate`` of single-command writes (events/s) for
    ``seconds``, per projection: facts, cache and summaries together (the last of the three
    to apply an event), and vectors; with ``workers_per_projection`` workers of each
    projection (see ``deployment``); and the workers' peak resident memory.

    Returns ``steady_load``'s result and ``{"embedder", "workers_per_projection",
    "worker_peak_rss_mb": {role: MB}, "deployment_peak_rss_mb", "processes", "processes_started"}``.
    """
    with deployment(env, workers_per_projection) as run:
        out = steady_load(run, rate, seconds, progress, "lag: writing")
    return {
        "embedder": env["MEMLEDGER_EMBEDDER"],
        "workers_per_projection": workers_per_projection,
        **out,
        **run.rss.result(),
    }


def bench_lag_rate_search(
    env: dict[str, str],
    progress: Progress,
    bound_ms: float = 1000.0,
    seconds: float = 15.0,
    first_rate: float = 50.0,
    factor: float = 1.5,
    max_rate: float = 800.0,
    refinements: int = 2,
) -> dict[str, Any]:
    """The highest steady write rate (events/s) at which the vectors lag p99 stays within
    ``bound_ms``: loads of ``seconds`` each on one deployment, from ``first_rate`` up by
    ``factor`` until one misses (or the writers cannot reach the rate, or ``max_rate``),
    then ``refinements`` bisections between the last rate that held and the first that
    did not.

    Returns ``{"embedder", "bound_ms", "highest_rate" (None: not even ``first_rate``),
    "writer_limited" (the writers fell short before the lag did), "steps": [{"rate",
    "achieved_rate", "vectors_p99_ms", "held"}, ...]}``.
    """
    steps: list[dict[str, Any]] = []
    good: float | None = None
    bad: float | None = None
    writer_limited = False

    def held(rate: float) -> bool:
        nonlocal writer_limited
        out = steady_load(run, rate, seconds, progress, f"lag search: {rate:.0f} events/s")
        p99 = out["vectors_p99_ms"]
        reached = out["achieved_rate"] >= 0.9 * rate
        ok = p99 is not None and p99 <= bound_ms and out["not_visible_within_120s"] == 0 and reached
        writer_limited = writer_limited or (not reached and p99 is not None and p99 <= bound_ms)
        steps.append({"rate": rate, "achieved_rate": out["achieved_rate"], "vectors_p99_ms": p99, "held": ok})
        return ok

    with deployment(env) as run:
        rate = first_rate
        while rate <= max_rate:
            if held(rate):
                good, rate = rate, rate * factor
            else:
                bad = rate
                break
        for _ in range(refinements if bad is not None and not writer_limited else 0):
            middle = ((good or 0.0) + bad) / 2 if bad is not None else rate
            if held(middle):
                good = middle
            else:
                bad = middle
    return {
        "embedder": env["MEMLEDGER_EMBEDDER"],
        "bound_ms": bound_ms,
        "highest_rate": None if good is None else round(good, 1),
        "writer_limited": writer_limited,
        "steps": steps,
    }


def lag_figures(out: dict[str, Any]) -> list[Figure]:
    """The lag figures of ``bench_lag``'s result (p99 has the target; p50 is shown), and
    the peak resident memory of each worker and of the whole deployment."""
    workers = out.get("workers_per_projection", 1)
    at = f"at {out['achieved_rate']} events/s" + (f", {workers} workers per projection" if workers > 1 else "")
    embedder = "minilm" if out["embedder"].startswith("minilm") else "hashing"
    suffix = f".x{workers}" if workers > 1 else ""
    figures = []
    for q in ("p50", "p99"):
        figures.append(
            Figure(
                f"lag.facts_cache_summaries.{q}{suffix}",
                f"lag {q}, ack -> applied by facts, cache and summaries, {at}",
                out[f"facts_cache_summaries_{q}_ms"],
                "ms",
                target=target(f"lag.facts_cache_summaries.{q}"),
            )
        )
        figures.append(
            Figure(
                f"lag.vectors.{embedder}.{q}{suffix}",
                f"lag {q}, ack -> applied by vectors ({out['embedder']}), {at}",
                out[f"vectors_{q}_ms"],
                "ms",
                target=target(f"lag.vectors.{embedder}.{q}"),
            )
        )
    run = f"{out['embedder']}, {at}"
    for name, mb in out.get("worker_peak_rss_mb", {}).items():
        figures.append(Figure(f"lag.rss.{name}{suffix}", f"peak RSS of the {name} worker ({run})", mb, "MB"))
    if "deployment_peak_rss_mb" in out:
        started = out.get("processes_started", out["processes"])
        restarts = f", {started - out['processes']} restarted" if started > out["processes"] else ""
        figures.append(
            Figure(
                f"lag.rss.deployment{suffix}",
                f"peak RSS of every worker process together, {out['processes']} processes{restarts} ({run})",
                out["deployment_peak_rss_mb"],
                "MB",
            )
        )
    return figures


def rate_search_figures(out: dict[str, Any]) -> list[Figure]:
    """The figure of ``bench_lag_rate_search``'s result."""
    tried = ", ".join(f"{s['rate']:.0f}{'' if s['held'] else ' missed'}" for s in out["steps"])
    note = "the writers could not go faster" if out["writer_limited"] else None
    return [
        Figure(
            "lag.vectors.highest_rate",
            f"highest steady rate with vectors ({out['embedder']}) lag p99 <= {out['bound_ms']:.0f} ms"
            f" (tried {tried} events/s)",
            out["highest_rate"],
            "events/s",
            note=note,
        )
    ]
