"""The write load of the benchmarks: the commands they write and the pace they write them at."""

from __future__ import annotations

import time
from collections.abc import Iterator

from contracts import MemoryWrite, utc_now


def fact(subject: str, content: str, turn_id: str) -> MemoryWrite:
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


def command(n: int) -> MemoryWrite:
    """The ``n``-th command of the steady write load: about 100 bytes of text, one of 50 subjects."""
    return fact(
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
