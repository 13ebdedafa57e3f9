"""Several projections fed by one pass over the log.

A replay of all four projections, or an in-process catch-up, used to read, decode and
open every record once per projection. A :class:`FanOutRunner` reads each batch of
records once, decodes it once (``runner.decode_records`` from the lowest of the
projections' positions), opens the content of its write-type events once
(``ContentAccess.open_events``: one tombstone query and one key query per batch), and
then hands the same decoded batch to each projection's apply step
(``ProjectionRunner.apply``), which takes what that projection has not applied yet, with
its own retries, dead letters and stalls: the guarantees of a runner of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from ledger.eventlog import EventLog, LogRecord
from projections.base import ContentAccess, Projection
from projections.errors import ProjectionStalledError
from projections.opening import OpenedContent
from projections.runner import DecodedRecord, ProjectionRunner, decode_records, lowest_positions

log = logging.getLogger(__name__)


def opens_content(projection: Projection) -> bool:
    """Whether ``projection`` reads memory text (its ``apply_batch`` takes ``opened``)."""
    return bool(getattr(projection, "opens_content", False))


@dataclass
class PassTimes:
    """Where a pass spent its time, in seconds (``time.perf_counter``): decoding, opening
    content, and each projection's apply step (by projection id)."""

    decode_s: float = 0.0
    open_s: float = 0.0
    apply_s: dict[str, float] = field(default_factory=dict)


class FanOutRunner:
    """Runs several projections (one runner each) over one read and one decode of the
    log. ``content``: opens each batch's text once for the projections that read text
    (``None``: each opens it itself). ``times`` adds up where the time went."""

    def __init__(self, runners: Sequence[ProjectionRunner], content: ContentAccess | None = None) -> None:
        self.runners = list(runners)
        self._content = content if any(opens_content(r.projection) for r in self.runners) else None
        self.times = PassTimes(apply_s=dict.fromkeys(self.ids, 0.0))

    @property
    def ids(self) -> list[str]:
        """The projection ids fed, in order."""
        return [r.projection.id for r in self.runners]

    def positions(self) -> dict[int, int]:
        """Per partition, what every projection has applied (the lowest position)."""
        return lowest_positions([r.projection.positions() for r in self.runners])

    def handle(self, records: Sequence[LogRecord]) -> None:
        """Decode ``records`` (in log order) once and apply them to every projection.

        Each projection applies what lies after its own position. When one stalls (an
        unreadable erasure, a store down beyond its retry policy), the others still apply
        the batch; then the first stall is raised.

        Raises:
            ProjectionStalledError: the first projection that stalled.
        """
        if not records or not self.runners:
            return
        dones = [r.projection.positions() for r in self.runners]
        started = time.perf_counter()
        decoded = decode_records(records, lowest_positions(dones))
        decoded_at = time.perf_counter()
        opened = self._open(decoded)
        opened_at = time.perf_counter()
        self.times.decode_s += decoded_at - started
        self.times.open_s += opened_at - decoded_at
        stalls: list[ProjectionStalledError] = []
        for runner, done in zip(self.runners, dones, strict=True):
            began = time.perf_counter()
            try:
                runner.apply(decoded, done, opened)
            except ProjectionStalledError as stall:
                stalls.append(stall)
            finally:
                self.times.apply_s[runner.projection.id] += time.perf_counter() - began
        if stalls:
            raise stalls[0]

    def _open(self, decoded: Sequence[DecodedRecord]) -> OpenedContent | None:
        if self._content is None:
            return None
        return self._content.open_events([d.event for d in decoded if d.event is not None])

    def catch_up(
        self,
        log_: EventLog,
        batch_size: int = 500,
        progress: Callable[[int], None] | None = None,
        lock: AbstractContextManager[object] | None = None,
    ) -> int:
        """Apply every record from the lowest stored position of each partition to the
        current end of the log, each batch of ``batch_size`` records read once. Returns
        the records read; ``progress`` gets each batch's size; ``lock``, when given, is
        held while each batch is applied.

        Raises:
            ProjectionStalledError: a projection stalled (see :meth:`handle`).
        """
        handled = 0
        ends = log_.end_offsets()
        start = self.positions()
        for partition, end in ends.items():
            offset = start.get(partition, -1) + 1
            while offset < end:
                records = log_.read(partition, offset, min(batch_size, end - offset))
                if not records:
                    break
                with lock or nullcontext():
                    self.handle(records)
                handled += len(records)
                offset = records[-1].offset + 1
                if progress is not None:
                    progress(len(records))
        return handled
