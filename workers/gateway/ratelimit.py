"""Per-key token buckets for writes and recalls.

A bucket holds at most ``burst`` tokens and refills at ``rate_per_s`` tokens a second
(the token bucket of Turner, 1986, as traffic shaping uses it); a request takes one token
per memory it writes or one per recall, and is refused when too few are left, with the
seconds until enough have refilled. Buckets live in the API process: with several
``serve`` processes behind a balancer each one limits on its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """``rate_per_s`` tokens a second, at most ``burst`` at once (``rate_per_s`` 0: no limit)."""

    rate_per_s: float
    burst: float


class TokenBuckets:
    """Token buckets by name (e.g. ``"write:<key id>"``), thread-safe. ``clock`` returns
    monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)

    def take(self, name: str, rate: Rate, tokens: float = 1.0) -> float:
        """Take ``tokens`` from bucket ``name``; returns 0.0 when taken, else the seconds
        until they would be there (nothing is taken then). A request larger than the
        burst is measured against a full bucket, so it waits for the bucket to fill."""
        if rate.rate_per_s <= 0:
            return 0.0
        now = self._clock()
        need = min(tokens, rate.burst)
        with self._lock:
            held, at = self._buckets.get(name, (rate.burst, now))
            held = min(rate.burst, held + (now - at) * rate.rate_per_s)
            if held >= need:
                self._buckets[name] = (held - need, now)
                return 0.0
            self._buckets[name] = (held, now)
            return (need - held) / rate.rate_per_s
