"""Rejoin after SIGKILL: a projection's worker killed outright under a steady write load,
restarted by its supervisor; from the kill to the moment its projection applies records
again, and to the moment the restarted worker is back in its consumer group."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from workers.bench.env import Progress, services_for, start_worker, stop_worker, wait_caught_up
from workers.bench.figures import Figure
from workers.bench.lag import pct
from workers.bench.load import command, paced
from workers.bench.targets import target
from workers.bootstrap import Services
from workers.live.membership import describe


def _applied(svc: Services, projection_id: str) -> int:
    with svc.pool.connection() as conn:
        row = conn.execute(
            'SELECT COALESCE(sum("offset" + 1), 0) FROM projection_positions WHERE projection = %s', (projection_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def bench_rejoin(
    env: dict[str, str], progress: Progress, kills: int = 3, rate: float = 50.0, projection: str = "facts"
) -> dict[str, Any]:
    """Kill ``projection``'s worker with SIGKILL ``kills`` times under single-command writes
    at ``rate`` events/s (its supervisor restarts it), waiting between kills until it is
    back in its group and applying. Per kill, milliseconds from the kill to the first
    record applied after it (``applying``: its projection's positions advance again, by
    the restarted worker's start-up catch-up or its consumer) and to the restarted worker
    in its consumer group with partitions (``rejoined``), polled every 20 ms and 100 ms.

    Returns ``{"projection", "kills", "rate", "applying_ms": [...], "rejoined_ms": [...],
    "applying_p50_ms", "applying_max_ms", "rejoined_p50_ms", "rejoined_max_ms"}``.

    Raises:
        TimeoutError: the worker did not apply again, or rejoin, within 120 s of a kill.
    """
    from kafka import KafkaAdminClient

    svc = services_for(env)
    supervisor = start_worker(env, Path(env["MEMLEDGER_DATA_DIR"]) / "worker-rejoin.log", "--projection", projection)
    admin = KafkaAdminClient(bootstrap_servers=env["MEMLEDGER_KAFKA_BOOTSTRAP"], client_id="memledger-bench")
    stop = threading.Event()
    applying: list[float] = []
    rejoined: list[float] = []
    try:
        svc.ledger.write(svc.principal(), command(-1))
        wait_caught_up(svc, (projection,), 120)
        projection_id = svc.stores.serving()[projection].id
        group = f"{env['MEMLEDGER_CONSUMER_GROUP_PREFIX']}.{projection_id}"
        principal = svc.principal()

        def load() -> None:
            with ThreadPoolExecutor(max_workers=4) as pool:
                for n in paced(int(rate * 600), rate, time.perf_counter()):
                    if stop.is_set():
                        return
                    pool.submit(svc.ledger.write, principal, command(n))

        writer = threading.Thread(target=load, daemon=True)
        writer.start()
        for k in range(kills):
            progress("rejoin: kills", k, kills)
            members = _wait(lambda: _stable_members(admin, group, env["MEMLEDGER_TOPIC"]), "the worker in its group")
            [child] = psutil.Process(supervisor.pid).children()
            child.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            child.wait(timeout=30)
            time.sleep(0.05)  # a commit already sent when it died lands now
            at_kill = _applied(svc, projection_id)
            seen_applying: float | None = None
            seen_rejoined: float | None = None
            deadline = time.monotonic() + 120
            while seen_applying is None or seen_rejoined is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{projection_id}: not applying and in its group within 120 s of a kill")
                if seen_applying is None and _applied(svc, projection_id) > at_kill:
                    seen_applying = time.perf_counter()
                if seen_rejoined is None:
                    now_members = _stable_members(admin, group, env["MEMLEDGER_TOPIC"])
                    if now_members and {m.member_id for m in now_members}.isdisjoint({m.member_id for m in members}):
                        seen_rejoined = time.perf_counter()
                time.sleep(0.02)
            applying.append((seen_applying - killed) * 1000)
            rejoined.append((seen_rejoined - killed) * 1000)
        progress("rejoin: kills", kills, kills)
    finally:
        stop.set()
        admin.close()
        stop_worker(supervisor)
        svc.close()
    return {
        "projection": projection,
        "kills": kills,
        "rate": rate,
        "applying_ms": [round(x, 1) for x in applying],
        "rejoined_ms": [round(x, 1) for x in rejoined],
        "applying_p50_ms": pct(applying, 50),
        "applying_max_ms": pct(applying, 100),
        "rejoined_p50_ms": pct(rejoined, 50),
        "rejoined_max_ms": pct(rejoined, 100),
    }


def _stable_members(admin: Any, group: str, topic: str) -> list[Any]:
    """The group's members when it is stable and every member has partitions, else []."""
    state, members = describe(admin, group, topic)
    return members if state == "Stable" and members and all(m.partitions for m in members) else []


def _wait(check: Any, what: str, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)
    return value


def rejoin_figures(out: dict[str, Any]) -> list[Figure]:
    """The rejoin figures of ``bench_rejoin``'s result (the slowest kill has the target)."""
    under = f"{out['projection']} worker, {out['kills']} kills under {out['rate']:.0f} writes/s"
    return [
        Figure(
            "rejoin.applying.max",
            f"SIGKILL -> applying again, slowest of {under}",
            out["applying_max_ms"],
            "ms",
            target=target("rejoin.applying.max"),
        ),
        Figure(
            "rejoin.member.max",
            f"SIGKILL -> back in its consumer group, slowest of {under}",
            out["rejoined_max_ms"],
            "ms",
            target=target("rejoin.member.max"),
        ),
    ]
