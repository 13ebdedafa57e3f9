"""Progress of a pass over the log, reported batch by batch."""

from __future__ import annotations

from collections.abc import Callable


class BatchProgress:
    """A per-batch callback (``FanOutRunner.catch_up``'s ``progress``) that adds up the
    records of each batch in ``done`` and reports ``progress(stage, done, total)``."""

    def __init__(self, progress: Callable[[str, int, int], None], stage: str, total: int) -> None:
        self._progress = progress
        self.stage = stage
        self.total = total
        self.done = 0

    def __call__(self, records: int) -> None:
        self.done += records
        self._progress(self.stage, self.done, self.total)
