"""The supervisor of ``memledger worker`` (distributed mode): one child process per
projection version that is not retired, following the version registry, each
restarted when it dies.

A restart waits ``RestartBackoff``'s delay: short after a child that had been running
for a while (a crash, a SIGKILL: the restarted child rejoins its consumer group as the
same static member, see ``workers.live.membership``), doubling while a child keeps
dying soon after its start (a broken configuration), and short again once a child has
run for ``stable_s`` seconds.

Children are forked from the supervisor, which has imported the worker's code (faust
and its dependencies) once at its start, before it opened any client or thread: a new
Python process would spend seconds importing it again on every restart (about 1.5 s of
CPU; on a loaded 2-core machine, 10 s and more of wall time). Each child names itself
``memledger worker <projection>_v<N>`` (setproctitle), as ``ps`` shows it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from projections import versions
from workers.metrics import families
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


class ForkedWorker:
    """One child worker, forked from this process: runs ``workers.live.app.run_faust``
    for ``child`` and exits with its status (70 when it raised). Offers what the
    supervisor uses of ``subprocess.Popen``: ``pid``, ``returncode``, ``poll``, ``wait``,
    ``terminate``, ``kill``."""

    def __init__(self, settings: Settings, child: Child) -> None:
        self.args = child
        self.returncode: int | None = None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child: measured by the e2e tests, not by coverage)
            os._exit(_run_child(settings, child))
        self.pid = pid

    def poll(self) -> int | None:
        """The exit status once the child has exited (negative: killed by that signal), else ``None``."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit, at most ``timeout`` seconds.

        Raises:
            subprocess.TimeoutExpired: it is still running after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.args}", timeout or 0.0)
            time.sleep(0.05)
        return code

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)


def _run_child(settings: Settings, child: Child) -> int:  # pragma: no cover (runs in the forked child)
    """The forked child's life: default signal handling until faust installs its own,
    its process title, the worker; returns the exit status."""
    import traceback

    from setproctitle import setproctitle

    from workers.failures import one_line, store_failed

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    name, version = child
    setproctitle(f"memledger worker {name}_v{version}")
    families.use_multiprocess_values()  # the supervisor's /metrics sums what this child counts
    code = 0
    try:
        from workers.live.app import run_faust

        run_faust(settings, name, version)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        if store_failed(exc):  # one line: the store's state, not a bug of the worker
            print(f"worker {name}_v{version}: a store failed: {one_line(exc)}; exiting with 70", file=sys.stderr)
        else:
            traceback.print_exc()
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def preload() -> None:
    """Import what a child worker runs, once, in the supervisor (see the module's docstring)."""
    import faust
    import faust.types  # noqa: F401

    import workers.live.app  # noqa: F401


def spawn(settings: Settings, child: Child) -> ForkedWorker:
    """Start the worker of ``child`` (a forked process)."""
    return ForkedWorker(settings, child)


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
    preload()
    children = {child: spawn(settings, child) for child in sorted(wanted)}
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
                    children[child], started[child] = spawn(settings, child), now
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
                    children[child], started[child] = spawn(settings, child), now
            stopping.wait(tick_s)
    finally:
        stop(list(children.values()))


def _describe(children: dict[Child, ForkedWorker]) -> str:
    return ", ".join(f"{n}_v{v} (pid {p.pid})" for (n, v), p in sorted(children.items()))


def stop(procs: list[ForkedWorker], timeout_s: float = 30.0) -> None:
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
