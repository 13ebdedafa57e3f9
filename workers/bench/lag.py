"""Projection lag at a steady write rate: from a command's acknowledgement (the ledger
returned its log position) to the moment each projection's stored position covers it,
sampled every 5 ms, with the faust workers of every projection running."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from projections import embedding_queue
from workers.bench.env import Progress, services_for, start_worker, stop_worker, wait_caught_up
from workers.bench.figures import Figure
from workers.bench.load import command, paced, percentile
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


def bench_lag(env: dict[str, str], rate: float, seconds: float, progress: Progress) -> dict[str, Any]:
    """Projection lag p50/p99 at a steady ``rate`` of single-command writes (events/s) for
    ``seconds``, per projection: facts, cache and summaries together (the last of the three
    to apply an event), and vectors.

    Returns milliseconds: ``{"embedder", "target_rate", "achieved_rate", "events",
    "not_visible_within_120s", "lag_p50_ms", "lag_p99_ms" (facts and vectors, as before),
    "facts_cache_summaries_p50_ms", ..._p99_ms, "vectors_p50_ms", "vectors_p99_ms"}``.
    """
    svc = services_for(env)
    worker = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-lag.log")
    probe: VisibilityProbe | None = None
    try:
        svc.ledger.write(svc.principal(), command(-1))
        wait_caught_up(svc, PROJECTION_NAMES, 120)
        probe = VisibilityProbe(svc)
        probe.start()
        total = int(rate * seconds)
        principal = svc.principal()
        start = time.perf_counter()

        def one(n: int) -> None:
            assert probe is not None
            p = svc.ledger.write(principal, command(n)).positions[0]
            probe.ack((p.partition, p.offset))

        with ThreadPoolExecutor(max_workers=8) as pool:
            for n in paced(total, rate, start):
                pool.submit(one, n)
                if n % 100 == 0:
                    progress("lag: writing", n, total)
        achieved = total / (time.perf_counter() - start)
        deadline = time.monotonic() + 120
        while not probe.all_visible() and time.monotonic() < deadline:
            time.sleep(0.1)
        progress("lag: writing", total, total)
    finally:
        if probe is not None:
            probe.stop()
        stop_worker(worker)
        svc.close()
    both = probe.lags_ms(("facts", "vectors"))
    fcs = probe.lags_ms(("facts", "cache", "summaries"))
    vectors = probe.lags_ms(("vectors",))
    everywhere = probe.lags_ms(PROJECTION_NAMES)
    return {
        "embedder": env["MEMLEDGER_EMBEDDER"],
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


def lag_figures(out: dict[str, Any]) -> list[Figure]:
    """The lag figures of ``bench_lag``'s result (p99 has the target; p50 is shown)."""
    at = f"at {out['achieved_rate']} events/s"
    embedder = "minilm" if out["embedder"].startswith("minilm") else "hashing"
    figures = []
    for q in ("p50", "p99"):
        figures.append(
            Figure(
                f"lag.facts_cache_summaries.{q}",
                f"lag {q}, ack -> applied by facts, cache and summaries, {at}",
                out[f"facts_cache_summaries_{q}_ms"],
                "ms",
                target=target(f"lag.facts_cache_summaries.{q}"),
            )
        )
        figures.append(
            Figure(
                f"lag.vectors.{embedder}.{q}",
                f"lag {q}, ack -> applied by vectors ({out['embedder']}), {at}",
                out[f"vectors_{q}_ms"],
                "ms",
                target=target(f"lag.vectors.{embedder}.{q}"),
            )
        )
    return figures
