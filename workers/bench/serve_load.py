"""The load of ``memledger bench serve``: an offered rate of requests, a share of them
writes and the rest recalls, spread over a fixed number of concurrent clients, against
a ``Target`` (``memledger serve`` over HTTP, or the same operations in-process).

The schedule is open-loop: request ``n`` is due at ``start + n / rate`` whatever the
answers before it took (``workers.bench.load.paced``); one request in
``round(1 / write_share)`` is a write. Each client is a thread with its own connection
(``Target.session``); a due request waits for a free client, so a slow server shows as
a lower achieved rate, not as a lighter load.

Ack-to-recallable: every acknowledged write joins a queue of writes not seen yet; each
recall asks for the oldest of them (its text as the query), and the first recall whose
items hold its memory id ends its wait: from the write's acknowledgement to that
recall's answer. With no write waiting, a recall asks for one of the seeded memories.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from workers.bench.env import Progress
from workers.bench.load import paced, percentile

PURPOSE = "bench"


class Session(Protocol):
    """One client's connection: a write answers its memory id once the log has it; a
    recall answers the memory ids of its items. Both raise on a refusal."""

    def write(self, subject_id: str, content: str) -> str: ...

    def recall(self, subject_id: str, query: str) -> list[str]: ...

    def close(self) -> None: ...


class Target(Protocol):
    def session(self, client: int) -> Session:
        """A connection for client number ``client`` (0, 1, ...)."""
        ...


@dataclass(frozen=True)
class LoadPlan:
    """``rate`` requests/s for ``seconds`` from ``clients`` concurrent clients, one in
    ``round(1 / write_share)`` a write, over ``subjects``."""

    rate: float = 100.0
    seconds: float = 30.0
    clients: int = 16
    write_share: float = 0.2
    subjects: tuple[str, ...] = tuple(f"bench-serve-{i}" for i in range(16))

    @property
    def total(self) -> int:
        return int(self.rate * self.seconds)

    def is_write(self, n: int) -> bool:
        return self.write_share > 0 and n % max(1, round(1 / self.write_share)) == 0


def note(n: int) -> str:
    """The text of the ``n``-th write: unique words (its number in letters) so that a
    recall for it finds it by full text."""
    return f"Serve benchmark note {n} {_spell(n)}: the user asked about project {n % 97} and week {n % 52}."


def _spell(n: int) -> str:
    digits = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return "-".join(digits[int(d)] for d in str(n))


@dataclass
class Recorder:
    """Latencies in milliseconds and failures of one run (thread-safe)."""

    write_ms: list[float] = field(default_factory=list)
    recall_ms: list[float] = field(default_factory=list)
    recallable_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    pending: OrderedDict[str, tuple[str, str, float]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(self, memory_id: str, subject: str, content: str, at: float, took_ms: float) -> None:
        with self._lock:
            self.write_ms.append(took_ms)
            self.pending[memory_id] = (subject, content, at)

    def oldest(self) -> tuple[str, str, str, float] | None:
        with self._lock:
            if not self.pending:
                return None
            memory_id, (subject, content, at) = next(iter(self.pending.items()))
            return memory_id, subject, content, at

    def recalled(self, found: Sequence[str], asked_for: str | None, at: float, took_ms: float | None) -> None:
        """A recall answered at ``at`` with ``found``; it asked for write ``asked_for``
        (or a seed). ``took_ms`` ``None``: not a recall of the load (its latency is not kept)."""
        with self._lock:
            if took_ms is not None:
                self.recall_ms.append(took_ms)
            if asked_for is not None and asked_for in found and asked_for in self.pending:
                self.recallable_ms.append((at - self.pending.pop(asked_for)[2]) * 1000)

    def failed(self, kind: str, exc: BaseException) -> None:
        with self._lock:
            key = f"{kind}: {type(exc).__name__}"
            self.failures[key] = self.failures.get(key, 0) + 1


DRAIN_S = 10.0
"""After the load, how long the writes no recall returned yet are asked for (seconds)."""


def _drain(s: Session, rec: Recorder, seconds: float) -> None:
    """Recall the writes still waiting, oldest first, about 100 a second, for at most
    ``seconds``; their ack-to-recallable time counts, these recalls' latency does not."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        waiting = rec.oldest()
        if waiting is None:
            return
        memory_id, subject, query, _ = waiting
        try:
            found = s.recall(subject, query)
        except Exception as exc:
            rec.failed("recall (drain)", exc)
            found = []
        rec.recalled(found, memory_id, time.perf_counter(), None)
        time.sleep(0.01)


