"""The supervisor of ``memledger worker`` (distributed mode): one child process per
projection version that is not retired, following the version registry, each
restarted when it dies.

A restart waits ``RestartBackoff``'s delay: short after a child that had been running
for a while (a crash, a SIGKILL: the restarted child rejoins its consumer group as the
same static member, see ``workers.live.membership``), doubling while a child keeps
dying soon after its start (a broken configuration), and short again once a child has
run for ``stable_s`` seconds.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from projections import versions
from workers.settings import Settings

log = logging.getLogger(__name__)

Child = tuple[str, int]
"""(projection name, version): one faust worker process."""


@dataclass
class RestartBackoff:
    """The delay before restarting a child that exited: ``first_s`` seconds when it had
    run at least ``stable_s`` seconds (or on its first exit), else twice the previous
    delay, at most ``max_s``."""

    first_s: float = 0.2
    max_s: float = 30.0
    stable_s: float = 30.0
    _delay_s: dict[Child, float] = field(default_factory=dict)

    def delay_s(self, child: Child, ran_s: float) -> float:
        """The delay before restarting ``child``, which ran ``ran_s`` seconds this time."""
        previous = self._delay_s.get(child)
        delay = self.first_s if previous is None or ran_s >= self.stable_s else min(previous * 2, self.max_s)
        self._delay_s[child] = delay
        return delay


def spawn(child: Child) -> subprocess.Popen[bytes]:
    """Start ``memledger worker --projection NAME --version N`` (with ``-v`` when the
    supervisor logs at INFO)."""
    name, version = child
    verbose = ["-v"] if logging.getLogger().isEnabledFor(logging.INFO) else []  # as the supervisor was started
    return subprocess.Popen(
        [sys.executable, "-m", "workers", *verbose, "worker", "--projection", name, "--version", str(version)]
    )


def desired_children(settings: Settings, names: Sequence[str], known: set[Child] | None) -> set[Child]:
    """The versions of ``names`` that are not retired (building, serving, previous), from
    the registry; version 1 of each before the registry exists; ``known`` (the last answer) when Postgres cannot be
    read right now."""
    import psycopg

    assert settings.postgres_dsn is not None
    try:
        with psycopg.connect(settings.postgres_dsn, connect_timeout=5) as conn:
            if conn.execute("SELECT to_regclass('projection_versions')").fetchone() == (None,):
                return {(n, 1) for n in names}
            return {(info.name, info.version) for n in names for info in versions.running(conn, n)}
    except psycopg.Error as exc:
        log.warning("worker: cannot read the version registry (%s); keeping the running versions", exc)
        return known if known is not None else {(n, 1) for n in names}


def supervise(
    settings: Settings,
    names: Sequence[str],
    stopping: threading.Event,
    registry_every_s: float = 2.0,
    backoff: RestartBackoff | None = None,
    tick_s: float = 0.1,
) -> None:
    """Run one child worker per version of each projection that is not retired
    (``--projection NAME --version N``) until ``stopping`` is set, following the
    registry: a version a rebuild registers gets a child within ``registry_every_s``
    seconds (it builds the version from offset 0 in its own consumer group), a retired
    one loses its child. A child that dies is restarted after ``backoff``'s delay
    (checked every ``tick_s`` seconds). When ``stopping`` is set, every child gets
    SIGTERM (SIGKILL after 30 s)."""
    backoff = backoff or RestartBackoff()
    wanted = desired_children(settings, names, None)
    children = {child: spawn(child) for child in sorted(wanted)}
    started = dict.fromkeys(children, time.monotonic())
    restart_at: dict[Child, float] = {}
    next_registry_read = time.monotonic() + registry_every_s
    print(f"worker: supervising {_describe(children)}", flush=True)
    try:
        while not stopping.is_set():
            now = time.monotonic()
            if now >= next_registry_read:
                next_registry_read = now + registry_every_s
                wanted = desired_children(settings, names, wanted)
                for child in sorted(set(children) - wanted):
                    print(f"worker: {child[0]}_v{child[1]} is no longer live; stopping it", flush=True)
                    stop([children.pop(child)])
                    restart_at.pop(child, None)
                for child in sorted(wanted - set(children)):
                    children[child], started[child] = spawn(child), now
                    print(f"worker: started {child[0]}_v{child[1]} (pid {children[child].pid})", flush=True)
            for child, proc in list(children.items()):
                if proc.poll() is None or stopping.is_set():
                    continue
                if child not in restart_at:
                    delay = backoff.delay_s(child, now - started[child])
                    restart_at[child] = now + delay
                    print(
                        f"worker: {child[0]}_v{child[1]} exited with {proc.returncode}; restarting in {delay:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )
                if now >= restart_at[child]:
                    del restart_at[child]
                    children[child], started[child] = spawn(child), now
            stopping.wait(tick_s)
    finally:
        stop(list(children.values()))


def _describe(children: dict[Child, subprocess.Popen[bytes]]) -> str:
    return ", ".join(f"{n}_v{v} (pid {p.pid})" for (n, v), p in sorted(children.items()))


def stop(procs: list[subprocess.Popen[bytes]], timeout_s: float = 30.0) -> None:
    """SIGTERM each running process, then wait for each; SIGKILL one still running after
    ``timeout_s`` seconds."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
