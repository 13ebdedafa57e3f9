"""Peak resident memory of the worker processes during a benchmark (psutil)."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import psutil

MB = 1024 * 1024


def role(cmdline: Sequence[str]) -> str:
    """What a ``memledger worker`` process is, from its command line: ``facts_v1`` for a
    projection's worker (titled ``memledger worker facts_v1`` by its supervisor, or
    started with ``--projection facts --version 1``), else ``supervisor``."""
    text = " ".join(cmdline)
    titled = re.search(r"memledger worker (\w+_v\d+)", text)
    if titled:
        return titled.group(1)
    started = re.search(r"--projection (\S+) --version (\d+)", text)
    return f"{started.group(1)}_v{started.group(2)}" if started else "supervisor"


class RssSampler:
    """Every ``interval_s`` seconds, the resident set size of every process in the trees
    rooted at ``roots`` (pids of ``memledger worker`` supervisors): the peak of each
    process, the peak of their sum at one sample (the whole deployment) and the most
    processes alive at one sample (the roots and their direct children, the workers they
    forked; a process that has exited but is not reaped yet, a zombie, is not alive, and
    a grandchild counts for memory only). ``stop`` ends the sampling; ``result`` gives megabytes
    (2**20 bytes).

    A child forked by a supervisor carries the supervisor's command line until it sets
    its title, so a process labelled ``supervisor`` that is not a root is labelled again
    at the next sample."""

    def __init__(self, roots: Sequence[int], interval_s: float = 0.5) -> None:
        self._roots = list(roots)
        self._interval_s = interval_s
        self._peak: dict[int, tuple[str, int]] = {}
        self._total_peak = 0
        self._at_peak: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sample(self) -> None:
        """Take one sample now."""
        total = 0
        alive: list[str] = []
        for root in self._roots:
            try:
                tree = [psutil.Process(root)]
                tree += tree[0].children(recursive=True)
            except psutil.Error:  # the root has exited
                continue
            for proc in tree:
                try:
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    rss = proc.memory_info().rss
                    label = self._label(proc, root)
                    worker = proc.pid == root or proc.ppid() == root
                except psutil.Error:  # exited between the listing and the reading
                    continue
                total += rss
                if worker:
                    alive.append(f"{label} (pid {proc.pid})")
                if label != self._peak.get(proc.pid, (label, 0))[0]:  # titled since the last sample
                    self._peak[proc.pid] = (label, self._peak[proc.pid][1])
                if rss > self._peak.get(proc.pid, (label, 0))[1]:
                    self._peak[proc.pid] = (label, rss)
        self._total_peak = max(self._total_peak, total)
        if len(alive) > len(self._at_peak):
            self._at_peak = alive

    def _label(self, proc: psutil.Process, root: int) -> str:
        known = self._peak.get(proc.pid)
        if known is not None and (known[0] != "supervisor" or proc.pid == root):
            return known[0]
        return role(proc.cmdline())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._interval_s)

    def result(self) -> dict[str, Any]:
        """``{"worker_peak_rss_mb": {role: peak, ...}, "deployment_peak_rss_mb": peak,
        "processes": n, "processes_at_peak": [label, ...], "processes_started": m}``: ``n``
        the most processes alive at one sample (the deployment's size), which they were
        (role and pid), ``m`` every process seen (above ``n`` when a worker was restarted).
        A role run by several processes (scale-out, restarts) gets the highest of their
        peaks."""
        by_role: dict[str, int] = {}
        for label, rss in self._peak.values():
            by_role[label] = max(by_role.get(label, 0), rss)
        return {
            "worker_peak_rss_mb": {k: round(v / MB, 1) for k, v in sorted(by_role.items())},
            "deployment_peak_rss_mb": round(self._total_peak / MB, 1),
            "processes": len(self._at_peak),
            "processes_at_peak": list(self._at_peak),
            "processes_started": len(self._peak),
        }
