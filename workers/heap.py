"""The process heap of a long-running command, settled once its start-up is done.

CPython's cyclic garbage collector walks every tracked object of the oldest generation
on a full collection. After start-up that is mostly what start-up made (modules, the
stores' clients, loaded data), which lives as long as the process; on the project's
shared 2-core machine a full collection over it paused a recall by a few hundred
milliseconds, about once every hundred recalls: the whole of recall's 99th percentile
(README, "Benchmarks"). :func:`settle` moves those objects to the collector's permanent
generation, which "ignore[s] them in all the future collections" (``gc.freeze``,
Python's ``gc`` documentation); what is made afterwards is collected as before, and
reference counting still frees everything that is not in a cycle.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FullCollections", "settle"]


def settle() -> int:
    """Collect once, then freeze every object still tracked (``gc.freeze()``): later
    collections no longer walk them (they are never freed; nothing of start-up is meant
    to be). Returns how many objects were frozen. Call it once start-up is done."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass
class FullCollections:
    """Counts the full (oldest-generation) collections that run between :meth:`start`
    and :meth:`stop`, and their pause in milliseconds (wall clock), through
    ``gc.callbacks``."""

    count: int = 0
    pause_ms: float = 0.0
    _began: float | None = field(default=None, repr=False)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.count += 1
            self.pause_ms += (time.perf_counter() - self._began) * 1000.0
            self._began = None

    def start(self) -> FullCollections:
        """Begin counting (idempotent); returns self."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def stop(self) -> FullCollections:
        """Stop counting (idempotent); returns self."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        return self