def pct(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 2) if values else None


def run_load(
    target: Target, plan: LoadPlan, seeds: Sequence[tuple[str, str]], stage: str, progress: Progress
) -> dict[str, Any]:
    """Offer ``plan``'s load to ``target``; ``seeds`` are (subject, text) of memories
    recallable before the load. Returns milliseconds: ``{"requests", "achieved_rate",
    "writes", "recalls", "failures", "write_ack_p50_ms", ..._p99_ms, "recall_p50_ms",
    "recall_p99_ms", "ack_to_recallable_p50_ms", ..._p99_ms, "not_recalled"}``
    (``not_recalled``: acknowledged writes no recall returned before the end)."""
    rec = Recorder()
    local = threading.local()
    sessions: list[Session] = []
    lock = threading.Lock()
    rng = random.Random(7)

    def session() -> Session:
        if not hasattr(local, "session"):
            with lock:
                local.session = target.session(len(sessions))
                sessions.append(local.session)
        return local.session  # type: ignore[no-any-return]

    def one(n: int) -> None:
        s = session()
        if plan.is_write(n):
            subject, content = plan.subjects[n % len(plan.subjects)], note(n)
            t0 = time.perf_counter()
            try:
                memory_id = s.write(subject, content)
            except Exception as exc:  # a refusal or an error is counted, the load goes on
                rec.failed("write", exc)
                return
            t1 = time.perf_counter()
            rec.acked(memory_id, subject, content, t1, (t1 - t0) * 1000)
            return
        waiting = rec.oldest()
        if waiting is not None:
            asked_for, subject, query, _ = waiting
        else:
            asked_for, (subject, query) = None, seeds[rng.randrange(len(seeds))]
        t0 = time.perf_counter()
        try:
            found = s.recall(subject, query)
        except Exception as exc:
            rec.failed("recall", exc)
            return
        t1 = time.perf_counter()
        rec.recalled(found, asked_for, t1, (t1 - t0) * 1000)

    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=plan.clients, thread_name_prefix="bench-client") as pool:
            for n in paced(plan.total, plan.rate, start):
                pool.submit(one, n)
                if n % 50 == 0:
                    progress(stage, n, plan.total)
        elapsed = time.perf_counter() - start
        progress(stage, plan.total, plan.total)
        _drain(session(), rec, DRAIN_S)
    finally:
        for s in sessions:
            s.close()
    done = len(rec.write_ms) + len(rec.recall_ms)
    return {
        "requests": plan.total,
        "achieved_rate": round(done / elapsed, 1) if elapsed > 0 else None,
        "writes": len(rec.write_ms),
        "recalls": len(rec.recall_ms),
        "failures": dict(rec.failures),
        "write_ack_p50_ms": pct(rec.write_ms, 50),
        "write_ack_p99_ms": pct(rec.write_ms, 99),
        "recall_p50_ms": pct(rec.recall_ms, 50),
        "recall_p99_ms": pct(rec.recall_ms, 99),
        "ack_to_recallable_p50_ms": pct(rec.recallable_ms, 50),
        "ack_to_recallable_p99_ms": pct(rec.recallable_ms, 99),
        "not_recalled": len(rec.pending),
    }
